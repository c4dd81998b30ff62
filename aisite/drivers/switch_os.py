"""A switch operating system as aisite drives it (`SwitchOs`); each one is a module of aisite/drivers/switches
holding its DRIVER, and that package is the registry."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# A front-panel port's name from (port, 1-based; speed in Gbps; cages split in how many; lanes per cage), where a
# split port is named after its cage.
PortNamer = Callable[[int, int, int, int], str]

# How Ansible reaches a Linux switch (Cumulus, SONiC, FRR on a white box): SSH, as root through become.
LINUX_SSH: Mapping[str, Any] = {"ansible_connection": "ansible.builtin.ssh", "ansible_become": True}


@dataclass(frozen=True, slots=True)
class Platform:
    """A switch model as an OS's platform files describe it: each split's breakout mode (the exact name the OS's
    configuration must carry) and the hardware SKU whose default that mode is ("" where none is: the base SKU's
    cages are broken out by configuration)."""

    name: str  # the OS's platform name (SONiC: x86_64-nvidia_sn5600-r0)
    modes: Mapping[int, str]  # ports a cage -> the mode's name
    hwskus: Mapping[int, str]  # ports a cage -> the SKU that boots in that mode; 1 -> the base SKU
    source: str

    def hwsku(self, split: int) -> str:
        return self.hwskus.get(split) or self.hwskus[1]


def mode_speeds(mode: str) -> tuple[int, tuple[int, ...]]:
    """(ports, speeds in Gb/s, the default first) of a breakout mode named as SONiC's platform.json names them:
    `2x400G[200G,100G]` is 2 ports at 400G, or 200G or 100G."""
    count, _, rest = mode.partition("x")
    default, _, alternatives = rest.partition("[")
    speeds = [default, *filter(None, alternatives.rstrip("]").split(","))]
    return int(count), tuple(int(x.removesuffix("G")) for x in speeds)


@dataclass(frozen=True, slots=True)
class SwitchOs:
    name: str
    # The collection's role that configures it (fabric.yml's play for `fabric_os_<name>`); "" when aisite does not
    # configure it (`generic`).
    role: str
    port: PortNamer
    # Inventory variables: how Ansible reaches it on a real site.
    connection: Mapping[str, Any] = field(default_factory=dict)
    # How it peers on a fabric link (its role's template): BGP unnumbered over IPv6 link-local, or /31 addresses.
    peering: Literal["unnumbered", "numbered"] = "numbered"
    bfd: bool = True  # its role can enable BFD on a session
    bfd_why: str = ""  # why not, where it cannot
    breakout: bool = True  # its role renders split cages (more ports than cages)
    # The switch models whose breakout modes its configuration must name exactly (SONiC's BREAKOUT_CFG), by model:
    # a split on a model not here is refused. Empty where the OS names no mode (Cumulus splits a port by its count).
    platforms: Mapping[str, Platform] = field(default_factory=dict)
    access: bool = False  # its role configures management and out-of-band switches (VLANs, access ports)
    # BGP graceful shutdown when a rollout takes it out: playbooks/maintenance-switch.yml drives it through FRR's
    # vtysh (a new OS with another CLI adds its block there); otherwise its sessions reset when the change is
    # applied, and the rollout says so.
    graceful_shutdown: bool = False
    # BGP maximum-paths as its role renders it (its role's default, a test holds them equal): the widest ECMP.
    max_paths: int = 64
    # The releases its role renders for, lowest and highest (major, minor); None: any. Why, where it is said.
    releases: tuple[tuple[int, int], tuple[int, int]] | None = None
    releases_why: str = ""
    # RoCE settings its role cannot change (the value it fixes) and cannot set at all (left at the plan's default).
    fixed_roce: Mapping[str, int] = field(default_factory=dict)
    unset_roce: tuple[str, ...] = ()
    title: str = ""  # how the checks name it ("Cumulus Linux")
    renders: str = ""  # what its role renders ("NVUE"), as the checks name it

    @property
    def configured(self) -> bool:
        return bool(self.role)


def linux_port(port: int, speed_gbps: int, split: int, lanes: int) -> str:
    """swpN, and swpNsM for the Mth port of split cage N (Cumulus Linux; FRR on Linux switches as the lab names
    them)."""
    if split > 1:
        cage, sub = divmod(port - 1, split)
        return f"swp{cage + 1}s{sub}"
    return f"swp{port}"
