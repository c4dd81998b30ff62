"""`aisite provision`: bare metal to a node that answers SSH, through its BMC and the site's boot server.

Per node: power off, one-time network boot, power on; the boot server's reports tell how far it got (iPXE script,
kernel and installer fetched, install started, installed with its host keys); then SSH with exactly those host keys,
where /etc/aisite/installed.json must name the version the boot server installed. Nodes go in waves of
`provisioning.wave_size`; a node that fails is retried (armed again, power cycled) up to `provisioning.retries`
times, and a node that fails for good does not stop the others. A node already at the plan's version (its record
here, and the node itself over SSH, say so) is left alone unless asked to reinstall.

The pieces that touch the world (the BMC, the boot server, SSH, arming) come in a `World`, so the sequencing is
one piece of code whatever drives it.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aisite.members import store
from aisite.plan import ProvisioningPlan, ProvisionTarget

# The steps of one install, in order, as a result names where a node failed.
STEPS = ("power", "dhcp", "boot-files", "installer", "install", "first-boot")
# The installer's steps before it writes the disk (scripts/aisite-install): a failure there leaves the system.
BEFORE_DISK = ("network", "layout")
POLL_S = 2.0


class ProvisionError(Exception):
    """A step that failed for one node; `step` is one of STEPS."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(message)
        self.step = step


@dataclass(frozen=True, slots=True)
class HostKey:
    """A node's SSH host key, made by the controller for one install: the public line is what known_hosts trusts
    before the node ever answers; the private key reaches the node only over its install token's channel."""

    private: str = field(repr=False)  # OpenSSH PEM
    public: str  # "ssh-ed25519 AAAA..."


def new_host_key() -> HostKey:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return HostKey(private, public.decode())


class World(Protocol):
    def arm(self, targets: Sequence[ProvisionTarget], host_keys: Mapping[str, HostKey]) -> None: ...
    def disarm(self, targets: Sequence[ProvisionTarget]) -> None: ...
    def boot_from_network(self, target: ProvisionTarget) -> None: ...
    def power_cycle(self, target: ProvisionTarget) -> None: ...
    def report(self, node: str) -> dict[str, Any]: ...
    def version(self, node: str) -> str: ...
    def installed_version(self, target: ProvisionTarget, host_keys: Sequence[str]) -> str | None: ...


@dataclass
class Outcome:
    node: str
    status: str  # installed | unchanged | failed | refused (in service, and the site's budget could not take it out)
    attempts: int = 0
    seconds: float = 0.0
    step: str | None = None  # where it failed
    error: str | None = None
    version: str | None = None
    host_keys: list[str] = field(default_factory=list)
    # Whether the installer got as far as the disk (it wipes it): a node that failed before still has its system.
    disk_touched: bool = False
    # Seconds per step of the last attempt: dhcp (power on to its iPXE script), boot-files (to the installer
    # running), install (to its report), first-boot (to SSH with the recorded host key).
    steps: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Say = Callable[[str, str], None]  # node, what it is doing now


# What the boot server relays of an install: the installer's report and the server's own events. The installer
# speaks from a machine on the provisioning network, so it is read strictly: a report that does not fit is no
# report (the node goes on as silent), and only host keys of the known types, one key a line, are ever kept.
HOSTKEY = re.compile(r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]{16,2048}")


class _Event(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)
    event: Literal["ipxe", "vmlinuz", "installer.img", "image.tar.zst", "started", "installed", "failed"]
    time: float = Field(ge=0, le=1e11)


