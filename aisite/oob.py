"""BMCs from Python: facts, power and one-time boot over Redfish (sushy) and IPMI (pyghmi), and the discovery of
a site's out-of-band range. The bmc Ansible role drives the BMCs during a deploy; this module serves
`aisite oob discover` and the Pulumi BMC provider."""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import subprocess
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from aisite import foreign
from aisite.fields import secret_env
from aisite.foreign import clean
from aisite.plan import Node, Plan

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


# ------------------------------------------------------------------------------------------ Redfish (sushy)
def redfish_root(t: Target) -> Any:
    """A Redfish BMC's service root (a sushy Sushy), or the BMC's error."""
    import sushy  # imported here: slow, and only BMC commands need it
    import urllib3
    from sushy.connector import Connector

    if not t.tls_verify:
        # The site chose not to verify this BMC's certificate (oob.tls_verify: false); say so once, not per call.
        warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
    url = f"https://{t.address}:{t.port}/redfish/v1"
    connector = Connector(
        url,
        verify=t.tls_verify,
        # Every answer is read by the one bounded reader before sushy parses it (json's recursion would not be).
        response_callback=lambda response: _bounded_answer(t, response),
        # A BMC that refuses the credentials or an action says so once; no retries that lock the account.
        server_side_retries=0,
        default_request_timeout=int(t.timeout),
        connect_timeout=int(t.timeout),
    )
    return _redfish_call(
        t,
        lambda: sushy.Sushy(
            url,
            username=t.username,
            password=t.password,
            verify=t.tls_verify,
            connector=connector,
            server_side_retries=0,
        ),
    )


# The most of one Redfish answer read (a system, its BIOS attributes or a collection: tens of KiB).
REDFISH_LIMIT = 4 << 20


def _bounded_answer(t: Target, response: Any) -> None:
    """A BMC's answer with a body, read by aisite.foreign.loads (within REDFISH_LIMIT and its depth) before sushy
    parses it; one refused is that BMC's error."""
    import sushy

    body = response.content
    if body and "json" in str(response.headers.get("Content-Type", "")).lower():
        try:
            foreign.loads(body, REDFISH_LIMIT)
        except foreign.ForeignJSONError as exc:
            raise sushy.exceptions.SushyError(f"its answer to {response.request.method} is refused: {exc}") from None


def _redfish_call(t: Target, fn: Callable[[], Any]) -> Any:
    import sushy

    try:
        return fn()
    except sushy.exceptions.AccessError as exc:
        raise BmcError(f"Redfish BMC {t.address}:{t.port} refused the credentials (HTTP {exc.status_code})") from exc
    except sushy.exceptions.ConnectionError as exc:
        raise BmcError(f"Redfish BMC {t.address}:{t.port} did not answer") from exc
    except sushy.exceptions.SushyError as exc:
        raise BmcError(f"Redfish BMC {t.address}:{t.port}: {exc}") from exc


def redfish_system(t: Target, root: Any = None) -> Any:
    """The one system a Redfish BMC manages (a sushy System), or the BMC's error."""
    service = root if root is not None else redfish_root(t)
    members = _redfish_call(t, lambda: service.get_system_collection().get_members())
    if len(members) != 1:
        raise BmcError(f"Redfish BMC {t.address}:{t.port} manages {len(members)} systems; aisite expects one")
    return members[0]


MAC = re.compile(r"[0-9a-f]{2}(?::[0-9a-f]{2}){5}")
_POWER = {"on", "off", "poweringon", "poweringoff", "paused"}


def _word(value: Any, limit: int = 64) -> str | None:
    """A BMC's string, printable and bounded (it reaches tables, records and proposed stack changes)."""
    return clean(value, limit) if isinstance(value, str) and value else None


def mac(value: Any) -> str | None:
    """A MAC as a BMC reports it, normalised, or None where it is not one."""
    text = value.strip().lower().replace("-", ":") if isinstance(value, str) else ""
    return text if MAC.fullmatch(text) else None


def _redfish_facts(t: Target) -> Facts:
    system = redfish_system(t)
    try:
        return _redfish_read(t, system)
    except BmcError:
        raise
    except Exception as exc:  # a BMC's body sushy did not expect: that BMC's error, not a traceback
        raise BmcError(f"Redfish BMC {t.address}:{t.port} answered what it cannot read: {clean(exc, 160)}") from exc


def _redfish_read(t: Target, system: Any) -> Facts:
    try:
        reported = [e.mac_address for e in system.ethernet_interfaces.get_members()]
    except Exception:
        reported = []
    macs = tuple(m for m in (mac(r) for r in reported) if m)
    boot = system.boot
    target = _word(str(boot.target.value).lower(), 16) if boot and boot.target else None
    power = str(system.power_state.value).lower() if system.power_state else "unknown"
    return Facts(
        protocol="redfish",
        address=t.address,
        power=power if power in _POWER else "unknown",
        name=_word(system.name),
        manufacturer=_word(system.manufacturer),
        model=_word(system.model),
        serial=_word(system.serial_number),
        uuid=_word(system.uuid),
        macs=macs,
        boot_override=target,
    )


