"""Address pools: cursors over a network that skip the gateway and every address the stack file names."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from ipaddress import IPv4Address, IPv4Network
from urllib.parse import urlsplit

from pydantic import BaseModel

from aisite.model import Site

# A dotted quad, checked before ipaddress parses it: most of a site's strings are names, not addresses.
_QUAD = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")


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


def _address_in(text: str) -> IPv4Address | None:
    """The IPv4 address a string names: the whole string, a URL's host or a host:port's host; None for a name."""
    host = text
    if "://" in text:
        try:
            host = urlsplit(text).hostname or ""
        except ValueError:
            return None
    elif text.count(":") == 1:
        host = text.split(":", 1)[0]
    if not _QUAD.fullmatch(host):
        return None
    try:
        return IPv4Address(host)
    except ValueError:
        return None


def _walk(value: object, path: str) -> Iterator[tuple[str, IPv4Address]]:
    if isinstance(value, IPv4Address):
        yield path, value
    elif isinstance(value, str):
        address = _address_in(value)
        if address is not None:
            yield path, address
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _walk(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _walk(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, f"{path}.{key}")


def named_addresses(site: Site) -> Iterator[tuple[str, IPv4Address]]:
    """(key path, address) of every address the stack file names anywhere: nodes' and BMCs' addresses given by hand,
    the VIP, the boot server, DNS and NTP servers, and the hosts of registries, mirrors and URLs written as
    addresses. The pools hand out none of them, whatever network they fall in."""
    return _walk(site, "site")


def explicit_addresses(site: Site) -> Iterator[IPv4Address]:
    """Every address written in the stack file; pools skip them all."""
    return (address for _, address in named_addresses(site))


# The addresses a stack file gives a node, BMC or switch of its own: they are taken, not reserved.
_OWN = re.compile(r"\.(?:nodes\[\d+\]\.)?(?:management|storage|bmc)\.address$")


def is_own_address(path: str) -> bool:
    """Whether a named address's key path is a node's, BMC's or switch's own address given by hand."""
    return bool(_OWN.search(path))


def reserved_addresses(site: Site, networks: dict[str, IPv4Network]) -> Iterator[tuple[str, IPv4Address, str]]:
    """(network key, address, why) of what each pooled network keeps back: its gateway and every address the stack
    names inside it for something other than a node's own interface, in the networks' order then the file's; an
    address named twice says both."""
    named = [(path, a) for path, a in named_addresses(site) if not is_own_address(path)]
    for key, net in networks.items():
        whys: dict[IPv4Address, list[str]] = {net.network_address + 1: ["gateway"]}
        for path, address in named:
            if address in net:
                whys.setdefault(address, []).append(path)
        for address, why in whys.items():
            yield key, address, ", ".join(why)
