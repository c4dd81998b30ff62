"""The site's groups as the checks walk them, each with its path in the stack file."""

from __future__ import annotations

from collections.abc import Iterator

from aisite.model import (
    NodeGroup,
    Site,
    SwitchGroup,
    SwitchGroupBase,
)


def node_groups(site: Site) -> Iterator[tuple[str, NodeGroup]]:
    yield "site.control_plane", site.control_plane
    for i, group in enumerate(site.gpu_nodes):
        yield f"site.gpu_nodes[{i}]", group
    if site.storage_nodes:
        yield "site.storage_nodes", site.storage_nodes


def switch_groups(site: Site) -> Iterator[tuple[str, SwitchGroupBase]]:
    sw = site.switches
    yield "site.switches.leaves", sw.leaves
    yield "site.switches.spines", sw.spines
    if sw.super_spines:
        yield "site.switches.super_spines", sw.super_spines
    if sw.management:
        yield "site.switches.management", sw.management
    if sw.oob:
        yield "site.switches.oob", sw.oob


def fabric_groups(site: Site) -> list[tuple[str, SwitchGroup]]:
    """The fabric's tiers that have switches, bottom first, with their keys under site.switches."""
    sw = site.switches
    groups = [("leaves", sw.leaves)]
    if sw.spines.count:
        groups.append(("spines", sw.spines))
    if sw.super_spines and sw.super_spines.count:
        groups.append(("super_spines", sw.super_spines))
    return groups
