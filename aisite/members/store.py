"""One state per node and switch, written by provisioning, health and maintenance alike (the shape of Metal3's
BareMetalHost states and NVIDIA k8s-operator-libs' upgrade states).

Each of the three owners holds a member out of service in a state of its own (`HOLD_STATES`), naming the action
it waits on (`pending`, "" when none); a member no owner holds is in service. A hold moves on only when its
owner saw its action succeed: a quarantine stays pending "quarantine" (health's own word for its taint, cordon and
drain) until the cluster took it, a release keeps the
node quarantined, pending "release", until the cluster took that; a rollout's member holds at the step it is at, and
at the step that failed. Every owner keeps its own details (install records, health's counters, a rollout's waves),
but what is out of service and why is read here alone: the site's disruption budget counts these holds, whoever
asks it. Kept in `.aisite/SITE/members.json` (aisite.paths.members_file), read and written whole under a lock; the
transitions are pure.
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from aisite.errors import RecordError
from aisite.paths import health_state_file, members_file

Owner = Literal["provision", "health", "maintenance"]
OWNERS: tuple[Owner, ...] = ("provision", "maintenance", "health")  # the order a member's state is told in


class State(StrEnum):
    """A member's state: in service, or the hold that names it."""

    IN_SERVICE = "in-service"
    PROVISIONING = "provisioning"
    PROVISION_FAILED = "provision-failed"
    QUARANTINED = "quarantined"
    MAINTENANCE = "maintenance"
    MAINTENANCE_FAILED = "maintenance-failed"


class Pending(StrEnum):
    """What a provisioning or health hold waits on (a rollout's hold waits on its next step, named by the rollout:
    aisite.maintenance.steps)."""

    NOTHING = ""
    INSTALL = "install"  # provisioning: the install under way
    PROVISION = "provision"  # provisioning: an operator's `aisite provision` again
    QUARANTINE = "quarantine"  # health: the cluster to take its quarantine (taint, cordon, drain)
    RELEASE = "release"  # health: the cluster to take its release


# What each owner may hold a member in: from in service, or from another of its own states, to any of these; and
# back to in service when it releases it (the store's only moves: `hold` and `release`).
HOLD_STATES: dict[Owner, tuple[State, ...]] = {
    "provision": (State.PROVISIONING, State.PROVISION_FAILED),
    "health": (State.QUARANTINED,),
    "maintenance": (State.MAINTENANCE, State.MAINTENANCE_FAILED),
}
IN_SERVICE = State.IN_SERVICE
HISTORY = 20  # transitions kept per member


@dataclass
class Hold:
    state: str
    pending: str  # the action it waits on; "" when none
    since: str  # when this owner took the member out
    message: str = ""


@dataclass
class Member:
    holds: dict[str, Hold] = field(default_factory=dict)  # owner -> its hold
    history: list[str] = field(default_factory=list)  # "at owner: state (pending) message", the last HISTORY

    @property
    def first(self) -> str:
        """The owner whose hold names the member's state: the first in OWNERS order (provisioning, then a rollout,
        then a quarantine); "" when none holds it."""
        return next((o for o in OWNERS if o in self.holds), "")

    @property
    def state(self) -> str:
        return self.holds[self.first].state if self.first else IN_SERVICE


