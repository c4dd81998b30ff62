"""Which changes between two plans need a node or switch out of service, and the waves they roll in (pure).

A disruptive change is one a member cannot take while it serves: a Kubernetes version (kubeadm's procedure drains
each node for its kubelet), a GPU driver branch (the loaded module must go: drain and reboot), a switch's OS
(reboot), a switch's routing, breakout or RoCE settings (its sessions and queues reset), a node's rail addressing
(its jobs' RDMA paths), a node's firmware that differs from its baseline (the reset applies it), its rail NICs'
firmware settings (taken at the next boot). Members the old plan did not have are not in service yet and roll with
nothing.

Waves, after Kubespray's upgrade-cluster (serial, control plane first) and the GPU Operator's upgrade states: the
control plane one node at a time in the order `kubeadm init` ran, then storage nodes one at a time, then GPU nodes
(a canary wave first, then waves by scalable unit, each as large as the budget admits beside what is already out),
then switches one per tier, top tier first."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from aisite.members.budget import Budget, site_budget
from aisite.plan import FABRIC_ROLES, NicConfig, Plan, Switch

# The order members roll in; a wave never mixes two of these.
PHASES = ("control-plane", "storage", "gpu", "super-spine", "spine", "leaf", "management", "oob")
# A switch's settings whose change resets its BGP sessions or its ports (a breakout re-creates them). Ports and
# subnets to hosts, VLANs and access ports are applied in place: a node's own rail addressing is its disruption.
_SWITCH_CONFIG = ("asn", "loopback", "bfd", "breakout", "neighbors")


@dataclass(frozen=True, slots=True)
class Disruption:
    name: str
    reasons: tuple[str, ...]
    reboot: bool


@dataclass
class Rollout:
    """What a change takes out of service and how: the waves, the members the budget cannot admit now (with why),
    and the changes no rollout makes."""

    disruptions: dict[str, Disruption] = field(default_factory=dict)
    waves: list[list[str]] = field(default_factory=list)
    blocked: dict[str, str] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    out: list[str] = field(default_factory=list)  # already out of service (quarantined), counted in the budget
    # Members that need the change and are out already: changed while out, no wave of their own.
    while_out: list[str] = field(default_factory=list)
    max_gpus: int = 0

    @property
    def empty(self) -> bool:
        return not self.disruptions and not self.refused

    def to_dict(self) -> dict[str, Any]:
        return {
            "disruptions": {n: asdict(d) for n, d in self.disruptions.items()},
            "waves": self.waves,
            "blocked": self.blocked,
            "refused": self.refused,
            "out_of_service": self.out,
            "changed_while_out": self.while_out,
            "max_unavailable_gpus": self.max_gpus,
        }


def _minor(version: str) -> tuple[int, int]:
    major, minor, *_ = version.split(".")
    return int(major), int(minor)


def kubernetes_refusals(old: str, new: str) -> list[str]:
    """kubeadm's rule: upgrades go one minor at a time and never back (kubelets may not be newer than the API
    server, and kubeadm cannot downgrade)."""
    if old == new:
        return []
    a, b = _minor(old), _minor(new)
    if b < a or (b == a and tuple(map(int, new.split("."))) < tuple(map(int, old.split(".")))):
        return [f"kubernetes.version {old} -> {new}: a downgrade; kubeadm upgrades only forward"]
    if b[0] != a[0] or b[1] - a[1] > 1:
        return [f"kubernetes.version {old} -> {new}: skips a minor; kubeadm upgrades one minor at a time"]
    return []


def _switch_reasons(old: Switch, new: Switch, roce_changed: bool) -> tuple[list[str], bool]:
    """Why a switch must go out of service, and whether it reboots (a new OS release)."""
    reasons = []
    reboot = old.os_version != new.os_version and bool(old.os_version or new.os_version)
    if reboot:
        reasons.append(f"{new.os} {old.os_version or '?'} -> {new.os_version or '?'}")
    moved = [f for f in _SWITCH_CONFIG if getattr(old, f) != getattr(new, f)]
    if moved:
        reasons.append("configuration: " + ", ".join(moved))
    if roce_changed and new.role in FABRIC_ROLES:
        reasons.append("RoCE QoS")
    return reasons, reboot


def _nic_reason(old: Sequence[NicConfig], new: Sequence[NicConfig]) -> str:
    """A rail NIC firmware change in words: each setting that moves, once however many NICs it moves on."""
    before = {(c.pci, k): v for c in old for k, v in c.settings}
    after = {(c.pci, k): v for c in new for k, v in c.settings}
    moved = sorted(
        {
            f"{k} {before.get((pci, k), '-')} -> {after.get((pci, k), '-')}"
            for pci, k in before.keys() | after.keys()
            if before.get((pci, k)) != after.get((pci, k))
        }
    )
    return "rail NIC firmware: " + (", ".join(moved) or "NICs renumbered")


def disruptions(old: Plan, new: Plan, firmware: Mapping[str, Sequence[str]] | None = None) -> dict[str, Disruption]:
    """Per member in service in both plans, the changes it must be out of service for; `firmware`: per node, how
    its BMC's firmware differs from its baseline (aisite.firmware), which a reset applies."""
    firmware = firmware or {}
    found: dict[str, Disruption] = {}
    before = {n.name: n for n in old.nodes}
    k_old, k_new = old.kubernetes.version, new.kubernetes.version
    for n in new.nodes:
        was = before.get(n.name)
        if was is None:
            continue
        reasons: list[str] = []
        reboot = False
        if k_old != k_new:
            reasons.append(f"Kubernetes {k_old} -> {k_new}")
        if was.gpu and n.gpu and was.gpu.driver_branch != n.gpu.driver_branch:
            reasons.append(f"NVIDIA driver R{was.gpu.driver_branch} -> R{n.gpu.driver_branch}")
            reboot = True
        if [(r.interface, r.address, r.prefix, r.gateway, r.mtu) for r in was.rails] != [
            (r.interface, r.address, r.prefix, r.gateway, r.mtu) for r in n.rails
        ]:
            reasons.append("rail addressing")
        if was.nics != n.nics:
            reasons.append(_nic_reason(was.nics, n.nics))
            reboot = True
        if firmware.get(n.name):
            reasons += firmware[n.name]
            reboot = True
        if reasons:
            found[n.name] = Disruption(n.name, tuple(reasons), reboot)
    switches = {s.name: s for s in old.switches}
    roce_changed = old.roce != new.roce
    for s in new.switches:
        if s.name not in switches:
            continue
        reasons, reboot = _switch_reasons(switches[s.name], s, roce_changed)
        if reasons:
            found[s.name] = Disruption(s.name, tuple(reasons), reboot)
    return found


