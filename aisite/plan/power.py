"""The GPU nodes in the data hall's racks and what each rack draws, against the site's budget (site.facility)."""

from __future__ import annotations

from aisite.catalog import NODE_POWER
from aisite.model import GpuGroup, Site, group_racks
from aisite.plan.types import Node, PowerRack


def node_power_w(group: GpuGroup) -> int:
    """The most one node of the group draws: the catalog's figure for its model, else the site's; 0: unknown."""
    known = NODE_POWER.get(group.model)
    if known and known.max_w:
        return known.max_w
    return round(group.power_kw * 1000) if group.power_kw else 0


def budget_w(site: Site) -> int:
    return round(site.facility.rack_power_kw * 1000) if site.facility else 0


def group_power_racks(site: Site, group: GpuGroup) -> list[tuple[str, int, int]]:
    """(rack, first node's index in the group, nodes in it): a rack-scale group's own racks; other groups'
    nodes `per_rack` a rack, else as many as the budget allows (at least one: the checks refuse a node over it)."""
    own = group_racks(group)
    if own:
        return own
    watts = node_power_w(group)
    per = group.per_rack or (max(1, budget_w(site) // watts) if watts else group.size or 1)
    count = -(-group.size // per)
    return [(f"{group.name}-r{r + 1:02d}", r * per, min(per, group.size - r * per)) for r in range(count)]


def power_racks(site: Site, nodes: tuple[Node, ...]) -> tuple[PowerRack, ...]:
    """Every GPU node's rack and each rack's maximum draw; none without site.facility."""
    if site.facility is None:
        return ()
    by_group: dict[str, list[str]] = {}
    for n in nodes:
        if n.role == "gpu":
            by_group.setdefault(n.group, []).append(n.name)
    out: list[PowerRack] = []
    for g in site.gpu_nodes:
        members, watts = by_group.get(g.name, []), node_power_w(g)
        known = NODE_POWER.get(g.model)
        for name, first, count in group_power_racks(site, g):
            held = tuple(members[first : first + count])
            out.append(
                PowerRack(
                    name, g.name, g.model, held, watts * len(held), budget_w(site), known.cooling if known else ""
                )
            )
    return tuple(out)
