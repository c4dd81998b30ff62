"""The steps of a rollout as Ansible runs them (the executor of aisite.maintenance.run):

- cordon: the health check's current problems are the member's baseline; the Node is cordoned.
- drain: first the Kueue workloads running on the members wait to end, up to the site's `drain_timeout_s`; those
  still running are preempted through Kueue and requeued (aisite.maintenance.jobs: "cordon now, drain when the job
  ends"); then `kubernetes.core.k8s_drain` evicts the rest (PodDisruptionBudgets honoured, DaemonSets kept).
- apply: each layer whose state moved for the member, run on it alone; what applied is recorded as `deploy` does,
  so a later `deploy --changed` does not run it again. The cluster layer upgrades a member on an older Kubernetes
  (kubeadm's procedure: `upgrade apply` on the first control-plane node, `upgrade node` on the others), which the
  rollout's order makes the control plane first.
- reboot: `ansible.builtin.reboot`, where the change needs one (a container cannot reboot: said, not faked).
- verify: the health check now; a problem the baseline did not have fails the member, and so does any problem of
  the driver or its NVLink fabric (the change installs the plan's driver: a wrong or unloaded one after it is the
  change's, whatever the node had before). Then a quick acceptance of the GPU nodes that passed (aisite.accept.quick:
  their node checks and a pair each way on every rail with a node in service); where nothing can measure, said.
- uncordon.

A node out for its firmware (aisite.firmware) has its BIOS settings set as pending and its release requested
through its BMC at apply; at reboot, where settings are still pending or the release unchanged after the OS's
reboot (a container's emulated BMC), its BMC restarts it and the step waits until the machine answers from a new
boot (its boot_id; a container is said, not waited for); verify reads the BMC again and fails on what differs.

A fabric switch's cordon is BGP graceful shutdown, its drain a wait until no peer spreads a route over it, its
verify every session Established, its uncordon graceful shutdown off and a wait until every peer routes over it
again (playbooks/maintenance-switch.yml; FRR here, other OSes say they have none). Cordon, drain and uncordon of
nodes need the cluster's admin kubeconfig; without one (the lab runs no API server) they are reported skipped and
the rollout goes on. `run` is how a playbook is run (the CLI passes one with progress)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from aisite import firmware, oob
from aisite.changes import layer_states, site_layer_inputs
from aisite.deploy import RunResult, applied_hosts
from aisite.health.site import from_status
from aisite.layer_run import apply_layer, host_errors
from aisite.maintenance.jobs import Drained, drain_timeout_s
from aisite.maintenance.state import RolloutState
from aisite.plan import FABRIC_ROLES, FirmwareBaseline, Plan

# The layers a member's own change runs in (the platform's and workloads' run on the controller, not a member).
MEMBER_LAYERS = ("oob", "fabric", "hosts", "cluster")
# What a layer is told in a rollout: the cluster layer upgrades a member whose kubelet is older than the site's by
# kubeadm's procedure (anywhere else it stops on it, changing nothing); the fabric layer keeps a drained switch's
# BGP graceful shutdown on through its reload (the switch's uncordon turns it off).
ROLLOUT_VARS: dict[str, dict[str, Any]] = {
    "cluster": {"kubernetes_upgrade": True},
    "fabric": {"fabric_frr_graceful_shutdown": True},
}


# After a BMC's reset, how long a machine may take to boot again (a DGX's POST alone takes minutes) and how often it
# is asked.
BOOT_WAIT_S = 1800.0
BOOT_POLL_S = 15.0

# Checks a member must pass after its change even where its baseline had them failing: what a change sets up.
NEVER_EXCUSED = ("gpu-driver", "gpu-fabric")


class Runner(Protocol):
    def __call__(self, playbook: str, limit: str | None, extravars: Mapping[str, Any]) -> RunResult: ...


def _boot_ids(result: RunResult) -> dict[str, str]:
    """Each machine's boot identity as it reported it (/proc/sys/kernel/random/boot_id): a UUID, else left out."""
    out = {}
    for host, raw in dict(result.stats.get("boot_ids") or {}).items():
        try:
            out[str(host)] = str(uuid.UUID(str(raw)[:64]))
        except ValueError:
            continue
    return out