def _order(plan: Plan, names: Iterable[str], budget: Budget) -> list[str]:
    """Members in rolling order: by phase; the control plane as `kubeadm init` and its joins ran; GPU nodes by
    scalable unit, then name; the rest by name."""
    first = {n: i for i, n in enumerate(plan.kubernetes.control_plane)}

    def key(name: str) -> tuple[int, int, int, str]:
        m = budget.members[name]
        return PHASES.index(m.role), first.get(name, 0), m.unit if m.unit is not None else -1, name

    return sorted(names, key=key)


def waves(
    budget: Budget, ordered: list[str], out: Iterable[str], canary: int
) -> tuple[list[list[str]], dict[str, str]]:
    """Waves of `ordered` (already in rolling order), each admitted by the budget beside `out`: the first GPU wave
    at most `canary` nodes, the others as many as fit. A member that does not fit even alone is blocked, with why."""
    already = sorted(set(out))
    result: list[list[str]] = []
    blocked: dict[str, str] = {}
    by_phase: dict[str, list[str]] = {}
    for name in ordered:
        by_phase.setdefault(budget.members[name].role, []).append(name)
    for phase, names in by_phase.items():
        limit = canary if phase == "gpu" else len(names)
        left = list(names)
        while left:
            wave: list[str] = []
            for name in left:
                if len(wave) < limit and budget.admits([*already, *wave], name):
                    wave.append(name)
            if not wave:
                for name in left:
                    blocked[name] = budget.problem([*already, name]) or "the budget admits no more"
                break
            result.append(wave)
            left = [n for n in left if n not in wave]
            limit = len(names)
    return result, blocked


def rollout(
    old: Plan,
    new: Plan,
    out: Iterable[str] = (),
    firmware: Mapping[str, Sequence[str]] | None = None,
    only: Collection[str] | None = None,
) -> Rollout:
    """The disruptive changes from `old` to `new` (and the firmware drift read from the BMCs) and their waves under
    `new`'s budget, with `out` (members already out of service, e.g. quarantined) counted against it; `only`:
    the members in service (None: every member both plans have)."""
    budget = site_budget(new)
    found = {n: d for n, d in disruptions(old, new, firmware).items() if only is None or n in only}
    held = sorted(n for n in set(out) if n in budget.members)
    canary = new.maintenance.canary_nodes if new.maintenance else 1
    planned, blocked = waves(budget, _order(new, [n for n in found if n not in held], budget), held, canary)
    refused = kubernetes_refusals(old.kubernetes.version, new.kubernetes.version)
    while_out = [n for n in held if n in found]
    return Rollout(found, planned, blocked, refused, held, while_out, budget.max_gpus)
