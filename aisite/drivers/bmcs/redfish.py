"""Redfish BMCs through sushy: the service root (every answer read by the bounded reader first), the one system a
BMC manages, its facts, power and one-time boot. sushy is imported in each function: it is slow to load, and only
BMC commands need it."""

from __future__ import annotations

import socket
import warnings
from collections.abc import Callable
from typing import Any

from aisite import foreign
from aisite.drivers.bmc import POWER, BmcError, BmcProtocol, Facts, PowerState, Target, mac, word
from aisite.foreign import clean


def root(t: Target) -> Any:
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
        response_callback=lambda response: bounded_answer(t, response),
        # A BMC that refuses the credentials or an action says so once; no retries that lock the account.
        server_side_retries=0,
        default_request_timeout=int(t.timeout),
        connect_timeout=int(t.timeout),
    )
    return call(
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


def bounded_answer(t: Target, response: Any) -> None:
    """A BMC's answer with a body, read by aisite.foreign.loads (within REDFISH_LIMIT and its depth) before sushy
    parses it; one refused is that BMC's error."""
    import sushy

    body = response.content
    if body and "json" in str(response.headers.get("Content-Type", "")).lower():
        try:
            foreign.loads(body, REDFISH_LIMIT)
        except foreign.ForeignJSONError as exc:
            raise sushy.exceptions.SushyError(f"its answer to {response.request.method} is refused: {exc}") from None


def call(t: Target, fn: Callable[[], Any]) -> Any:
    import sushy

    try:
        return fn()
    except sushy.exceptions.AccessError as exc:
        raise BmcError(f"Redfish BMC {t.address}:{t.port} refused the credentials (HTTP {exc.status_code})") from exc
    except sushy.exceptions.ConnectionError as exc:
        raise BmcError(f"Redfish BMC {t.address}:{t.port} did not answer") from exc
    except sushy.exceptions.SushyError as exc:
        raise BmcError(f"Redfish BMC {t.address}:{t.port}: {exc}") from exc


def managed_system(t: Target, service_root: Any = None) -> Any:
    """The one system a Redfish BMC manages (a sushy System), or the BMC's error."""
    service = service_root if service_root is not None else root(t)
    members = call(t, lambda: service.get_system_collection().get_members())
    if len(members) != 1:
        raise BmcError(f"Redfish BMC {t.address}:{t.port} manages {len(members)} systems; aisite expects one")
    return members[0]


def facts(t: Target) -> Facts:
    system = managed_system(t)
    try:
        return read(t, system)
    except BmcError:
        raise
    except Exception as exc:  # a BMC's body sushy did not expect: that BMC's error, not a traceback
        raise BmcError(f"Redfish BMC {t.address}:{t.port} answered what it cannot read: {clean(exc, 160)}") from exc


def read(t: Target, system: Any) -> Facts:
    try:
        reported = [e.mac_address for e in system.ethernet_interfaces.get_members()]
    except Exception:
        reported = []
    macs = tuple(m for m in (mac(r) for r in reported) if m)
    boot = system.boot
    target = word(str(boot.target.value).lower(), 16) if boot and boot.target else None
    power = str(system.power_state.value).lower() if system.power_state else "unknown"
    return Facts(
        protocol="redfish",
        address=t.address,
        power=power if power in POWER else "unknown",
        name=word(system.name),
        manufacturer=word(system.manufacturer),
        model=word(system.model),
        serial=word(system.serial_number),
        uuid=word(system.uuid),
        macs=macs,
        boot_override=target,
    )


def power(t: Target, state: PowerState) -> None:
    import sushy  # imported here: slow, and only BMC commands need it

    system = managed_system(t)
    reset = sushy.ResetType.ON if state == "on" else sushy.ResetType.FORCE_OFF
    try:
        system.reset_system(reset)
    except sushy.exceptions.SushyError as exc:
        raise BmcError(f"Redfish BMC {t.address}:{t.port} refused power {state}: {exc}") from exc


def boot(t: Target, device: str) -> None:
    import sushy  # imported here: slow, and only BMC commands need it

    system = managed_system(t)
    target = {"pxe": sushy.BootSource.PXE, "cd": sushy.BootSource.CD}[device]
    try:
        system.set_system_boot_options(target=target, enabled=sushy.BootSourceOverrideEnabled.ONCE)
    except sushy.exceptions.SushyError as exc:
        raise BmcError(f"Redfish BMC {t.address}:{t.port} refused a one-time {device} boot: {exc}") from exc


def answers(address: str, port: int, timeout: float = 1.0) -> bool:
    """Something listens on the BMC's HTTPS port (its credentials are not sent to find out)."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


DRIVER = BmcProtocol(
    "redfish",
    443,
    answers,
    facts,
    power,
    boot,
    title="Redfish",
    tls=True,
    firmware=True,
    accounts=True,
    username_forbids=(":", "which HTTP Basic authentication cannot carry"),
)
