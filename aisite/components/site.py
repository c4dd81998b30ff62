"""A whole site: the layers in dependency order (BMCs, fabric, hosts, Kubernetes, platform, workloads)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi

from aisite.components.layers import AnsibleLayer, Cluster, Fabric, Hosts, LayerArgs, OutOfBand, Workloads
from aisite.components.platform import Jobs, JobsArgs, Platform, PlatformArgs
from aisite.plan import Plan
from aisite.render.inventory import inventory_yaml

LAYERS: tuple[type[AnsibleLayer], ...] = (OutOfBand, Fabric, Hosts, Cluster, Workloads)


@dataclass(frozen=True)
class SiteArgs:
    plan: Plan
    secret_env: dict[str, pulumi.Input[str]] = field(default_factory=dict)


class SiteDeployment(pulumi.ComponentResource):
    def __init__(self, args: SiteArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        site = args.plan.site
        super().__init__("aisite:site:Site", site, None, opts)
        layer_args = LayerArgs(plan=args.plan, inventory=inventory_yaml(args.plan), secret_env=args.secret_env)
        self.layers: dict[str, AnsibleLayer] = {}
        previous: pulumi.Resource | None = None
        for cls in LAYERS:
            layer = cls(layer_args, pulumi.ResourceOptions(parent=self, depends_on=[previous] if previous else None))
            self.layers[cls.layer] = layer
            previous = layer
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