class _Report(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    events: list[_Event] = Field(default=[], max_length=1000)
    step: Annotated[str, Field(pattern=r"^[a-z-]{0,32}$")] = ""
    host_keys: list[Annotated[str, Field(pattern=f"^(?:{HOSTKEY.pattern})$")]] = Field(default=[], max_length=16)
    version: Annotated[str, Field(pattern=r"^[0-9a-f]{0,64}$")] = ""


def read_report(doc: Any) -> dict[str, Any]:
    """The boot server's report of a node, as far as it can be believed: {} where it does not parse."""
    try:
        return _Report.model_validate(doc).model_dump()
    except ValidationError:
        return {}


def _event_time(report: dict[str, Any], *names: str) -> float | None:
    times = [float(e["time"]) for e in report.get("events", []) if e.get("event") in names]
    return min(times) if times else None


def _stalled_at(report: dict[str, Any], mac: str | None) -> ProvisionError:
    """What a node that went quiet had done last: where it stopped."""
    seen = {e.get("event") for e in report.get("events", [])}
    if "started" in seen:
        step = str(report.get("step") or "install")
        return ProvisionError("install", f"the installer stopped reporting during step {step}")
    if seen & {"vmlinuz", "installer.img"}:
        return ProvisionError("installer", "fetched the installer but never reported from it (kernel or network)")
    if "ipxe" in seen:
        return ProvisionError("boot-files", "fetched its iPXE script but not the installer")
    return ProvisionError(
        "dhcp",
        f"no network boot from {mac}: no DHCP or iPXE request reached the boot server (a wrong boot MAC, "
        "boot order or provisioning network?)",
    )


def install_once(world: World, plan: ProvisioningPlan, t: ProvisionTarget, say: Say, host_key: HostKey) -> Outcome:
    """One attempt: boot the node from the network and follow it to SSH, trusting only the host key the controller
    made for this install (whatever the report says). Raises nothing: a failure is an Outcome."""
    out = Outcome(t.node, "failed")
    start = time.time()
    try:
        say(t.node, "power: one-time network boot")
        try:
            world.boot_from_network(t)
        except Exception as exc:
            raise ProvisionError("power", f"BMC: {exc}") from exc
        powered = time.time()
        deadline = time.monotonic() + plan.install_timeout_s
        # Arming cleared the node's last report: what it holds now is this attempt's.
        while True:
            report = read_report(world.report(t.node))
            events = {e.get("event") for e in report.get("events", [])}
            if "installed" in events:
                break
            if "failed" in events:
                out.disk_touched = report.get("step") not in BEFORE_DISK
                raise ProvisionError("install", f"the installer failed at step {report.get('step') or '?'}")
            if time.monotonic() > deadline:
                # Silent during the install: where it stopped is unknown, so its disk may have been written.
                out.disk_touched = "started" in events
                raise _stalled_at(report, t.mac)
            say(t.node, _progress(report))
            time.sleep(POLL_S)
        ipxe = _event_time(report, "ipxe") or powered
        started = _event_time(report, "started") or ipxe
        installed = _event_time(report, "installed") or started
        out.steps = {
            "dhcp": round(ipxe - powered, 1),
            "boot-files": round(started - ipxe, 1),
            "install": round(installed - started, 1),
        }
        # The installer's own report of its keys is not what is trusted: the key the controller made and handed
        # over the token's channel is (a report, from whoever holds the token, cannot change known_hosts).
        out.host_keys = [host_key.public]
        out.version = str(report.get("version") or "")
        say(t.node, "first-boot: waiting for SSH with the host key the controller made for it")
        version = _wait_ssh(world, plan, t, out.host_keys, installed)
        if version != out.version:
            raise ProvisionError("first-boot", f"the node says it is at version {version}, not {out.version}")
        out.steps["first-boot"] = round(time.time() - installed, 1)
        out.status = "installed"
    except ProvisionError as exc:
        out.step, out.error = exc.step, str(exc)
    out.seconds = round(time.time() - start, 1)
    return out


def _progress(report: dict[str, Any]) -> str:
    events = [e.get("event") for e in report.get("events", [])]
    if "started" in events:
        return f"install: {report.get('step') or 'started'}"
    if "installer.img" in events or "vmlinuz" in events:
        return "boot-files: installer fetched, starting"
    if "ipxe" in events:
        return "boot-files: iPXE script fetched"
    return "dhcp: waiting for the node's network boot"


def _wait_ssh(world: World, plan: ProvisioningPlan, t: ProvisionTarget, keys: Sequence[str], since: float) -> str:
    """The installed version the node reports over SSH; power cycles it once if it is silent for half the wait
    (a node that did not come back from the installer's reboot)."""
    deadline = since + plan.boot_timeout_s
    cycled = False
    while True:
        version = world.installed_version(t, keys)
        if version is not None:
            return version
        now = time.time()
        if now > deadline:
            raise ProvisionError("first-boot", f"no SSH with the host key it was given within {plan.boot_timeout_s} s")
        if not cycled and now > since + plan.boot_timeout_s / 2:
            cycled = True
            try:
                world.power_cycle(t)
            except Exception as exc:
                raise ProvisionError("first-boot", f"BMC power cycle: {exc}") from exc
        time.sleep(POLL_S)


def unchanged(world: World, t: ProvisionTarget, record: dict[str, Any] | None) -> Outcome | None:
    """The node's outcome when it is already installed at the plan's version (its record says so, and so does the
    node over SSH with the recorded host keys), else None."""
    installed = (record or {}).get("installed")
    if not installed:
        return None
    want = world.version(t.node)
    keys = list(installed.get("host_keys", []))
    if installed.get("version") != want or world.installed_version(t, keys) != want:
        return None
    return Outcome(t.node, "unchanged", version=want, host_keys=keys)


def record(previous: dict[str, Any] | None, o: Outcome, now: str) -> dict[str, Any]:
    """What is kept of a node: its last outcome, and its install (version, host keys) while it stands: an install
    replaces it, a failure after the installer reached the disk drops it, one before leaves it."""
    installed = (previous or {}).get("installed")
    if o.status == "installed":
        installed = {"version": o.version, "host_keys": o.host_keys, "at": now}
    elif o.status == "failed" and o.disk_touched:
        installed = None
    last = (previous or {}).get("last", {}) | {"checked": now} if o.status == "unchanged" else o.to_dict() | {"at": now}
    return {"node": o.node, "installed": installed, "last": last}


def member_installing(members: dict[str, store.Member], node: str, at: str) -> None:
    """A node's one state (aisite.members.store) once its install starts: out of service until it has an outcome."""
    store.hold(members, node, "provision", state=store.State.PROVISIONING, pending=store.Pending.INSTALL, at=at)


def member_outcome(members: dict[str, store.Member], o: Outcome, at: str) -> None:
    """A node's one state from its outcome: installed or unchanged, given back; failed, held until provisioned;
    refused (never touched), as it was."""
    if o.status == "refused":
        return
    if o.status == "failed":
        why = f"failed at {o.step}: {o.error}"
        failed, again = store.State.PROVISION_FAILED, store.Pending.PROVISION
        store.hold(members, o.node, "provision", state=failed, pending=again, at=at, message=why)
    else:
        store.release(members, o.node, "provision", at=at, message=f"{o.status} {o.version}")


def members_not_started(members: dict[str, store.Member], why: str, at: str) -> None:
    """A wave that could not be armed: its nodes, held as installing, are held as failed with why."""
    for name, h in store.held_by(members, "provision").items():
        if h.state == store.State.PROVISIONING:
            failed, again = store.State.PROVISION_FAILED, store.Pending.PROVISION
            store.hold(members, name, "provision", state=failed, pending=again, at=at, message=f"not started: {why}")


def provision(
    world: World,
    plan: ProvisioningPlan,
    targets: Sequence[ProvisionTarget],
    records: dict[str, dict[str, Any]],
    *,
    reinstall: bool,
    say: Say,
    done: Callable[[Outcome], None],
    begin: Callable[[str], None] = lambda _node: None,
    budget: Callable[[list[str]], str | None] = lambda _nodes: None,
) -> list[Outcome]:
    """Install `targets` in waves; `records` holds what was recorded of each node before. Every node gets an
    outcome, reported through `done` as soon as it is final; `begin` is told each node before its first attempt
    touches it (from then on it is out of service until `done`).

    A node with an install standing (in service) is taken out only as the site's disruption budget allows:
    `budget(nodes)` says why these in-service nodes may not be out now, beside what is out already (None: they
    may). One that does not fit waits for a later wave; one that fits no wave (others out hold the budget) is
    refused, untouched. A node not yet installed serves nothing and waits for nothing."""
    outcomes: dict[str, Outcome] = {}
    for step in _decisions(world, plan, targets, records, reinstall=reinstall, budget=budget):
        if step.unchanged:
            outcomes[step.unchanged.node] = step.unchanged
            done(step.unchanged)
        for node, why in step.refused.items():
            outcomes[node] = Outcome(node, "refused", step="budget", error=f"in service; {why}")
            done(outcomes[node])
        wave = step.wave
        for t in wave:
            begin(t.node)
        attempts: dict[str, int] = {}
        spent: dict[str, float] = {}
        todo = list(wave)
        while todo:
            # A new host key per attempt: one handed to an install that did not finish is never trusted again.
            keys = {t.node: new_host_key() for t in todo}
            world.arm(todo, keys)
            with ThreadPoolExecutor(max_workers=len(todo)) as pool:
                given = [keys[t.node] for t in todo]
                results = list(pool.map(lambda t, k: install_once(world, plan, t, say, k), todo, given))
            # Failed without the installer's report (which disarms): disarmed now, armed again for a retry. Left
            # armed, such a node's next network boot would install it.
            silent = [t for t, r in zip(todo, results, strict=True) if r.status == "failed" and r.step != "install"]
            if silent:
                world.disarm(silent)
            retry: list[ProvisionTarget] = []
            for t, result in zip(todo, results, strict=True):
                attempts[t.node] = attempts.get(t.node, 0) + 1
                spent[t.node] = spent.get(t.node, 0.0) + result.seconds
                result.attempts, result.seconds = attempts[t.node], round(spent[t.node], 1)
                if result.status == "failed" and attempts[t.node] <= plan.retries:
                    say(t.node, f"retrying after {result.step}: {result.error}")
                    retry.append(t)
                else:
                    outcomes[t.node] = result
                    done(result)
            todo = retry
    return [outcomes[t.node] for t in targets]


@dataclass(slots=True)
class _Step:
    unchanged: Outcome | None = None  # a node left alone: at the plan's version
    wave: list[ProvisionTarget] = field(default_factory=list)  # the next nodes to install together
    refused: dict[str, str] = field(default_factory=dict)  # node -> why no wave can take it (the budget)


def _decisions(
    world: World,
    plan: ProvisioningPlan,
    targets: Sequence[ProvisionTarget],
    records: dict[str, dict[str, Any]],
    *,
    reinstall: bool,
    budget: Callable[[list[str]], str | None],
) -> Iterator[_Step]:
    """What provision does, one decision at a time: the nodes at the plan's version, then each wave, asked of the
    budget only once the one before is done (lazily: the caller installs a wave before taking the next)."""
    pending: list[ProvisionTarget] = []
    for t in targets:
        same = None if reinstall else unchanged(world, t, records.get(t.node))
        if same:
            yield _Step(unchanged=same)
        else:
            pending.append(t)
    serving = {t.node for t in pending if (records.get(t.node) or {}).get("installed")}
    while pending:
        wave, pending = _next_wave(pending, plan.wave_size, serving, budget)
        if not wave:
            yield _Step(refused={t.node: budget([t.node]) or "the site's disruption budget" for t in pending})
            return
        yield _Step(wave=wave)


@dataclass(slots=True)
class Intent:
    """What a provision run would do, found without touching a node's install: the nodes already at the plan's
    version (read over SSH), the waves of the rest, and those no wave can take (the budget), with why."""

    unchanged: list[str]
    waves: list[list[str]]
    refused: dict[str, str]


def would_provision(
    world: World,
    plan: ProvisioningPlan,
    targets: Sequence[ProvisionTarget],
    records: dict[str, dict[str, Any]],
    *,
    reinstall: bool,
    budget: Callable[[list[str]], str | None] = lambda _nodes: None,
) -> Intent:
    """provision's decisions, in its order, for `--dry-run`: nothing armed, booted or recorded."""
    intent = Intent([], [], {})
    for step in _decisions(world, plan, targets, records, reinstall=reinstall, budget=budget):
        intent.unchanged += [step.unchanged.node] if step.unchanged else []
        intent.refused |= step.refused
        intent.waves += [[t.node for t in step.wave]] if step.wave else []
    return intent


def _next_wave(
    pending: list[ProvisionTarget], size: int, serving: set[str], budget: Callable[[list[str]], str | None]
) -> tuple[list[ProvisionTarget], list[ProvisionTarget]]:
    """The next wave (at most `size` nodes, in order, the in-service ones as far as the budget takes them) and
    what is left for later waves."""
    wave: list[ProvisionTarget] = []
    later: list[ProvisionTarget] = []
    out: list[str] = []
    for t in pending:
        if len(wave) < size and (t.node not in serving or budget([*out, t.node]) is None):
            wave.append(t)
            out += [t.node] if t.node in serving else []
        else:
            later.append(t)
    return wave, later


# ------------------------------------------------------------------------------------------------ records
def load_records(folder: Path) -> dict[str, dict[str, Any]]:
    records: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("*.json")):
        if path.name == "last.json":
            continue
        try:
            records[path.stem] = dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return records