class FirmwareOps(Protocol):
    """What a rollout does to a node's firmware through its BMC (aisite.firmware; a scripted one in tests)."""

    def read(self, t: oob.Target, baseline: FirmwareBaseline) -> firmware.Reading: ...
    def apply(self, t: oob.Target, baseline: FirmwareBaseline) -> list[str]: ...
    def reset(self, t: oob.Target, timeout: float = ...) -> None: ...


@dataclass
class AnsibleSteps:
    plan: Plan
    run: Runner
    secrets: Mapping[str, object] = field(default_factory=dict)  # secret env variable -> value, for the BMCs
    bmc: FirmwareOps = firmware
    skipped: list[str] = field(default_factory=list)  # what a step could not do here, said
    # The quick acceptance of members given back (aisite.accept.quick.for_rollout), or why there is none.
    accept: Callable[[list[str]], tuple[dict[str, str], list[str], list[str]]] | None = None
    no_accept: str = "no quick acceptance was asked for"
    accepted: list[str] = field(default_factory=list)  # what the quick acceptance measured, said
    done: list[str] = field(default_factory=list)  # what a step asked a BMC for, said
    installed: dict[str, str] = field(default_factory=dict)  # per member, what its verify step found installed
    # The wait for the members' Kueue workloads (aisite.maintenance.jobs.drain_jobs on the cluster), or None where
    # there is no API server (the drain playbook then says so).
    jobs: Callable[[list[str]], Drained] | None = None
    drained: list[str] = field(default_factory=list)  # what the wait for jobs did, said
    # How long a machine may take to boot again after its BMC's reset, and how that wait is timed (tests script it).
    boot_wait_s: float = BOOT_WAIT_S
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    _reset: list[str] = field(default_factory=list, init=False)  # the nodes this reboot step had their BMCs reset

    def __call__(self, step: str, members: list[str], state: RolloutState) -> dict[str, str]:
        handler: Callable[[list[str], RolloutState], dict[str, str]] = getattr(self, f"_{step}")
        return handler(members, state)

    def _nodes(self, members: list[str]) -> list[str]:
        """The members that are nodes (switches have no Node object and no health check)."""
        names = {n.name for n in self.plan.nodes}
        return [m for m in members if m in names]

    def _switches(self, action: str, members: list[str]) -> dict[str, str]:
        """A step on the members that are fabric switches (playbooks/maintenance-switch.yml)."""
        # The switches with BGP sessions (a management or out-of-band switch has none to drain).
        names = {s.name for s in self.plan.switches if s.role in FABRIC_ROLES}
        switches = [m for m in members if m in names]
        if not switches:
            return {}
        r = self.run("maintenance-switch.yml", ",".join(switches), {"maintenance_action": action})
        self._said(r)
        return host_errors(r, switches)

    def _cluster(self, action: str, members: list[str]) -> dict[str, str]:
        timeout = drain_timeout_s(self.plan)
        nodes = self._nodes(members)
        if not nodes:
            return {}
        r = self.run(
            "maintenance.yml",
            None,
            {"maintenance_action": action, "maintenance_nodes": nodes, "maintenance_drain_timeout_s": timeout},
        )
        self._said(r)
        return {} if r.ok else dict.fromkeys(nodes, "; ".join(r.failures)[:500] or r.status)

    def _firmware(
        self, members: list[str], state: RolloutState, act: Callable[[str, oob.Target, FirmwareBaseline], str]
    ) -> dict[str, str]:
        """`act` on the BMC of each member out for its firmware (a reason firmware gave); per member its error."""
        nodes = {n.name: n for n in self.plan.nodes}
        errors = {}
        for name in members:
            node = nodes.get(name)
            ours = any(r.startswith(f"{firmware.REASON}:") for r in state.members[name].reasons)
            if node is None or node.firmware is None or not ours:
                continue
            try:
                why = act(name, oob.node_target(self.plan, node, self.secrets), node.firmware)
            except oob.BmcError as exc:
                why = str(exc)
            if why:
                errors[name] = f"firmware: {why}"
        return errors

    def _firmware_apply(self, name: str, t: oob.Target, baseline: FirmwareBaseline) -> str:
        self.done += [f"{t.address}: {done}" for done in self.bmc.apply(t, baseline)]
        return ""

    def _firmware_reset(self, name: str, t: oob.Target, baseline: FirmwareBaseline) -> str:
        """Reset through the BMC where the reboot left settings pending or the release unchanged (a container's
        BMC, or a machine the OS did not reset)."""
        if firmware.owed_reset(baseline, self.bmc.read(t, baseline)):
            self.bmc.reset(t)
            self._reset.append(name)
        return ""

    def _wait_booted(self, nodes: list[str], before: Mapping[str, str]) -> dict[str, str]:
        """Until each node answers with another boot than `before` (its BMC reset it: the BMC says the power is on
        long before the OS is up, and the old OS may still answer while it shuts down); per node not back, why."""
        left = list(nodes)
        deadline = self.clock() + self.boot_wait_s
        while left:
            r = self.run("maintenance-reboot.yml", ",".join(left), {"maintenance_reboot": False})
            now = _boot_ids(r)
            left = [n for n in left if now.get(n) in (None, before[n])]
            if not left or self.clock() >= deadline:
                break
            self.sleep(BOOT_POLL_S)
        return dict.fromkeys(left, f"did not boot again within {self.boot_wait_s:g} s of its BMC's reset")

    def _firmware_verify(self, name: str, t: oob.Target, baseline: FirmwareBaseline) -> str:
        reading = self.bmc.read(t, baseline)
        left = firmware.drift(baseline, reading)
        if left:
            return "still differs after the reset: " + "; ".join(r.removeprefix(f"{firmware.REASON}: ") for r in left)
        if baseline.bios_version:
            # What was installed, as the BMC says it and as the site pinned it: the rollout's record keeps both.
            self.installed[name] = f"BIOS release {reading.bios_version} (BMC), image sha256 {baseline.bios_sha256}"
            self.done.append(f"{t.address}: {self.installed[name]}")
        return ""

    def _said(self, result: RunResult) -> None:
        for host, by_role in dict(result.stats.get("skipped") or {}).items():
            for role, reasons in dict(by_role).items():
                self.skipped += [f"{host} ({role}): {x}" for x in reasons]

    def _health(self, members: list[str], now: bool) -> tuple[dict[str, list[str]], dict[str, str]]:
        nodes = self._nodes(members)
        if not nodes:
            return {}, {}
        r = self.run("health-status.yml", ",".join(nodes), {"health_now": now})
        states = dict(r.stats.get("health_states") or {})
        found = {}
        errors = {}
        for n in nodes:
            if states.get(n) is None:
                errors[n] = "no health check to read (role node_health)"
                continue
            h = from_status(n, states[n])
            found[n] = sorted(f"{p.check} {p.subject}" for p in h.problems)
        return found, errors

    def _cordon(self, members: list[str], state: RolloutState) -> dict[str, str]:
        baseline, errors = self._health(members, now=False)
        for n, problems in baseline.items():
            state.members[n].baseline = problems
        # A member without a baseline is not cordoned (its cordon failed); the others are.
        ready = [n for n in members if n not in errors]
        return errors | self._cluster("cordon", ready) | self._switches("cordon", ready)

    def _drain(self, members: list[str], state: RolloutState) -> dict[str, str]:
        errors = self._jobs(self._nodes(members))
        ready = [m for m in members if m not in errors]
        return errors | self._cluster("drain", ready) | self._switches("drain", ready)

    def _jobs(self, nodes: list[str]) -> dict[str, str]:
        """Cordon now, drain when the job ends: the nodes' Kueue workloads end or are preempted through Kueue."""
        if not nodes or self.jobs is None:
            return {}
        d = self.jobs(nodes)
        self.drained += [f"ended on its own: {w}" for w in d.ended]
        self.drained += [f"preempted through Kueue: {w}" for w in d.preempted]
        self.drained += [f"requeued: {w}" for w in d.requeued]
        self.skipped += [f"{', '.join(nodes)} (drain): {x}" for x in d.said]
        return d.errors

    def _uncordon(self, members: list[str], state: RolloutState) -> dict[str, str]:
        return self._cluster("uncordon", members) | self._switches("uncordon", members)

    def _on(self, hosts: list[str], extravars: dict[str, Any]) -> Callable[[str, str | None], RunResult]:
        """A run of a playbook on `hosts` by name, even where they are a whole layer (the rollout's runner takes a
        limit always)."""

        def run(playbook: str, _limit: str | None) -> RunResult:
            return self.run(playbook, ",".join(hosts), extravars)

        return run

    def _apply(self, members: list[str], state: RolloutState) -> dict[str, str]:
        states = layer_states(MEMBER_LAYERS, *site_layer_inputs(self.plan))
        applied = applied_hosts(self.plan.site)
        errors: dict[str, str] = {}
        for layer, layer_state in states.items():
            if layer in self.plan.pulled_layers:
                continue
            pending = [h for h in layer_state.pending(applied.get(layer, {})) if h in members and h not in errors]
            if not pending:
                continue
            r, failed = apply_layer(
                self.plan.site, layer_state, pending, self._on(pending, ROLLOUT_VARS.get(layer, {}))
            )
            self._said(r)
            errors |= {h: f"{layer}: {why}" for h, why in failed.items()}
        ready = [n for n in members if n not in errors]
        return errors | self._firmware(ready, state, self._firmware_apply)

    def _reboot(self, members: list[str], state: RolloutState) -> dict[str, str]:
        r = self.run("maintenance-reboot.yml", ",".join(members), {})
        self._said(r)
        errors = host_errors(r, members)
        booted = _boot_ids(r)  # machines, not containers
        self._reset.clear()
        errors |= self._firmware([n for n in members if n not in errors], state, self._firmware_reset)
        reset = [n for n in self._reset if n not in errors]
        self.skipped += [
            f"{n} (maintenance): reset by its BMC: a container's OS does not restart with it; nothing to wait for"
            for n in reset
            if n not in booted
        ]
        return errors | self._wait_booted([n for n in reset if n in booted], booted)

    def _verify(self, members: list[str], state: RolloutState) -> dict[str, str]:
        found, errors = self._health(members, now=True)
        for n, problems in found.items():
            excused = set(state.members[n].baseline)
            new = sorted(p for p in problems if p not in excused or p.split(" ", 1)[0] in NEVER_EXCUSED)
            if new:
                errors[n] = "new health problems: " + ", ".join(new)
        for n, why in self._firmware(members, state, self._firmware_verify).items():
            errors[n] = f"{errors[n]}; {why}" if n in errors else why
        for n in members:
            if n in self.installed:
                state.members[n].installed = self.installed[n]
        gpus = {n.name for n in self.plan.by_role("gpu")}
        ready = [n for n in members if n in gpus and n not in errors]
        if ready and self.accept is None:
            self.skipped += [f"{n} (maintenance): quick acceptance: {self.no_accept}" for n in ready]
        elif ready and self.accept is not None:
            failed, said, measured = self.accept(ready)
            self.skipped += [f"{', '.join(ready)} (acceptance): {x}" for x in said]
            self.accepted += measured
            errors |= {n: why for n, why in failed.items() if n in ready}
        return errors | self._switches("verify", members)