def _redfish_power(t: Target, state: PowerState) -> None:
    import sushy  # imported here: slow, and only BMC commands need it

    system = redfish_system(t)
    reset = sushy.ResetType.ON if state == "on" else sushy.ResetType.FORCE_OFF
    try:
        system.reset_system(reset)
    except sushy.exceptions.SushyError as exc:
        raise BmcError(f"Redfish BMC {t.address}:{t.port} refused power {state}: {exc}") from exc


def _redfish_boot(t: Target, device: str) -> None:
    import sushy  # imported here: slow, and only BMC commands need it

    system = redfish_system(t)
    target = {"pxe": sushy.BootSource.PXE, "cd": sushy.BootSource.CD}[device]
    try:
        system.set_system_boot_options(target=target, enabled=sushy.BootSourceOverrideEnabled.ONCE)
    except sushy.exceptions.SushyError as exc:
        raise BmcError(f"Redfish BMC {t.address}:{t.port} refused a one-time {device} boot: {exc}") from exc


# ------------------------------------------------------------------------------------------ IPMI (pyghmi)
# pyghmi keeps one session per BMC and process: a second Command to the same BMC waits on the first one's session
# forever, so a process reuses its Command.
_IPMI_SESSIONS: dict[tuple[str, int, str, str], Any] = {}
_IPMI_LOCK = threading.Lock()


def _ipmi(t: Target) -> Any:
    from pyghmi import exceptions as ipmi_exc
    from pyghmi.ipmi import command

    key = (t.address, t.port, t.username, t.password)
    try:
        with _IPMI_LOCK:
            if key not in _IPMI_SESSIONS:
                _IPMI_SESSIONS[key] = command.Command(
                    bmc=t.address, userid=t.username, password=t.password, port=t.port
                )
            return _IPMI_SESSIONS[key]
    except ipmi_exc.IpmiException as exc:
        raise BmcError(f"IPMI BMC {t.address}:{t.port}: no session ({exc}): wrong credentials or no answer") from exc


def _ipmi_call(t: Target, what: str, fn: Callable[[Any], Any]) -> Any:
    from pyghmi import exceptions as ipmi_exc

    try:
        return fn(_ipmi(t))
    except ipmi_exc.IpmiException as exc:
        raise BmcError(f"IPMI BMC {t.address}:{t.port} refused {what}: {exc}") from exc


def _ipmi_facts(t: Target) -> Facts:
    def read(c: Any) -> Facts:
        power = str(c.get_power()["powerstate"])
        power = power if power in _POWER else "unknown"
        boot = c.get_bootdev()
        device = {"network": "pxe", "optical": "cd", "hd": "hdd"}.get(str(boot.get("bootdev")), "none")
        return Facts(protocol="ipmi", address=t.address, power=power, boot_override=device)

    return _ipmi_call(t, "a power read", read)  # type: ignore[no-any-return]


# ------------------------------------------------------------------------------------------ per protocol
def facts(t: Target) -> Facts:
    return _redfish_facts(t) if t.protocol == "redfish" else _ipmi_facts(t)


def node_target(plan: Plan, node: Node, secrets: Mapping[str, object]) -> Target:
    """How to reach a node's BMC: the plan's address and secret, the password from the resolved secrets."""
    bmc = node.bmc
    username = str(plan.secrets.get(bmc.credentials, {}).get("username") or "")
    password = str(secrets.get(secret_env(bmc.credentials), ""))
    return Target(bmc.protocol, bmc.address, bmc.port, username, password, bmc.tls_verify)


def set_power(t: Target, state: PowerState) -> None:
    if state not in ("on", "off"):
        raise BmcError(f"{t.address}: power {state!r} is not on or off")
    if t.protocol == "redfish":
        _redfish_power(t, state)
    else:
        _ipmi_call(t, f"power {state}", lambda c: c.set_power(state, wait=True))


def wait_for_power(t: Target, state: PowerState, timeout: float = 120.0, poll: float = 2.0) -> Facts:
    """Poll until the BMC reports `state` (BMCs apply power changes after a delay); the facts then."""
    deadline = time.monotonic() + timeout
    while True:
        now = facts(t)
        if now.power == state:
            return now
        if time.monotonic() > deadline:
            raise BmcError(
                f"{t.protocol} BMC {t.address}:{t.port} still reports power {now.power} after {timeout:.0f} s"
            )
        time.sleep(poll)


