"""A BMC as aisite drives it from Python: how to reach one (`Target`), what it says of its machine (`Facts`), its
error, and a protocol's driver (`BmcProtocol`: power, one-time boot, facts, whether an address speaks it). Each
protocol is a module of aisite/drivers/bmcs holding its DRIVER; that package is the registry."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aisite.foreign import clean

PowerState = str  # "on" | "off"
ONE_TIME_BOOT = ("pxe", "cd")


class BmcError(Exception):
    """A BMC that did not answer, refused the credentials or refused an action; the message says which."""


@dataclass(frozen=True, slots=True)
class Target:
    """How to reach one BMC."""

    protocol: str  # redfish | ipmi
    address: str
    port: int
    username: str
    password: str = field(repr=False)
    tls_verify: bool = True
    timeout: float = 10.0


@dataclass(frozen=True, slots=True)
class Facts:
    protocol: str
    address: str
    power: PowerState
    name: str | None = None
    manufacturer: str | None = None
    model: str | None = None
    serial: str | None = None
    uuid: str | None = None
    macs: tuple[str, ...] = ()
    boot_override: str | None = None  # pxe | cd | hdd | none, where the BMC says


MAC = re.compile(r"[0-9a-f]{2}(?::[0-9a-f]{2}){5}")
POWER = {"on", "off", "poweringon", "poweringoff", "paused"}


def word(value: Any, limit: int = 64) -> str | None:
    """A BMC's string, printable and bounded (it reaches tables, records and proposed stack changes)."""
    return clean(value, limit) if isinstance(value, str) and value else None


def mac(value: Any) -> str | None:
    """A MAC as a BMC reports it, normalised, or None where it is not one."""
    text = value.strip().lower().replace("-", ":") if isinstance(value, str) else ""
    return text if MAC.fullmatch(text) else None


@dataclass(frozen=True, slots=True)
class BmcProtocol:
    name: str  # as the stack says it (bmc.protocol)
    port: int  # where its BMCs answer unless the stack says otherwise
    answers: Callable[[str, int, float], bool]  # (address, port, timeout): does something there speak it
    facts: Callable[[Target], Facts]
    power: Callable[[Target, PowerState], None]  # "on" | "off", acknowledged by the BMC
    boot: Callable[[Target, str], None]  # a one-time boot from one of ONE_TIME_BOOT
    # The order discovery asks an undeclared address in, lowest first: a BMC speaking two is driven over the first.
    rank: int = 0
    title: str = ""  # as messages name it ("IPMI")
    tls: bool = False  # it speaks TLS (a certificate the site may choose not to verify)
    firmware: bool = False  # BIOS settings and firmware updates through it (aisite.firmware)
    accounts: bool = False  # the bmc role keeps the site's local accounts on it (oob.accounts)
    # What its BMCs accept of a credential (bytes), and a character its user names cannot carry, with why.
    password_max: int | None = None
    password_who: str = ""  # whose limit that is ("IPMI 2.0 BMCs"), as messages say it
    username_max: int | None = None
    username_forbids: tuple[str, str] | None = None
