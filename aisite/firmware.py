"""A node's firmware against its model's baseline (the `firmware` of its group in the site), through its BMC's
Redfish service: BIOS attributes (Bios.Attributes) and the system firmware's release (ComputerSystem.BiosVersion).

`aisite diff`, `aisite oob firmware` and `aisite maintenance start` read it; a rollout sets it inside its waves:
the BIOS attributes that differ are PATCHed to the Bios resource's settings object (pending until the system's
next reset, as DMTF's Redfish settings model has it), a release through UpdateService.SimpleUpdate with the image
the site names (from its own mirror), once aisite has fetched that image itself and found the sha256 the site
pins; the rollout's reboot step resets the node and its verify step reads it again and records the release the BMC
reports with the image's digest. An IPMI BMC has neither a BIOS nor an update service to offer: said, never guessed.

What a BMC answers is foreign: only the baseline's attributes are read, each value kept as a boolean, an integer
or a printable, bounded string."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from aisite import oob
from aisite.drivers.bmcs import BMC_PROTOCOLS, redfish
from aisite.fields import secret_env
from aisite.foreign import clean
from aisite.plan import FirmwareBaseline, Node, Plan

Value = bool | int | str
# The prefix of every reason firmware gives a member to go out of service (aisite.maintenance.rollout).
REASON = "firmware"


@dataclass(frozen=True, slots=True)
class Reading:
    """What a BMC reported: the baseline's attributes (None: the BMC has no such attribute) and the release."""

    bios: dict[str, Value | None]
    bios_version: str | None
    pending: dict[str, Value | None] = field(default_factory=dict)  # settings waiting for the next reset


@dataclass
class SiteFirmware:
    """Per node with a baseline: its drift ([] when it matches), or why it was not read."""

    drift: dict[str, list[str]] = field(default_factory=dict)
    unread: dict[str, str] = field(default_factory=dict)
    unsupported: dict[str, str] = field(default_factory=dict)  # BMCs that offer neither (IPMI)

    @property
    def drifted(self) -> dict[str, list[str]]:
        return {n: d for n, d in self.drift.items() if d}

    def to_dict(self) -> dict[str, Any]:
        matching = sorted(n for n, d in self.drift.items() if not d)
        return {"drift": self.drifted, "matching": matching, "unread": self.unread, "unsupported": self.unsupported}


def value(raw: Any) -> Value | None:
    """A BMC's attribute value, narrowed: a bool and a 64-bit int kept, anything else a printable string of at most
    128 characters."""
    if raw is None:
        return None
    if isinstance(raw, bool) or (isinstance(raw, int) and -(2**63) <= raw < 2**64):
        return raw
    return clean(raw if isinstance(raw, str) else repr(raw), 128)


def _same(a: Value | None, b: Value | None) -> bool:
    # True == 1 in Python; a BIOS's Enabled is not its 1.
    return type(a) is type(b) and a == b


def _shown(v: Value | None) -> str:
    if v is None:
        return "absent"
    return repr(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)


def drift(baseline: FirmwareBaseline, reading: Reading) -> list[str]:
    """What differs from the baseline, one reason each ("firmware: BIOS ProcTurboMode 'Disabled' -> 'Enabled'")."""
    reasons = [
        f"{REASON}: BIOS {name} {_shown(reading.bios.get(name))} -> {_shown(want)}"
        for name, want in baseline.bios
        if not _same(reading.bios.get(name), want)
    ]
    if baseline.bios_version and reading.bios_version != baseline.bios_version:
        reasons.append(f"{REASON}: BIOS release {reading.bios_version or 'unknown'} -> {baseline.bios_version}")
    return reasons


def owed_reset(baseline: FirmwareBaseline, reading: Reading) -> list[str]:
    """What waits for the system's next reset: the baseline's settings the BMC holds pending, and the release where
    it is not yet the baseline's (a BMC stages an update until the reset)."""
    now = dict(reading.bios)
    owed = [
        name
        for name, want in baseline.bios
        if name in reading.pending and _same(reading.pending[name], want) and not _same(now.get(name), want)
    ]
    if baseline.bios_version and reading.bios_version != baseline.bios_version:
        owed.append("release")
    return owed


# ------------------------------------------------------------------------------------------ Redfish
def _bmc_error(t: oob.Target, what: str, exc: Exception) -> oob.BmcError:
    return oob.BmcError(f"Redfish BMC {t.address}:{t.port} {what}: {clean(exc, 200)}")


def read(t: oob.Target, baseline: FirmwareBaseline) -> Reading:
    """The BMC's current and pending values of the baseline's attributes, and its BIOS release."""
    if not BMC_PROTOCOLS[t.protocol].firmware:
        raise oob.BmcError(f"an {t.protocol.upper()} BMC has no BIOS settings or firmware update to read")
    system = redfish.managed_system(t)
    try:
        bios = system.bios
        current = dict(bios.attributes or {})
        try:
            pending = dict(bios.pending_attributes or {})
        except Exception:  # no settings object: nothing can be pending
            pending = {}
        version = system.bios_version
    except Exception as exc:  # a BMC's body sushy did not expect: that BMC's error, not a traceback
        raise _bmc_error(t, "has no BIOS resource it can show", exc) from exc
    names = [n for n, _ in baseline.bios]
    return Reading(
        {n: value(current.get(n)) for n in names},
        clean(version, 64) if isinstance(version, str) and version else None,
        {n: value(pending[n]) for n in names if n in pending},
    )