def timestamp() -> str:
    """This moment as records and the members' states write it (UTC, to the second)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def hold(
    members: dict[str, Member], name: str, owner: Owner, *, state: str, pending: str, at: str, message: str = ""
) -> bool:
    """`owner` holds `name` out of service in `state`, waiting on `pending`. True when anything changed."""
    if state not in HOLD_STATES[owner]:
        raise ValueError(f"{owner} holds a member in one of {', '.join(HOLD_STATES[owner])}, not {state!r}")
    m = members.setdefault(name, Member())
    was = m.holds.get(owner)
    if was and (was.state, was.pending, was.message) == (state, pending, message):
        return False
    m.holds[owner] = Hold(state, pending, was.since if was else at, message)
    _note(m, at, owner, f"{state}" + (f" ({pending} pending)" if pending else "") + (f": {message}" if message else ""))
    return True


def release(members: dict[str, Member], name: str, owner: Owner, *, at: str, message: str = "") -> bool:
    """`owner` gives `name` back (its action done). True when it held it."""
    m = members.get(name)
    if m is None or owner not in m.holds:
        return False
    del m.holds[owner]
    _note(m, at, owner, f"released -> {m.state}" + (f": {message}" if message else ""))
    return True


def _note(m: Member, at: str, owner: str, what: str) -> None:
    m.history = [*m.history, f"{at} {owner}: {what}"][-HISTORY:]


def out_of_service(members: dict[str, Member], but: Owner | None = None) -> list[str]:
    """The members some owner holds out (other than `but`: an owner counts its own members itself)."""
    return sorted(n for n, m in members.items() if any(o != but for o in m.holds))


def held_by(members: dict[str, Member], owner: Owner) -> dict[str, Hold]:
    return {n: m.holds[owner] for n, m in sorted(members.items()) if owner in m.holds}


def to_dict(members: dict[str, Member]) -> dict[str, Any]:
    return {n: asdict(m) for n, m in sorted(members.items()) if m.holds or m.history}


def from_dict(doc: Any) -> dict[str, Member]:
    """The file as written by `save`; this machine's own record, so a file that does not fit is an error to say,
    not a state to guess."""
    if not isinstance(doc, dict):
        raise ValueError("not a mapping of member names")
    out: dict[str, Member] = {}
    for name, m in doc.items():
        holds = {}
        for owner, h in dict(m.get("holds") or {}).items():
            if owner not in HOLD_STATES or h.get("state") not in HOLD_STATES[owner]:
                raise ValueError(f"{name}: {owner} cannot hold a member in {h.get('state')!r}")
            holds[owner] = Hold(
                str(h["state"]), str(h.get("pending", "")), str(h.get("since", "")), str(h.get("message", ""))
            )
        out[str(name)] = Member(holds, [str(x) for x in m.get("history") or []][-HISTORY:])
    return out


# ------------------------------------------------------------------------------------------------ the file
def load(path: Path) -> dict[str, Member]:
    if not path.is_file():
        return {}
    try:
        return from_dict(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise RecordError(f"{path}: {exc}") from exc


@contextmanager
def editing(path: Path) -> Iterator[dict[str, Member]]:
    """The members' states to change, saved whole when the block ends (nothing saved if it raises); one writer at
    a time (health, a rollout and provisioning may run at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.with_suffix(".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        members = load(path)
        yield members
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(to_dict(members), indent=2) + "\n")
        tmp.replace(path)


def held_out(path: Path, but: Owner | None = None) -> list[str]:
    """`out_of_service` of the file's members."""
    return out_of_service(load(path), but)


def site_held_out(site: str, but: Owner | None = None) -> list[str]:
    """`out_of_service` of the site's members (an older aisite's quarantines moved in first: `migrate_older`)."""
    migrate_older(site)
    return out_of_service(load(members_file(site)), but)


def migrate_older(site: str) -> list[str]:
    """Move into members.json the quarantines an older aisite recorded only in health's own record (state.json,
    before members.json), so that no rollout or install takes their place in the budget: each becomes health's hold
    where health holds none yet; health writes both files since, so this moves each one once. The names moved."""
    older = _older_quarantines(health_state_file(site))
    path = members_file(site)
    if all("health" in load(path).get(name, Member()).holds for name in older):
        return []
    moved = []
    with editing(path) as members:
        for name, m in older.items():
            member = members.setdefault(name, Member())
            if "health" not in member.holds:
                member.holds["health"] = m.holds["health"]
                _note(member, timestamp(), "health", f"{State.QUARANTINED} (moved from health's state.json)")
                moved.append(name)
    return moved


def read_named(path: Path, fits: Callable[[Any], bool], what: str) -> dict[str, dict[str, Any]]:
    """A JSON record of this machine's (name -> record, as aisite writes them) whose every record `fits`; anything
    else is a RecordError naming the file, never a guess. {} when there is no file."""
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict):
            raise ValueError("not a mapping of node names")
        for name, rec in doc.items():
            if not isinstance(rec, dict) or not fits(rec):
                raise ValueError(f"{str(name)[:64]}: not {what}")
        return {str(name): rec for name, rec in doc.items()}
    except ValueError as exc:
        raise RecordError(f"{path}: {exc}") from exc


_QUARANTINE_FIELDS = (("quarantined", False), ("since", ""), ("reason", ""))


def _older_quarantines(path: Path) -> dict[str, Member]:
    """The nodes health's own record (state.json) holds quarantined, as health holds them. Only the three fields a
    hold needs are read, each of the type health writes (health/site.py `load_state` reads the whole record): the
    store sits below health, so it reads the older file itself rather than through health's module."""
    records = read_named(
        path, lambda rec: all(isinstance(rec.get(k, d), type(d)) for k, d in _QUARANTINE_FIELDS), "a health record"
    )
    return {
        name: Member({"health": Hold(State.QUARANTINED, "", rec.get("since", ""), rec.get("reason", ""))})
        for name, rec in records.items()
        if rec.get("quarantined", False)
    }


def rows(names: Iterable[str], members: dict[str, Member]) -> list[dict[str, Any]]:
    """One row per member of the site (the plan's names), for `aisite nodes`."""
    out = []
    for name in names:
        m = members.get(name, Member())
        first = m.first
        h = m.holds.get(first)
        out.append(
            {
                "name": name,
                "state": m.state,
                "pending": h.pending if h else "",
                "by": first,
                "since": h.since if h else "",
                "message": h.message if h else "",
                "holds": {o: asdict(x) for o, x in m.holds.items()},
                "history": m.history,
            }
        )
    return out