def set_one_time_boot(t: Target, device: str) -> None:
    if device not in ONE_TIME_BOOT:
        raise BmcError(f"{t.address}: one-time boot {device!r} is not one of {', '.join(ONE_TIME_BOOT)}")
    if t.protocol == "redfish":
        _redfish_boot(t, device)
    else:
        bootdev = {"pxe": "network", "cd": "optical"}[device]
        _ipmi_call(t, f"a one-time {device} boot", lambda c: c.set_bootdev(bootdev, persist=False))


# ------------------------------------------------------------------------------------------ discovery
# IPMI 1.5 "Get Channel Authentication Capabilities" without a session: every IPMI BMC answers it (ipmitool
# sends the same first), so one datagram tells whether an address speaks IPMI before a session is tried.
_IPMI_PING = bytes.fromhex(
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


def answers_ipmi(address: str, port: int = 623, timeout: float = 1.0) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        try:
            s.sendto(_IPMI_PING, (address, port))
            data, _ = s.recvfrom(512)
        except OSError:
            return False
    return len(data) > 4 and data[:4] == b"\x06\x00\xff\x07"


def answers_tcp(address: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def route_to(network: str) -> dict[str, Any]:
    """How this machine reaches a network (`ip route get` of its first host): dev, and gateway if routed."""
    host = str(next(ipaddress.IPv4Network(network).hosts()))
    r = subprocess.run(["ip", "-j", "route", "get", host], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        return {}
    routes: list[dict[str, Any]] = json.loads(r.stdout or "[]")
    return routes[0] if routes else {}


@dataclass(frozen=True, slots=True)
class Found:
    address: str
    protocol: str | None  # redfish | ipmi | None (nothing answered)
    node: str | None  # the declared node, if any
    facts: Facts | None = None
    error: str | None = None  # it answered, but refused the credentials or the read


@dataclass(frozen=True, slots=True)
class Discovery:
    network: str
    declared: tuple[Found, ...]  # declared BMCs that answered
    missing: tuple[Found, ...]  # declared BMCs that did not answer
    undeclared: tuple[Found, ...]  # BMCs that answered at addresses the plan does not declare

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def may_send_credentials(address: str, declared: Iterable[str], probe: ipaddress.IPv4Network | None = None) -> bool:
    """Whether discovery may try the site's BMC credentials at `address`: a declared BMC's own address, or one
    inside the range the operator named to probe. Anything else answering on the network (a rogue Redfish server
    collecting passwords, say) is only seen to answer."""
    if address in set(declared):
        return True
    return probe is not None and ipaddress.IPv4Address(address) in probe


NO_CREDENTIALS = "answers; not declared, so no credentials were sent (--probe-credentials to read it)"


def probe(
    address: str,
    node: str | None,
    target_for: Callable[[str, str], Target | None],
    protocols: Iterable[tuple[str, int]],
    timeout: float,
) -> Found:
    """What answers at one address: Redfish (HTTPS port open) or IPMI (channel capabilities answered). Its facts
    are read only where `target_for` gives credentials for that address (None: liveness alone)."""
    for protocol, port in protocols:
        alive = answers_tcp(address, port, timeout) if protocol == "redfish" else answers_ipmi(address, port, timeout)
        if not alive:
            continue
        target = target_for(address, protocol)
        if target is None:
            return Found(address, protocol, node, error=NO_CREDENTIALS)
        try:
            return Found(address, protocol, node, facts(target))
        except BmcError as exc:
            return Found(address, protocol, node, error=clean(str(exc), 300))
        except Exception as exc:  # whatever else a hostile answer raises is that address's error
            return Found(address, protocol, node, error=clean(f"{type(exc).__name__}: {exc}", 300))
    return Found(address, None, node)


def discover(
    network: str,
    declared: dict[str, tuple[str, str, int]],
    target_for: Callable[[str, str], Target | None],
    *,
    timeout: float = 1.0,
    workers: int = 128,
) -> Discovery:
    """Probe every host address of `network`. `declared` maps BMC address -> (node, protocol, port);
    `target_for(address, protocol)` gives the credentials to try there (None: send none, see what answers)."""
    net = ipaddress.IPv4Network(network)
    gateway = net.network_address + 1
    addresses = [str(a) for a in net.hosts() if a != gateway]

    def one(address: str) -> Found:
        if address in declared:
            node, protocol, port = declared[address]
            return probe(address, node, target_for, [(protocol, port)], timeout)
        return probe(address, None, target_for, [("redfish", 443), ("ipmi", 623)], timeout)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        found = list(pool.map(one, addresses))
    return Discovery(
        network=str(net),
        declared=tuple(f for f in found if f.node and f.protocol),
        missing=tuple(f for f in found if f.node and not f.protocol),
        undeclared=tuple(f for f in found if not f.node and f.protocol),
    )
