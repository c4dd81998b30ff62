"""The layers of a site. Each runs its playbook through a `command:local:Command` (`aisite play`) on the hosts
whose state (aisite.changes: the variables the layer reads, its playbook and roles) is not the one the site
repository's .aisite/ records as applied, and records what it applied there: the scope and the record
`aisite deploy --changed` and the reconciler use, so either may apply a change and the other will not run it
again. The Command's trigger is the hash of the layer's states: Pulumi calls play whenever one changed. A layer the
nodes pull themselves (gitops.pull_layers) has no Command. Each layer exports what the next one needs."""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi_command import local

from aisite.changes import LayerState
from aisite.components.bmc import BmcState, BmcStateArgs
from aisite.fields import secret_env
from aisite.layer_run import LayerRun
from aisite.paths import kubeconfig_path
from aisite.plan import FABRIC_ROLES, Plan, plain
from aisite.roots import SITE

# The stack's secret config key a kubeconfig may be given in (aisite:kubeconfig).
KUBECONFIG_KEY = "kubeconfig"


@dataclass(frozen=True)
class LayerArgs:
    """What every layer takes: the plan, the rendered inventory and the secrets Ansible may read."""

    plan: Plan
    inventory: str
    # Every layer's state per host (aisite.changes.layer_states), as `aisite deploy` computes it.
    states: Mapping[str, LayerState]
    # layer -> host -> the state last applied to it (aisite.deploy.applied_hosts of the site repository).
    applied: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # The Pulumi stack (its file is stacks/Pulumi.<stack>.yaml in the site repository: what `aisite provision`
    # reads).
    stack: str = ""
    # Environment variable -> secret value (a Pulumi secret Output): how credentials reach Ansible.
    secret_env: dict[str, pulumi.Input[str]] = field(default_factory=dict)


def aisite_command(
    parent: pulumi.Resource, name: str, words: str, args: LayerArgs, trigger: str, *, run: LayerRun | None = None
) -> local.Command:
    """`python -m aisite WORDS` in the site repository, with the secrets in its environment (a Pulumi secret) and
    `run` on its standard input; run again when `trigger` changes."""
    command = f"{shlex.quote(sys.executable)} -m aisite {words}"
    return local.Command(
        name,
        create=command,
        update=command,
        dir=str(SITE),
        stdin=run.model_dump_json() if run else None,
        environment=args.secret_env or None,
        triggers=[trigger],
        opts=pulumi.ResourceOptions(parent=parent),
    )


class AnsibleLayer(pulumi.ComponentResource):
    layer: str = ""
    type_token: str = ""

    def __init__(self, args: LayerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        site = args.plan.site
        super().__init__(self.type_token, f"{site}-{self.layer}", None, opts)
        # The same state `aisite deploy --changed` and `aisite reconcile` compare (aisite.changes).
        state = args.states[self.layer]
        self.trigger = state.trigger
        # The hosts this run applies the layer to: those whose state is not the one last applied.
        self.pending = state.pending(args.applied.get(self.layer, {}))
        self.ansible: local.Command | None = None
        if self.layer not in args.plan.pulled_layers:
            run = LayerRun(
                site=site, layer=self.layer, inventory=args.inventory, states=state.hosts, pending=self.pending
            )
            self.ansible = aisite_command(self, f"{site}-{self.layer}-ansible", "play", args, self.trigger, run=run)
        self.outputs = self.layer_outputs(args.plan)
        self.children(args)
        ran = {"stdout": self.ansible.stdout} if self.ansible else {"pulled_by_nodes": True}
        self.register_outputs({"trigger": self.trigger, "pending": self.pending, **ran, **self.outputs})

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
                pulumi.ResourceOptions(parent=self, depends_on=[self.ansible] if self.ansible else []),
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
        configured = pulumi.Config("aisite").get_secret(KUBECONFIG_KEY)
        ran = self.ansible.stdout if self.ansible else pulumi.Output.from_input("")
        # The stack's secret config where set (`pulumi config set --secret aisite:kubeconfig < FILE`: any machine
        # runs pulumi up), else the file the play fetched into the site repository's .aisite/, read once the play
        # ran (after its stdout). Secret from the start: encrypted in the state, masked in logs. None where no
        # cluster was made (the lab, whose nodes cannot install kubeadm).
        self.kubeconfig: pulumi.Output[str | None] = pulumi.Output.secret(
            configured if configured is not None else ran.apply(lambda _: path.read_text() if path.is_file() else None)
        )
        return {"api_endpoint": f"https://{k.endpoint}", "version": k.version, "kubeconfig": self.kubeconfig}


class Provisioning(pulumi.ComponentResource):
    """The site's network installs (`aisite provision STACK`, after the BMCs' layer): nodes already installed at
    the plan's version are left alone by provision itself, which records each node under .aisite/. Re-run when the
    provisioning plan changes (its hash is the trigger)."""

    def __init__(self, args: LayerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        site = args.plan.site
        super().__init__("aisite:site:Provisioning", f"{site}-provisioning", None, opts)
        assert args.plan.provisioning is not None
        self.trigger = hashlib.sha256(
            json.dumps(plain(args.plan.provisioning), sort_keys=True, default=str).encode()
        ).hexdigest()
        self.command = aisite_command(
            self, f"{site}-provisioning-install", f"provision {shlex.quote(args.stack)}", args, self.trigger
        )
        self.register_outputs({"trigger": self.trigger, "stdout": self.command.stdout})


class Workloads(AnsibleLayer):
    layer = "workloads"
    type_token = "aisite:site:Workloads"

    def layer_outputs(self, plan: Plan) -> dict[str, Any]:
        return {"workloads": [w.name for w in plan.workloads], "tenants": [t.name for t in plan.tenants]}
