"""A whole site: the layers in dependency order (BMCs, provisioning, fabric, hosts, Kubernetes, platform,
workloads)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi

from aisite.changes import layer_states, site_layer_inputs
from aisite.components.layers import (
    AnsibleLayer,
    Cluster,
    Fabric,
    Hosts,
    LayerArgs,
    OutOfBand,
    Provisioning,
    Workloads,
)
from aisite.components.platform import Jobs, JobsArgs, Platform, PlatformArgs
from aisite.deploy import applied_hosts
from aisite.plan import Plan
from aisite.render.inventory import inventory_text

LAYERS: tuple[type[AnsibleLayer], ...] = (OutOfBand, Fabric, Hosts, Cluster, Workloads)


@dataclass(frozen=True)
class SiteArgs:
    plan: Plan
    secret_env: dict[str, pulumi.Input[str]] = field(default_factory=dict)
    # The Pulumi stack: its file in the site repository is what `aisite provision` reads.
    stack: str = ""


class SiteDeployment(pulumi.ComponentResource):
    def __init__(self, args: SiteArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        site = args.plan.site
        super().__init__("aisite:site:Site", site, None, opts)
        # Each layer's state per host and what the site repository records as applied: the same as
        # `aisite deploy --changed` reads (aisite.changes), so both run a change only where it is not applied.
        inv, contents = site_layer_inputs(args.plan)
        layer_args = LayerArgs(
            plan=args.plan,
            inventory=inventory_text(inv),
            states=layer_states([cls.layer for cls in LAYERS], inv, contents),
            applied=applied_hosts(site),
            stack=args.stack,
            secret_env=args.secret_env,
        )
        self.layers: dict[str, AnsibleLayer] = {}
        self.provisioning: Provisioning | None = None
        previous: pulumi.Resource | None = None
        for cls in LAYERS:
            layer = cls(layer_args, pulumi.ResourceOptions(parent=self, depends_on=[previous] if previous else None))
            self.layers[cls.layer] = layer
            previous = layer
            if isinstance(layer, OutOfBand) and args.plan.provisioning is not None and args.stack:
                # Installs boot through the BMCs the layer before configured; the fabric and hosts follow them.
                self.provisioning = Provisioning(layer_args, pulumi.ResourceOptions(parent=self, depends_on=[layer]))
                previous = self.provisioning
            if isinstance(layer, Cluster):
                # On the cluster the layer before made, through the kubeconfig it exports (a secret).
                self.platform = Platform(
                    PlatformArgs(plan=args.plan, kubeconfig=layer.kubeconfig),
                    pulumi.ResourceOptions(parent=self, depends_on=[layer]),
                )
                previous = self.platform
            if isinstance(layer, Workloads):
                self.jobs = Jobs(
                    JobsArgs(plan=args.plan, platform=self.platform),
                    pulumi.ResourceOptions(parent=self, depends_on=[layer]),
                )
        self.register_outputs({name: layer.trigger for name, layer in self.layers.items()})
