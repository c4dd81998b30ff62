"""The site's one disruption budget (site.maintenance), shared by maintenance, upgrades, firmware and the health
quarantine: whatever takes a node or switch out of service asks it first, counting what is already out.

Within it: at most `max_unavailable_gpus` GPUs out; one control-plane node (etcd keeps its quorum) and one storage
node (the site's exports) at a time; one switch per tier (a spine out leaves the others carrying every rail; two
leaves out could take two rails of one unit); with `one_node_per_unit`, never two nodes of one scalable unit. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from aisite.plan import Plan

# Roles of which one member at a time may be out: the control plane (etcd's quorum), storage (the site's exports)
# and every switch tier. Planes are not told apart: one spine or super-spine of the whole site at a time.
ONE_AT_A_TIME = ("control-plane", "storage", "super-spine", "spine", "leaf", "management", "oob")


@dataclass(frozen=True, slots=True)
class Member:
    """A node or switch as the budget counts it."""

    name: str
    role: str  # control-plane | gpu | storage | super-spine | spine | leaf | management | oob
    gpus: int
    unit: int | None  # the scalable unit of a GPU node


@dataclass(frozen=True, slots=True)
class Budget:
    max_gpus: int
    one_node_per_unit: bool
    members: dict[str, Member]

    def problem(self, out: Iterable[str]) -> str | None:
        """Why these members may not all be out of service at once; None when the budget holds them. A name the
        site no longer has (a stale quarantine record) takes nothing."""
        chosen = [self.members[n] for n in sorted(set(out)) if n in self.members]
        gpus = sum(m.gpus for m in chosen)
        if gpus > self.max_gpus:
            return f"{gpus} GPUs out of service, over the site's budget of {self.max_gpus}"
        for role in ONE_AT_A_TIME:
            names = [m.name for m in chosen if m.role == role]
            if len(names) > 1:
                return f"{len(names)} {role} members out at once ({', '.join(names)}); one at a time"
        if self.one_node_per_unit:
            seen: dict[int, str] = {}
            for m in chosen:
                if m.unit is None or m.role != "gpu":
                    continue
                if m.unit in seen:
                    return f"{seen[m.unit]} and {m.name} are both of scalable unit {m.unit} (one_node_per_unit)"
                seen[m.unit] = m.name
        return None

    def admits(self, out: Iterable[str], name: str) -> bool:
        return self.problem([*out, name]) is None

    def gpus_out(self, out: Iterable[str]) -> int:
        return sum(self.members[n].gpus for n in set(out) if n in self.members)


def site_budget(plan: Plan) -> Budget:
    """The budget of a plan's nodes and switches (a plan without site.maintenance: its defaults' share)."""
    members = {
        n.name: Member(n.name, n.role, n.gpu.count if n.gpu else 0, n.scalable_unit if n.gpu else None)
        for n in plan.nodes
    }
    members |= {s.name: Member(s.name, s.role, 0, None) for s in plan.switches}
    m = plan.maintenance
    largest = max((mb.gpus for mb in members.values()), default=0)
    if m is None:
        return Budget(largest, False, members)
    return Budget(m.max_unavailable_gpus, m.one_node_per_unit, members)
