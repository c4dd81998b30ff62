"""A rollout's state, member by member: each in one phase that names its pending action, moving on only when that
action succeeded (after Metal3's host states and NVIDIA k8s-operator-libs' upgrade states). Kept in
`.aisite/SITE/maintenance/rollout.json` after every step, so a stopped rollout is known and resumable."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aisite.members import store

# What a member goes through, in order; `reboot` only where a change needs one.
STEPS = ("cordon", "drain", "apply", "reboot", "verify", "uncordon")
FINISHED = ("done", "skipped")


@dataclass
class MemberState:
    reasons: list[str]
    reboot: bool
    pending: str = "cordon"  # the next action (one of STEPS), or done / skipped
    error: str = ""  # why the pending action failed last
    # The health check's problems before the change ("check subject"): verify fails on a new one only.
    baseline: list[str] = field(default_factory=list)
    history: list[str] = field(default_factory=list)  # "at step: ok" / "at step: failed: why"
    # What its verify step found installed: the release its BMC reports and the digest of the image it came from.
    installed: str = ""

    @property
    def out_of_service(self) -> bool:
        """Cordoned and not yet given back: counted against the budget."""
        return self.pending not in (*FINISHED, "cordon")


@dataclass
class RolloutState:
    site: str
    change: str  # what rolls: "REV -> working tree"
    created: str
    waves: list[list[str]]
    members: dict[str, MemberState]
    wave: int = 0
    status: str = "running"  # running | paused | waiting | failed | done
    message: str = ""  # why it stopped (the failed step, the budget it waits for)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> RolloutState:
        members = {n: MemberState(**m) for n, m in doc["members"].items()}
        return cls(**{**doc, "members": members})

    @property
    def finished(self) -> bool:
        return all(m.pending in FINISHED for m in self.members.values())

    def out_of_service(self) -> list[str]:
        return sorted(n for n, m in self.members.items() if m.out_of_service)


def steps(member: MemberState) -> list[str]:
    return [s for s in STEPS if s != "reboot" or member.reboot]


def advance(member: MemberState, error: str, at: str) -> None:
    """The pending action's outcome: on success the next action (or done); on failure it stays pending."""
    step = member.pending
    if error:
        member.error = error
        member.history.append(f"{at} {step}: failed: {error}")
        return
    order = steps(member)
    member.error = ""
    member.history.append(f"{at} {step}: ok")
    member.pending = order[order.index(step) + 1] if step != order[-1] else "done"


def skip(state: RolloutState, name: str, at: str) -> str:
    """An operator takes a member out of the rollout: allowed before it was cordoned (it keeps the old state
    and stays in service), or once it failed (it is the operator's now, where the failure left it)."""
    m = state.members.get(name)
    if m is None:
        return f"{name} is not in this rollout"
    if m.pending in FINISHED:
        return f"{name} is {m.pending} already"
    if m.pending != "cordon" and not m.error:
        return f"{name} is between steps ({m.pending} pending); pause the rollout or let the step fail first"
    where = "in service, unchanged" if m.pending == "cordon" else f"left at {m.pending} after: {m.error}"
    m.history.append(f"{at} skipped by the operator ({where})")
    m.pending, m.error = "skipped", ""
    return ""


def save(path: Path, state: RolloutState) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state.to_dict(), indent=2) + "\n")
    tmp.replace(path)


def load(path: Path) -> RolloutState | None:
    if not path.is_file():
        return None
    return RolloutState.from_dict(json.loads(path.read_text()))


def sync_members(path: Path, state: RolloutState, at: str) -> None:
    """The rollout as the site's one state per member (aisite.members.store): from its cordon until it is given back,
    a member is held in maintenance at its pending step (maintenance-failed, with the error, while that step
    failed); the current wave's members are held as soon as the rollout runs them (before the budget is asked:
    for a moment too soon rather than too late). Done or skipped, it is released."""
    current = set(state.waves[state.wave]) if state.wave < len(state.waves) else set()
    with store.editing(path) as members:
        for name, m in sorted(state.members.items()):
            starting = m.pending == "cordon" and state.status == "running" and name in current
            if m.pending in FINISHED or (m.pending == "cordon" and not m.error and not starting):
                said = m.pending if m.pending in FINISHED else ""
                store.release(members, name, "maintenance", at=at, message=said)
            else:
                failed, held = store.State.MAINTENANCE_FAILED, store.State.MAINTENANCE
                phase, why = (failed, m.error) if m.error else (held, "; ".join(m.reasons))
                store.hold(members, name, "maintenance", state=phase, pending=m.pending, at=at, message=why)