def known_hosts_lines(addresses: dict[str, str], records: dict[str, dict[str, Any]]) -> list[str]:
    """`address keytype key` for every node installed, with the host keys its install recorded (an OpenSSH
    known_hosts file's lines)."""
    return [
        f"{addresses[node]} {key}"
        for node, rec in sorted(records.items())
        if node in addresses
        for key in (rec.get("installed") or {}).get("host_keys", [])
    ]


def boot_mac_proposals(
    targets: Sequence[ProvisionTarget], paths: Mapping[str, str], macs: Mapping[str, Sequence[str]]
) -> list[dict[str, Any]]:
    """A stack change per node to install that has no boot MAC and whose BMC reported its system's NICs (Redfish
    EthernetInterfaces): `path` (where the stack declares the node) gets `management.mac`, the first NIC the BMC
    lists; all of them are given, as a server may list several and the boot NIC need not be first."""
    from aisite.drivers.bmc import mac

    out = []
    for t in targets:
        # A BMC's word: only what is a MAC is proposed (one with a newline would print as extra YAML).
        found = [m for m in (mac(x) for x in macs.get(t.node, ())) if m]
        if t.mac is None and found and t.node in paths:
            out.append({"node": t.node, "path": f"{paths[t.node]}.management.mac", "mac": found[0], "nics": found})
    return out
