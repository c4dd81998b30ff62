"""Rolling a disruptive change: the waves of `aisite.maintenance.rollout`, member by member through the steps of
`aisite.maintenance.state`, the budget asked before each wave takes members out (beside what is out for other
reasons: quarantined nodes), the state saved after every step. A failed step stops the rollout where it is
(status failed, the member's error kept); a pause is seen between steps; resuming retries the pending actions.
What runs each step is an executor (aisite.maintenance.steps: Ansible), so this is tested with a scripted one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from aisite.maintenance.rollout import Rollout
from aisite.maintenance.state import FINISHED, STEPS, MemberState, RolloutState, advance
from aisite.members.budget import Budget


class Executor(Protocol):
    def __call__(self, step: str, members: list[str], state: RolloutState) -> dict[str, str]:
        """Run `step` on `members`; per member "" when it succeeded, else why not."""
        ...


def start(rollout: Rollout, site: str, change: str, now: str) -> tuple[RolloutState | None, list[str]]:
    """The rollout's state before its first step, or why it cannot start (a refused change, a member the budget
    cannot take now). Members already out of service (quarantined) that need the change go last, in a wave of
    their own: they take nothing more from the budget."""
    problems = list(rollout.refused) + [f"{n}: {why}" for n, why in rollout.blocked.items()]
    if problems:
        return None, problems
    if not rollout.disruptions:
        return None, ["nothing in this change needs a member out of service"]
    waves = [list(w) for w in rollout.waves] + ([list(rollout.while_out)] if rollout.while_out else [])
    members = {
        n: MemberState(list(d.reasons), d.reboot) for n, d in rollout.disruptions.items() if any(n in w for w in waves)
    }
    return RolloutState(site, change, now, waves, members), []


def run(
    state: RolloutState,
    execute: Executor,
    *,
    budget: Budget,
    elsewhere: Callable[[], list[str]],
    paused: Callable[[], bool],
    save: Callable[[RolloutState], None],
    now: Callable[[], str],
) -> RolloutState:
    state.status, state.message = "running", ""
    save(state)
    while state.wave < len(state.waves):
        wave = [n for n in state.waves[state.wave] if state.members[n].pending not in FINISHED]
        if not wave:
            state.wave += 1
            continue
        fresh = [n for n in wave if state.members[n].pending == "cordon"]
        if fresh:
            # What is out now: quarantined nodes, and this rollout's members not yet given back.
            over = budget.problem([*elsewhere(), *state.out_of_service(), *fresh])
            if over:
                state.status, state.message = "waiting", f"wave {state.wave + 1}: {over}"
                save(state)
                return state
        for step in STEPS:
            if paused():
                state.status, state.message = "paused", f"wave {state.wave + 1}, before {step}"
                save(state)
                return state
            todo = [n for n in wave if state.members[n].pending == step]
            if not todo:
                continue
            errors = execute(step, todo, state)
            at = now()
            for n in todo:
                advance(state.members[n], errors.get(n, ""), at)
            failed = [n for n in todo if state.members[n].error]
            if failed:
                state.status = "failed"
                state.message = f"wave {state.wave + 1}, {step} failed on " + ", ".join(
                    f"{n}: {state.members[n].error}" for n in failed
                )
                save(state)
                return state
            save(state)
        state.wave += 1
    state.status, state.message = "done", ""
    save(state)
    return state
