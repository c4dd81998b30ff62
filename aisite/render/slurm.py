"""Slurm's topology/tree from the plan (`slurm/topology.conf`), for sites that schedule with Slurm: the same
levels as Kueue's Topology. A rail node cables to every leaf of its unit's block, so the block, not one leaf, is
the lowest switch Slurm sees (its name: the unit's); pods (three tiers) above, the fabric at the top."""

from __future__ import annotations

from itertools import groupby

from hostlist import collect_hostlist  # type: ignore[import-untyped]

from aisite.plan import Node, Plan


def hostlist(names: list[str]) -> str:
    """Slurm's hostlist form (gpu[01-32]), by python-hostlist."""
    return str(collect_hostlist(names))


def topology_conf(plan: Plan) -> str | None:
    """The file's text, or None for a site without rail nodes (nothing for Slurm to place by)."""
    nodes = [n for n in plan.by_role("gpu") if n.scalable_unit is not None]
    if not nodes:
        return None

    def unit(n: Node) -> int:
        return n.scalable_unit or 0

    lines = [
        f"# Rendered by aisite for site {plan.site}; do not edit.",
        "# TopologyPlugin=topology/tree: a switch per scalable unit (its block of leaves), pods above them in three",
        "# tiers, the fabric at the top. GPU nodes without rails are left out: they share no fabric switch.",
    ]
    pods: dict[str, list[str]] = {}
    for su, members in groupby(sorted(nodes, key=unit), key=unit):
        group = list(members)
        lines.append(f"SwitchName=su{su} Nodes={hostlist([n.name for n in group])}")
        if "aisite.io/pod" in group[0].labels:
            pods.setdefault(f"pod{group[0].labels['aisite.io/pod']}", []).append(f"su{su}")
    for pod, units in pods.items():
        lines.append(f"SwitchName={pod} Switches={hostlist(units)}")
    children = list(pods) or sorted({f"su{unit(n)}" for n in nodes}, key=lambda s: int(s[2:]))
    if len(children) > 1:
        lines.append(f"SwitchName=fabric Switches={hostlist(children)}")
    return "\n".join(lines) + "\n"
