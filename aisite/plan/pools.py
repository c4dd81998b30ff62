"""Address pools: cursors over a network that skip the gateway and every address written in the stack file."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from ipaddress import IPv4Address, IPv4Network

from aisite.model import NodeGroup, Site, SwitchGroupBase


class Pool:
    """Hands out host addresses of a network in order, skipping the gateway (first host) and reserved ones."""

    def __init__(self, network: IPv4Network, reserved: Iterable[IPv4Address] = ()) -> None:
        self.network = network
        self._reserved = {int(a) for a in reserved}
        self._next = int(network.network_address) + 2
        self._last = int(network.broadcast_address) - 1 if network.prefixlen < 31 else int(network.broadcast_address)

    @property
    def gateway(self) -> IPv4Address:
        return self.network.network_address + 1

    def take(self) -> IPv4Address:
        while self._next in self._reserved:
            self._next += 1
        if self._next > self._last:
            raise ValueError(f"address pool {self.network} is exhausted")
        address = IPv4Address(self._next)
        self._next += 1
        return address


def explicit_addresses(site: Site) -> Iterator[IPv4Address]:
    """Every address written in the stack file; pools skip them all."""
    yield site.control_plane.vip
    if site.provisioning:
        yield site.provisioning.boot_server
    for group in _node_groups(site):
        for spec in (group.bmc, *(n.bmc for n in group.nodes)):
            if spec and spec.address:
                yield spec.address
        for nspec in group.nodes:
            for iface in (nspec.management, nspec.storage):
                if iface and iface.address:
                    yield iface.address
    for sgroup in _switch_groups(site):
        for sw in sgroup.nodes:
            if sw.management and sw.management.address:
                yield sw.management.address


def _node_groups(site: Site) -> list[NodeGroup]:
    groups: list[NodeGroup] = [site.control_plane, *site.gpu_nodes]
    if site.storage_nodes:
        groups.append(site.storage_nodes)
    return groups


def _switch_groups(site: Site) -> list[SwitchGroupBase]:
    groups: list[SwitchGroupBase] = [site.switches.spines, site.switches.leaves]
    for extra in (site.switches.super_spines, site.switches.management, site.switches.oob):
        if extra:
            groups.append(extra)
    return groups
