"""The switch operating systems aisite configures (and `generic`, which it leaves to the site): each a module of
this package holding its `DRIVER` (an aisite.drivers.switch_os.SwitchOs), found here, so a new switch OS is one
module plus its role.

A driver says how Ansible reaches the switch, how its front-panel ports are named, how it peers on a fabric link,
what its role can render (BFD, split cages, access switches, graceful shutdown) and the limits its role renders
(BGP maximum-paths). Pure: no driver imports the rest of aisite."""

from __future__ import annotations

import importlib
import pkgutil

from aisite.drivers.switch_os import SwitchOs


def discover(path: list[str], package: str) -> dict[str, SwitchOs]:
    """Every module of the package at `path` (named `package`), each holding its DRIVER, by OS name."""
    found: dict[str, SwitchOs] = {}
    for info in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        driver = getattr(importlib.import_module(f"{package}.{info.name}"), "DRIVER", None)
        if not isinstance(driver, SwitchOs):
            raise TypeError(f"{package}.{info.name}: a switch OS module holds DRIVER, a SwitchOs")
        if driver.name in found:
            raise ValueError(f"switch OS {driver.name!r} registered twice")
        found[driver.name] = driver
    return found


SWITCH_OS: dict[str, SwitchOs] = discover(__path__, __name__)
# The ones aisite configures, in name order (what a fabric tier may run).
CONFIGURED: tuple[str, ...] = tuple(n for n, d in SWITCH_OS.items() if d.configured)
ACCESS: tuple[str, ...] = tuple(n for n, d in SWITCH_OS.items() if d.access)


def driver(name: str) -> SwitchOs:
    return SWITCH_OS[name]
