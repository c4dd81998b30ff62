"""Networks and addresses: no overlap, every address inside its network, none given twice, none taken from a named
server."""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import IPv4Address, IPv4Network

from aisite.checks.common import switch_groups
from aisite.errors import Problem
from aisite.model import (
    NodeGroup,
    Site,
)
from aisite.plan.pools import is_own_address, named_addresses


def named_networks(site: Site) -> list[tuple[str, IPv4Network]]:
    n = site.networks
    nets = [
        ("site.networks.oob", n.oob),
        ("site.networks.management", n.management),
        ("site.networks.loopbacks", n.loopbacks),
        ("site.networks.p2p", n.p2p),
        ("site.networks.storage", n.storage),
        ("site.networks.pods", n.pods),
        ("site.networks.services", n.services),
    ]
    nets.extend((f"site.networks.rails[{i}]", net) for i, net in enumerate(n.rails))
    return nets


def check_networks(site: Site, out: list[Problem]) -> None:
    nets = named_networks(site)
    # Sorted by start address, only neighbours can overlap: O(n log n) instead of every pair.
    ordered = sorted(nets, key=lambda x: (int(x[1].network_address), -x[1].num_addresses))
    widest: tuple[str, IPv4Network] | None = None
    for path, net in ordered:
        if widest and net.overlaps(widest[1]):
            out.append(Problem(path, f"{net} overlaps {widest[0]} ({widest[1]})"))
        if widest is None or int(net.broadcast_address) > int(widest[1].broadcast_address):
            widest = (path, net)


def node_addresses(path: str, group: NodeGroup) -> Iterator[tuple[str, str, IPv4Address]]:
    """(key path, network key, address) of every address written for a group's nodes."""
    if group.bmc and group.bmc.address:
        yield f"{path}.bmc.address", "oob", group.bmc.address
    for i, spec in enumerate(group.nodes):
        base = f"{path}.nodes[{i}]"
        if spec.bmc and spec.bmc.address:
            yield f"{base}.bmc.address", "oob", spec.bmc.address
        if spec.management and spec.management.address:
            yield f"{base}.management.address", "management", spec.management.address
        if spec.storage and spec.storage.address:
            yield f"{base}.storage.address", "storage", spec.storage.address


def check_addresses(site: Site, groups: list[tuple[str, NodeGroup]], out: list[Problem]) -> None:
    entries: list[tuple[str, str, IPv4Address]] = [("site.control_plane.vip", "management", site.control_plane.vip)]
    if site.provisioning:
        entries.append(("site.provisioning.boot_server", "management", site.provisioning.boot_server))
    for path, group in groups:
        if group.bmc and group.bmc.address and group.size > 1:
            out.append(Problem(f"{path}.bmc.address", "a group-wide BMC address would be shared by every node"))
        entries.extend(node_addresses(path, group))
    for path, sgroup in switch_groups(site):
        for i, spec in enumerate(sgroup.nodes):
            if spec.management and spec.management.address:
                entries.append((f"{path}.nodes[{i}].management.address", "oob", spec.management.address))
    nets = {"oob": site.networks.oob, "management": site.networks.management, "storage": site.networks.storage}
    used: dict[IPv4Address, str] = {}
    for path, netkey, addr in entries:
        net = nets[netkey]
        if addr not in net:
            out.append(Problem(path, f"{addr} is outside site.networks.{netkey} ({net})"))
        elif net.prefixlen < 31 and addr in (net.network_address, net.broadcast_address, net.network_address + 1):
            role = "gateway" if addr == net.network_address + 1 else "network or broadcast"
            out.append(Problem(path, f"{addr} is the {role} address of site.networks.{netkey}"))
        owner = path.rsplit(".", 1)[0]
        if addr in used:
            out.append(Problem(path, f"{addr} is already used by {used[addr]}"))
        else:
            used[addr] = owner
    check_named_addresses(site, {addr: path for path, _, addr in entries if is_own_address(path)}, out)


def check_named_addresses(site: Site, given: dict[IPv4Address, str], out: list[Problem]) -> None:
    """A server the site names (DNS, NTP, a registry) must not be an address given to a node by hand, nor sit in
    a rail or point-to-point network, whose addresses are laid out by position and cannot skip it."""
    positional = {f"site.networks.rails[{i}]": n for i, n in enumerate(site.networks.rails)}
    positional["site.networks.p2p"] = site.networks.p2p
    for path, addr in named_addresses(site):
        if is_own_address(path):
            continue
        if addr in given:
            out.append(Problem(given[addr], f"{addr} is named by {path}: a node given it would answer for that server"))
        for key, net in positional.items():
            if addr in net:
                out.append(
                    Problem(
                        path,
                        f"{addr} is inside {key} ({net}), whose addresses go to switches and nodes by "
                        "position: name a server outside it",
                    )
                )
