"""Quarantine: a failing node is tainted and cordoned, a recovered one released after a run of clean checks, and
never more nodes at once than the site's cap (a bad threshold must not drain the site). Pure: state and results
in, state and actions out; every action is recorded, exported as metrics and as the objects the API applies.

The taint keeps new pods off (NoSchedule) and Kueue's topology-aware flavors count a tainted node out of their
capacity (they tolerate the GPU taint alone); running pods are evicted by the drain that follows a quarantine."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from aisite.health.judge import CHECKS, NodeHealth
from aisite.members.budget import Budget
from aisite.plan import UNHEALTHY_TAINT

FIELD_MANAGER = "aisite-health"  # server-side apply: releasing is applying without the fields this manager owns


@dataclass(slots=True)
class NodeRecord:
    quarantined: bool = False
    clean: int = 0  # consecutive clean checks since the last failure
    reason: str = ""
    since: str = ""
    failing_since: str = ""  # when its current run of failed checks began ("" while clean)
    # A decision not yet seen applied on the cluster ("quarantine" or "release"): applied again every pass until
    # the apply succeeds (no cluster answered, or the apply failed).
    pending: str = ""
    rack: str = ""  # quarantined with its whole rack (its NVLink fabric at fault): under the racks' cap too


@dataclass(frozen=True, slots=True)
class Action:
    node: str
    kind: Literal["quarantine", "release", "held"]  # held: failing, but the cap or the site's budget is reached
    reason: str
    at: str


def cap(nodes: int, fraction: float, absolute: int | None) -> int:
    """How many nodes may be quarantined at once: the site's number, else its share of the nodes (at least one,
    so a small site can still take its bad node out)."""
    if absolute is not None:
        return absolute
    return max(1, math.floor(nodes * fraction))


def decide(
    state: dict[str, NodeRecord],
    results: dict[str, NodeHealth],
    limit: int,
    recover_after: int,
    now: str,
    *,
    budget: Budget | None = None,
    elsewhere: Iterable[str] = (),
    racks: dict[str, tuple[list[str], str]] | None = None,
    rack_limit: int = 0,
) -> tuple[dict[str, NodeRecord], list[Action]]:
    """The next state and the actions that lead there. A node with no result this round keeps its state. Beside
    its own cap, a quarantine takes its place in the site's disruption budget, with `elsewhere` (members out for
    maintenance) counted.

    `racks` are the racks whose NVLink fabric is at fault this round (name -> its trays, and why; each tray's
    result already carries the rack's problem): each is decided whole, every tray quarantined together or every
    one held. A rack is one more disruption like any other: its trays count under the node cap and in the site's
    budget beside what is already out, and at most `rack_limit` racks are out at once. A node cap of 0 (never
    quarantine) holds racks too."""
    new = {
        n: NodeRecord(r.quarantined, r.clean, r.reason, r.since, r.failing_since, r.pending, r.rack)
        for n, r in state.items()
    }
    racks = racks or {}
    in_rack = {t for trays, _ in racks.values() for t in trays}
    away = list(elsewhere)
    actions: list[Action] = []
    # Releases first: a node that recovered frees its place under the cap for one that fails this round.
    for node in sorted(n for n, h in results.items() if h.healthy):
        rec = new.setdefault(node, NodeRecord())
        rec.clean += 1
        if rec.quarantined and rec.clean >= recover_after:
            actions.append(Action(node, "release", f"{rec.clean} clean checks", now))
            new[node] = NodeRecord(clean=rec.clean, pending="release")
        else:
            rec.failing_since = ""
    failing = [n for n, h in results.items() if not h.healthy]
    for node in failing:
        rec = new.setdefault(node, NodeRecord())
        rec.failing_since = rec.failing_since or now
    actions += _decide_racks(new, results, racks, limit=limit, rack_limit=rack_limit, now=now, budget=budget, away=away)
    # A tray out with its rack that now fails on its own (its rack's fault gone) stays out, as a node: counted
    # under the node cap before any other node is decided.
    for node in failing:
        if node not in in_rack and new[node].rack:
            new[node].rack = ""
    # The worst first, so a cap reached keeps the likeliest-broken node out: by the gravest problem (a GPU's XID
    # or ECC failure before a rail down, before counters, disk and clock; never by how many a node reports, which
    # is the node's to inflate), then the longest failing.
    for node in sorted(failing, key=lambda n: (severity(results[n]), new[n].failing_since, n)):
        if node in in_rack:
            continue
        h = results[node]
        rec = new[node]
        rec.clean = 0
        problem, reason = summary(h)
        if rec.quarantined:
            rec.reason = reason
            continue
        if sum(r.quarantined for r in new.values()) >= limit:
            actions.append(Action(node, "held", f"cap of {limit} quarantined node(s) reached: {problem}", now))
            continue
        if budget is not None and node in budget.members and (over := _over_budget(budget, new, away, [node])):
            actions.append(Action(node, "held", f"site's disruption budget: {over}: {problem}", now))
            continue
        rec.quarantined, rec.reason, rec.since, rec.pending = True, reason, now, "quarantine"
        actions.append(Action(node, "quarantine", problem, now))
    return new, actions


def _over_budget(budget: Budget, new: dict[str, NodeRecord], away: list[str], more: list[str]) -> str | None:
    """Why taking `more` out too would break the site's budget, beside what is out already (members away for
    maintenance, and every node quarantined or not yet seen released: a release the cluster has not taken leaves
    the node tainted and cordoned)."""
    still_out = (n for n, r in new.items() if (r.quarantined or r.pending == "release") and n in budget.members)
    return budget.problem([*away, *still_out, *more])


def _decide_racks(
    new: dict[str, NodeRecord],
    results: dict[str, NodeHealth],
    racks: dict[str, tuple[list[str], str]],
    *,
    limit: int,
    rack_limit: int,
    now: str,
    budget: Budget | None,
    away: list[str],
) -> list[Action]:
    """Each faulted rack's trays, together: all quarantined with the rack, or, where the racks' cap, the node cap
    or the site's budget cannot take them all, those not yet out all held for one reason (a tray already out on
    its own stays out as a node)."""
    actions: list[Action] = []
    for rack, (trays, why) in sorted(racks.items()):
        present = [t for t in trays if t in results]
        for t in present:
            new[t].clean = 0
        already = any(new[t].quarantined and new[t].rack == rack for t in present)
        out = {r.rack for r in new.values() if r.quarantined and r.rack} - {rack}
        todo = [t for t in present if not new[t].quarantined]
        cause = ""
        if limit == 0:
            cause = "quarantine is off (node cap 0)"
        elif not already and len(out) >= rack_limit:
            cause = f"cap of {rack_limit} quarantined rack(s) reached"
        elif (n := sum(r.quarantined for r in new.values()) + len(todo)) > limit:
            cause = f"its {len(todo)} tray(s) would make {n} quarantined nodes, over the cap of {limit}"
        elif budget is not None and (over := _over_budget(budget, new, away, todo)):
            cause = f"site's disruption budget: {over}"
        if cause:
            actions += [Action(t, "held", f"{cause}: rack {rack}: {why}", now) for t in todo]
            continue
        for t in present:
            rec = new[t]
            if t in todo:
                rec.quarantined, rec.since, rec.pending = True, now, "quarantine"
                actions.append(Action(t, "quarantine", f"rack {rack}: {why}", now))
            rec.reason, rec.rack = "gpu-fabric", rack
    return actions


def severity(h: NodeHealth) -> int:
    """The gravest of a node's problems (0 gravest); a check this version does not know ranks last."""
    return min((CHECKS.get(p.check, len(CHECKS)) for p in h.problems), default=len(CHECKS))


