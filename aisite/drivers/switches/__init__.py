"""The switch operating systems aisite configures (and `generic`, which it leaves to the site): each a module of
this package holding its `DRIVER` (an aisite.drivers.switch_os.SwitchOs), found here, so a new switch OS is one
module plus its role.

A driver says how Ansible reaches the switch, how its front-panel ports are named, how it peers on a fabric link,
what its role can render (BFD, split cages, access switches, graceful shutdown) and the limits its role renders
(BGP maximum-paths). Pure: no driver imports the rest of aisite."""

from __future__ import annotations

from aisite.drivers.registry import discover
from aisite.drivers.switch_os import SwitchOs

SWITCH_OS: dict[str, SwitchOs] = discover(__path__, __name__, SwitchOs)
# The ones aisite configures, in name order (what a fabric tier may run).
CONFIGURED: tuple[str, ...] = tuple(n for n, d in SWITCH_OS.items() if d.configured)
ACCESS: tuple[str, ...] = tuple(n for n, d in SWITCH_OS.items() if d.access)


def driver(name: str) -> SwitchOs:
    return SWITCH_OS[name]
