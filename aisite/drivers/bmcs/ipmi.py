"""IPMI BMCs through pyghmi: one session per BMC and process, power, one-time boot and the little IPMI tells of a
machine; whether an address speaks IPMI, asked without a session."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

from aisite.drivers.bmc import POWER, BmcError, BmcProtocol, Facts, PowerState, Target

# pyghmi keeps one session per BMC and process: a second Command to the same BMC waits on the first one's session
# forever, so a process reuses its Command.
SESSIONS: dict[tuple[str, int, str, str], Any] = {}
LOCK = threading.Lock()


def session(t: Target) -> Any:
    from pyghmi import exceptions as ipmi_exc
    from pyghmi.ipmi import command

    key = (t.address, t.port, t.username, t.password)
    try:
        with LOCK:
            if key not in SESSIONS:
                SESSIONS[key] = command.Command(bmc=t.address, userid=t.username, password=t.password, port=t.port)
            return SESSIONS[key]
    except ipmi_exc.IpmiException as exc:
        raise BmcError(f"IPMI BMC {t.address}:{t.port}: no session ({exc}): wrong credentials or no answer") from exc


def call(t: Target, what: str, fn: Callable[[Any], Any]) -> Any:
    from pyghmi import exceptions as ipmi_exc

    try:
        return fn(session(t))
    except ipmi_exc.IpmiException as exc:
        raise BmcError(f"IPMI BMC {t.address}:{t.port} refused {what}: {exc}") from exc


def facts(t: Target) -> Facts:
    def read(c: Any) -> Facts:
        power = str(c.get_power()["powerstate"])
        power = power if power in POWER else "unknown"
        boot = c.get_bootdev()
        device = {"network": "pxe", "optical": "cd", "hd": "hdd"}.get(str(boot.get("bootdev")), "none")
        return Facts(protocol="ipmi", address=t.address, power=power, boot_override=device)

    return call(t, "a power read", read)  # type: ignore[no-any-return]


# IPMI 1.5 "Get Channel Authentication Capabilities" without a session: every IPMI BMC answers it (ipmitool
# sends the same first), so one datagram tells whether an address speaks IPMI before a session is tried.
PING = bytes.fromhex(
    "0600ff07"  # RMCP: version 6, no ACK, class IPMI
    "00"
    "00000000"
    "00000000"
    "09"  # IPMI 1.5 session header: no auth, no session, 9-byte message
    "2018c8"
    "810038"
    "8e04"
    "b5"  # BMC, App netFn, checksum; sequence, command 0x38; channel E, admin; checksum
)


def answers(address: str, port: int = 623, timeout: float = 1.0) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        try:
            s.sendto(PING, (address, port))
            data, _ = s.recvfrom(512)
        except OSError:
            return False
    return len(data) > 4 and data[:4] == b"\x06\x00\xff\x07"


def power(t: Target, state: PowerState) -> None:
    call(t, f"power {state}", lambda c: c.set_power(state, wait=True))


def boot(t: Target, device: str) -> None:
    bootdev = {"pxe": "network", "cd": "optical"}[device]
    call(t, f"a one-time {device} boot", lambda c: c.set_bootdev(bootdev, persist=False))


# IPMI 2.0's limits: a 20-byte password and a 16-byte user name (IPMI v2.0 spec, Set User Password and Set User
# Name commands).
DRIVER = BmcProtocol(
    "ipmi",
    623,
    answers,
    facts,
    power,
    boot,
    rank=1,
    title="IPMI",
    password_max=20,
    password_who="IPMI 2.0 BMCs",
    username_max=16,
)
