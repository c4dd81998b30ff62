"""The layers of a site. Each runs its playbook through a `command:local:Command`, re-run when the inventory,
the playbook or a role it uses changes (the trigger is their hash), and exports what the next layer needs."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi_command import local

from aisite.changes import layer_state
from aisite.components.bmc import BmcState, BmcStateArgs
from aisite.fields import secret_env
from aisite.paths import kubeconfig_path
from aisite.plan import FABRIC_ROLES, Plan
from aisite.playbooks import ROOT
from aisite.render.inventory import inventory


@dataclass(frozen=True)
class LayerArgs:
    """What every layer takes: the plan, the rendered inventory and the secrets Ansible may read."""

    plan: Plan
    inventory: str
    # Environment variable -> secret value (a Pulumi secret Output): how credentials reach Ansible.
    secret_env: dict[str, pulumi.Input[str]] = field(default_factory=dict)


class AnsibleLayer(pulumi.ComponentResource):
    layer: str = ""
    type_token: str = ""

    def __init__(self, args: LayerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        site = args.plan.site
        super().__init__(self.type_token, f"{site}-{self.layer}", None, opts)
        playbook = f"playbooks/{self.layer}.yml"
        # The same state `aisite deploy --changed` and `aisite reconcile` compare (aisite.changes).
        self.trigger = layer_state(self.layer, inventory(args.plan)).trigger
        command = f"{shlex.quote(sys.executable)} -m aisite play --playbook {playbook} --inventory -"
        self.ansible = local.Command(
            f"{site}-{self.layer}-ansible",
            create=command,
            update=command,
            dir=str(ROOT),
            stdin=args.inventory,
            environment=args.secret_env or None,
            triggers=[self.trigger],
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.outputs = self.layer_outputs(args.plan)
        self.children(args)
        self.register_outputs({"trigger": self.trigger, "stdout": self.ansible.stdout, **self.outputs})

    def layer_outputs(self, plan: Plan) -> dict[str, Any]:
        return {}

    def children(self, args: LayerArgs) -> None:
        """Resources of the layer besides its playbook run."""


class OutOfBand(AnsibleLayer):
    layer = "oob"
    type_token = "aisite:site:OutOfBand"

    def children(self, args: LayerArgs) -> None:
        # Each node's power held through its BMC (after the play, which inventories the BMCs): `pulumi refresh`
        # shows a node switched off by hand, the next `pulumi up` switches it back on.
        self.bmcs = {}
        for node in args.plan.nodes:
            secret = args.plan.secrets.get(node.bmc.credentials, {})
            self.bmcs[node.name] = BmcState(
                f"{args.plan.site}-{node.name}-bmc",
                BmcStateArgs(
                    node=node.name,
                    protocol=node.bmc.protocol,
                    address=node.bmc.address,
                    port=node.bmc.port,
                    username=str(secret.get("username") or ""),
                    password=args.secret_env.get(secret_env(node.bmc.credentials), ""),
                    power=node.bmc.power,
                    tls_verify=node.bmc.tls_verify,
                ),
                pulumi.ResourceOptions(parent=self, depends_on=[self.ansible]),
            )

    def layer_outputs(self, plan: Plan) -> dict[str, Any]:
        return {"bmcs": {n.name: {"protocol": n.bmc.protocol, "address": n.bmc.address} for n in plan.nodes}}


class Fabric(AnsibleLayer):
    layer = "fabric"
    type_token = "aisite:site:Fabric"

    def layer_outputs(self, plan: Plan) -> dict[str, Any]:
        return {
            "switches": {
                s.name: {"role": s.role, "asn": s.asn, "loopback": s.loopback}
                for s in plan.switches
                if s.role in FABRIC_ROLES
            }
        }


class Hosts(AnsibleLayer):
    layer = "hosts"
    type_token = "aisite:site:Hosts"

    def layer_outputs(self, plan: Plan) -> dict[str, Any]:
        return {"hosts": {n.name: n.management.address for n in plan.nodes}}


class Cluster(AnsibleLayer):
    layer = "cluster"
    type_token = "aisite:site:Cluster"

    def layer_outputs(self, plan: Plan) -> dict[str, Any]:
        k = plan.kubernetes
        path = kubeconfig_path(plan.site)
        # Read once the play has fetched it (after its stdout), and secret from the start: encrypted in the state,
        # masked in logs. None where no cluster was made (the lab, whose nodes cannot install kubeadm).
        self.kubeconfig: pulumi.Output[str | None] = pulumi.Output.secret(
            self.ansible.stdout.apply(lambda _: path.read_text() if path.is_file() else None)
        )
        return {"api_endpoint": f"https://{k.endpoint}", "version": k.version, "kubeconfig": self.kubeconfig}


class Workloads(AnsibleLayer):
    layer = "workloads"
    type_token = "aisite:site:Workloads"

    def layer_outputs(self, plan: Plan) -> dict[str, Any]:
        return {"workloads": [w.name for w in plan.workloads], "tenants": [t.name for t in plan.tenants]}
