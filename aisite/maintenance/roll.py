"""Rolling a recorded rollout from where it stands, for `aisite maintenance start` and `resume` and for what a
deploy held back: its steps on the site through Ansible, its state saved after each and reflected in the member
store, one maintenance command of a site at a time."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from aisite.accept import quick
from aisite.deploy import PlaybookRunner, RunResult
from aisite.errors import SiteError
from aisite.maintenance import jobs
from aisite.maintenance.run import run
from aisite.maintenance.state import RolloutState, save, sync_members
from aisite.maintenance.steps import AnsibleSteps
from aisite.members import store
from aisite.members.budget import site_budget
from aisite.paths import maintenance_dir, members_file
from aisite.plan import Plan
from aisite.render.inventory import group_sizes, inventory, inventory_text
from aisite.secrets import resolve


class MaintenanceBusyError(Exception):
    """Another maintenance command of the site holds its lock."""


@contextmanager
def maintenance_lock(site: str) -> Iterator[None]:
    """The site's maintenance lock, not waited for: MaintenanceBusyError when another command holds it."""
    path = maintenance_dir(site) / "lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise MaintenanceBusyError(f"another maintenance command of site {site!r} is running") from None
        yield
    finally:
        os.close(fd)


class Rolled(NamedTuple):
    """A rollout after a run of its steps, with what they said: skipped here, asked of BMCs, accepted, and what the
    drains did to running jobs."""

    state: RolloutState
    skipped: list[str]
    bmc_requests: list[str]
    accepted: list[str]
    jobs: list[str]

    def doc(self) -> dict[str, Any]:
        return {
            "rollout": self.state.to_dict(),
            "skipped": self.skipped,
            "bmc_requests": self.bmc_requests,
            "accepted": self.accepted,
            "jobs": self.jobs,
        }


def save_rollout(site: str, state: RolloutState) -> None:
    """The rollout after a step, and what it makes of its members' state (aisite.members.store)."""
    save(maintenance_dir(site) / "rollout.json", state)
    sync_members(members_file(site), state, store.timestamp())


def begin(site: str, state: RolloutState, current: RolloutState | None) -> None:
    """Record a new rollout, keeping the finished one it replaces beside it (in done/)."""
    folder = maintenance_dir(site)
    if current is not None:
        (folder / "done").mkdir(exist_ok=True)
        (folder / "rollout.json").replace(folder / "done" / f"{current.created.replace(':', '')}.json")
    (folder / "paused").unlink(missing_ok=True)
    save_rollout(site, state)


def roll(p: Plan, state: RolloutState, play: PlaybookRunner, note: Callable[[str], None]) -> Rolled:
    """Run the rollout from where it stands: its state, what its steps could not do here (said), what they asked
    BMCs for and what the quick acceptance measured. `note` hears what the drains' wait for jobs says."""
    secret_env, problems = resolve(p)
    if problems:
        raise SiteError(p.site, problems)
    inv = inventory(p)
    text = inventory_text(inv)
    groups = group_sizes(inv)
    env = {k: str(v) for k, v in secret_env.items()}

    def runner(playbook: str, limit: str | None, extravars: Any) -> RunResult:
        return play(playbook, text, env, limit=limit, check=False, groups=groups, extravars=dict(extravars))

    accept, no_accept = quick.for_rollout(p)
    steps = AnsibleSteps(p, runner, secret_env, accept=accept, no_accept=no_accept, jobs=jobs.for_rollout(p, note))
    folder = maintenance_dir(p.site)
    state = run(
        state,
        steps,
        budget=site_budget(p),
        elsewhere=lambda: store.site_held_out(p.site, but="maintenance"),
        paused=(folder / "paused").exists,
        save=lambda s: save_rollout(p.site, s),
        now=store.timestamp,
    )
    return Rolled(state, steps.skipped, steps.done, steps.accepted, steps.drained)