def summary(h: NodeHealth, shown: int = 5) -> tuple[str, str]:
    """A failing node's problems, gravest first and the first few only (a node may report thousands), and the
    check of the gravest: the taint's value."""
    ranked = sorted(h.problems, key=lambda p: CHECKS.get(p.check, len(CHECKS)))
    text = "; ".join(f"{p.check} {p.subject}: {p.message}" for p in ranked[:shown])
    if len(ranked) > shown:
        text += f"; +{len(ranked) - shown} more"
    return text, ranked[0].check if ranked else ""


def node_object(node: str, record: NodeRecord | None) -> dict[str, Any]:
    """What the health manager applies to a Node (server-side): cordon and taint while quarantined; nothing (so
    its fields are released) otherwise."""
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}
    if record and record.quarantined:
        obj["spec"] = {
            "unschedulable": True,
            "taints": [{"key": UNHEALTHY_TAINT, "value": record.reason or "unknown", "effect": "NoSchedule"}],
        }
    return obj


def eviction(pod: str, namespace: str) -> dict[str, Any]:
    """The drain's request for one pod (the API honours its PodDisruptionBudget)."""
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}


def metrics(state: dict[str, NodeRecord], actions: list[Action], limit: int) -> str:
    """Prometheus text for node exporter's textfile collector (or the controller's endpoint)."""
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    reg = CollectorRegistry()
    q = Gauge("aisite_health_quarantined", "1 while the node is quarantined", ["node", "reason"], registry=reg)
    for node, rec in sorted(state.items()):
        q.labels(node, rec.reason if rec.quarantined else "").set(1 if rec.quarantined else 0)
    Gauge("aisite_health_quarantine_cap", "Nodes that may be quarantined at once", registry=reg).set(limit)
    racks = Gauge(
        "aisite_health_rack_quarantined",
        "Trays quarantined with their rack (its NVLink fabric)",
        ["rack"],
        registry=reg,
    )
    for rack in sorted({r.rack for r in state.values() if r.quarantined and r.rack}):
        racks.labels(rack).set(sum(r.quarantined and r.rack == rack for r in state.values()))
    held = Gauge("aisite_health_held", "1 for a failing node the cap kept in service", ["node"], registry=reg)
    for a in actions:
        if a.kind == "held":
            held.labels(a.node).set(1)
    return generate_latest(reg).decode()
