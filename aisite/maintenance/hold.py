"""What a whole-site `deploy` (and so the reconciler, which runs it) holds back for a rollout instead of applying
at once: the members the change needs out of service, against the stack the last whole-site deploy applied
(`paths.applied_stack_file`), and the members of a rollout still under way. Deploy runs every other host, then
rolls the held members in their waves (aisite.maintenance.run); this module decides, the CLI runs."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aisite.errors import SiteError
from aisite.loader import load_site
from aisite.maintenance.rollout import Rollout, rollout
from aisite.maintenance.state import FINISHED, RolloutState
from aisite.paths import applied_stack_file
from aisite.plan import Plan, build_plan
from aisite.render.bundle import write_bundle


@dataclass
class HoldBack:
    members: dict[str, str] = field(default_factory=dict)  # member -> why deploy leaves it out
    rollout: Rollout | None = None  # the new disruptive changes, to roll now (None: none, or none can start)
    problems: list[str] = field(default_factory=list)  # why the new ones cannot roll now (they wait, held back)
    under_way: bool = False  # members are held for a recorded rollout not yet done

    @property
    def settled(self) -> bool:
        """Every held member is owned by a rollout (under way, or about to start): the stack can be recorded."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "held_back": self.members,
            "waves": self.rollout.waves if self.rollout else [],
            "problems": self.problems,
        }


def applied_plan(site: str) -> tuple[Plan | None, str]:
    """The plan of the stack last applied to the whole site, or None and why there is none to compare with."""
    path = applied_stack_file(site)
    if not path.is_file():
        return None, "no whole-site deploy recorded from here yet"
    try:
        return build_plan(load_site(path)), ""
    except SiteError as exc:
        # Recorded by an older aisite whose stack this one no longer reads: nothing to compare with, said.
        return None, f"the recorded stack ({path}) does not load any more: {exc.problems[0]}"


def record_applied_stack(site: str, text: str) -> None:
    path = applied_stack_file(site)
    write_bundle({path.name: text}, path.parent)


def hold_back(
    old: Plan | None,
    new: Plan,
    current: RolloutState | None,
    out: Iterable[str] = (),
    *,
    firmware: Mapping[str, list[str]] | None = None,
    in_service: Collection[str] | None = None,
) -> HoldBack:
    """The members deploy must leave out: those of `current` (a recorded rollout) not yet through it, and those
    `old` -> `new` needs out of service (with `out`, the members held out for other reasons, counted against the
    budget). The latter roll now unless a rollout is under way or the change cannot start (a refused version
    step, a member the budget cannot take): then they wait, held back, with why. `in_service`: the members with
    anything applied (None: all); one with nothing applied (new, reinstalled, a lab container made afresh) serves
    nothing yet and takes the change at once."""
    hold = HoldBack()
    if current is not None and not current.finished and current.status != "done":
        hold.under_way = True
        for name, m in current.members.items():
            if m.pending not in FINISHED:
                hold.members[name] = f"in the rollout under way ({current.change}: {current.status})"
    if old is None:
        return hold
    r = rollout(old, new, out, firmware, only=in_service)
    fresh = {n: "; ".join(d.reasons) for n, d in sorted(r.disruptions.items()) if n not in hold.members}
    if r.refused:
        hold.problems += r.refused
    if not fresh:
        return hold
    hold.members |= fresh
    if hold.under_way:
        hold.problems.append("a rollout is under way: the new change waits until it is done (maintenance resume)")
    hold.problems += [f"{n}: {why}" for n, why in r.blocked.items()]
    if not hold.problems:
        hold.rollout = r
    return hold