def apply(t: oob.Target, baseline: FirmwareBaseline) -> list[str]:
    """Set what differs: the attributes as pending settings, the release through SimpleUpdate. What was asked."""
    reading = read(t, baseline)
    done: list[str] = []
    root = redfish.root(t)
    system = redfish.managed_system(t, root)
    changes = {n: want for n, want in baseline.bios if not _same(reading.bios.get(n), want)}
    if changes:
        try:
            system.bios.set_attributes(changes)
        except Exception as exc:
            raise _bmc_error(t, f"refused BIOS settings {', '.join(sorted(changes))}", exc) from exc
        done.append("BIOS settings pending: " + ", ".join(f"{n}={_shown(v)}" for n, v in sorted(changes.items())))
    if baseline.bios_version and baseline.bios_image and reading.bios_version != baseline.bios_version:
        # The image is the site's word only once its digest is: checked here, before the BMC hears of it.
        digest = image_digest(baseline.bios_image, t.tls_verify)
        if digest != baseline.bios_sha256:
            raise oob.BmcError(
                f"{baseline.bios_image} has sha256 {digest}, not the site's {baseline.bios_sha256}: the BMC at "
                f"{t.address} was not told of it"
            )
        protocol = "HTTPS" if baseline.bios_image.startswith("https://") else "HTTP"
        try:
            service = root.get_update_service()
            service.simple_update(baseline.bios_image, targets=[system.path], transfer_protocol=protocol)
        except Exception as exc:
            raise _bmc_error(t, f"refused the update to {baseline.bios_version}", exc) from exc
        done.append(f"BIOS release {baseline.bios_version} requested from {baseline.bios_image} (sha256 {digest})")
    return done


# The largest firmware image fetched (a BIOS or BMC image is tens of MB); one larger is refused, not read whole.
MAX_IMAGE = 1 << 30
IMAGE_TIMEOUT_S = 60.0


def image_digest(url: str, verify_tls: bool, limit: int = MAX_IMAGE, timeout: float = IMAGE_TIMEOUT_S) -> str:
    """The SHA-256 of the image at `url`, read a chunk at a time (at most `limit` bytes, each read within
    `timeout`); BmcError saying why when it cannot be read. https is verified unless the site turned TLS checks
    off for its BMCs (oob.tls_verify: false; then the digest alone vouches for the image)."""
    import requests  # sushy's own HTTP library: imported with it, only for BMC commands

    digest, size = hashlib.sha256(), 0
    try:
        with requests.get(url, stream=True, timeout=timeout, verify=verify_tls, allow_redirects=False) as r:
            if r.status_code != 200:
                raise oob.BmcError(f"firmware image {url}: {r.status_code} {clean(r.reason, 80)}")
            for chunk in r.iter_content(1 << 20):
                size += len(chunk)
                if size > limit:
                    raise oob.BmcError(f"firmware image {url}: over {limit} bytes")
                digest.update(chunk)
    except requests.RequestException as exc:
        raise oob.BmcError(f"firmware image {url}: {clean(exc, 200)}") from None
    return digest.hexdigest()


def reset(t: oob.Target, timeout: float = 300.0) -> None:
    """Restart the system through its BMC (the OS asked to shut down first) and wait until it is on again."""
    import sushy  # imported here: slow, and only BMC commands need it

    system = redfish.managed_system(t)
    try:
        system.reset_system(sushy.ResetType.GRACEFUL_RESTART)
    except Exception as exc:
        raise _bmc_error(t, "refused a restart", exc) from exc
    time.sleep(1)
    oob.wait_for_power(t, "on", timeout=timeout)


# ------------------------------------------------------------------------------------------ a site
def baselined(plan: Plan) -> list[Node]:
    """The nodes whose group declares a firmware baseline."""
    return [n for n in plan.nodes if n.firmware is not None]


def site_firmware(plan: Plan, secrets: Mapping[str, object], workers: int = 16) -> SiteFirmware:
    """Every baselined node's drift, read from its BMC (at most `workers` at once); one that does not answer (or
    whose secret is missing: then nothing is sent) is unread, an IPMI BMC unsupported."""
    found = SiteFirmware()
    redfish: list[tuple[Node, FirmwareBaseline]] = []
    for n in baselined(plan):
        assert n.firmware is not None
        if not BMC_PROTOCOLS[n.bmc.protocol].firmware:
            found.unsupported[n.name] = f"{n.bmc.protocol.upper()} BMC: no BIOS settings or firmware update"
        elif secret_env(n.bmc.credentials) not in secrets:
            found.unread[n.name] = f"the BMC's secret {n.bmc.credentials!r} was not found: nothing sent"
        else:
            redfish.append((n, n.firmware))

    def one(item: tuple[Node, FirmwareBaseline]) -> list[str] | oob.BmcError:
        node, baseline = item
        try:
            return drift(baseline, read(oob.node_target(plan, node, secrets), baseline))
        except oob.BmcError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(redfish)))) as pool:
        for (node, _), got in zip(redfish, pool.map(one, redfish), strict=True):
            if isinstance(got, oob.BmcError):
                found.unread[node.name] = str(got)
            else:
                found.drift[node.name] = got
    return found


def read_site(plan: Plan) -> SiteFirmware:
    """site_firmware with the secrets this process can resolve (a missing one leaves its nodes unread)."""
    from aisite.secrets import resolve

    secrets, _ = resolve(plan)
    return site_firmware(plan, secrets)
