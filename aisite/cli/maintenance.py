"""`aisite maintenance`: roll a change that needs members out of service, wave by wave within the site's budget,
and see, pause, resume or skip it. Exit 0 done; 1 failed, waiting or paused (the rollout is recorded and
resumable); 2 bad input or a rollout that cannot start; 75 another maintenance command of the site is running."""

from __future__ import annotations

import fcntl
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, NamedTuple

import typer
from rich.markup import escape
from rich.table import Table

from aisite.accept import quick
from aisite.cli.common import (
    EXIT_FAILED,
    EXIT_INVALID,
    JsonOpt,
    StackArg,
    err,
    group_sizes,
    invalid,
    load_plan,
    load_plan_at,
    out,
    timestamp,
)
from aisite.cli.health import show_recorded
from aisite.cli.progress import progress_runner
from aisite.deploy import RunResult
from aisite.errors import SiteError
from aisite.firmware import read_site
from aisite.maintenance import jobs
from aisite.maintenance.rollout import rollout
from aisite.maintenance.run import run, start
from aisite.maintenance.state import RolloutState, load, save, skip, sync_members
from aisite.maintenance.steps import AnsibleSteps
from aisite.members import store
from aisite.members.budget import site_budget
from aisite.paths import maintenance_dir, members_file
from aisite.plan import Plan
from aisite.render.inventory import inventory, inventory_text
from aisite.secrets import resolve

EXIT_BUSY = 75
maintenance_app = typer.Typer(
    help="Roll a change that needs nodes out of service in waves within the site's disruption budget "
    "(cordon, drain, apply, reboot, verify, uncordon), resumable; see it, pause, resume or skip a node.",
    no_args_is_help=True,
)


@contextmanager
def maintenance_lock(site: str) -> Iterator[None]:
    path = maintenance_dir(site) / "lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"another maintenance command of site {site!r} is running", file=sys.stderr)
            raise typer.Exit(EXIT_BUSY) from None
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


def show_rollout(state: RolloutState | None, as_json: bool, rolled: Rolled | None = None) -> None:
    if as_json:
        doc = rolled.doc() if rolled else {"rollout": state.to_dict() if state else None}
        print(json.dumps(doc, indent=2))
        return
    if state is None:
        out.print("no rollout recorded")
        return
    t = Table(
        title=f"{state.site}: {state.change} — {state.status}, wave {min(state.wave + 1, len(state.waves))} "
        f"of {len(state.waves)}"
    )
    for col in ("wave", "member", "pending", "reasons", "error"):
        t.add_column(col)
    for i, wave in enumerate(state.waves, 1):
        for n in wave:
            m = state.members[n]
            t.add_row(str(i), n, m.pending, escape("; ".join(m.reasons)), escape(m.error))
    out.print(t)
    if rolled:
        for s in rolled.bmc_requests:
            out.print(escape(f"BMC {s}"), highlight=False)
        for s in rolled.accepted:
            out.print(escape(f"accepted: {s}"), highlight=False)
        for s in rolled.jobs:
            out.print(escape(f"jobs: {s}"), highlight=False)
        for s in rolled.skipped:
            out.print(escape(f"skipped: {s}"), highlight=False)
    if state.message:
        out.print(escape(state.message), highlight=False)


def _save(site: str, state: RolloutState) -> None:
    """The rollout after a step, and what it makes of its members' state (aisite.members.store)."""
    save(maintenance_dir(site) / "rollout.json", state)
    sync_members(members_file(site), state, timestamp())


def begin(site: str, state: RolloutState, current: RolloutState | None) -> None:
    """Record a new rollout, keeping the finished one it replaces beside it (in done/)."""
    folder = maintenance_dir(site)
    if current is not None:
        (folder / "done").mkdir(exist_ok=True)
        (folder / "rollout.json").replace(folder / "done" / f"{current.created.replace(':', '')}.json")
    (folder / "paused").unlink(missing_ok=True)
    _save(site, state)


def roll(p: Plan, state: RolloutState) -> Rolled:
    """Run the rollout from where it stands (`aisite maintenance start` and `resume`, and `deploy` for what it held
    back): its state, what its steps could not do here (said), what they asked BMCs for and what the quick
    acceptance measured."""
    secret_env, problems = resolve(p)
    if problems:
        raise SiteError(p.site, problems)
    inv = inventory(p)
    text = inventory_text(inv)
    groups = group_sizes(inv)
    env = {k: str(v) for k, v in secret_env.items()}

    def runner(playbook: str, limit: str | None, extravars: Any) -> RunResult:
        return progress_runner(playbook, text, env, limit=limit, check=False, groups=groups, extravars=dict(extravars))

    accept, no_accept = quick.for_rollout(p)
    waits = jobs.for_rollout(p, lambda s: err.print(s, markup=False, highlight=False))
    steps = AnsibleSteps(p, runner, secret_env, accept=accept, no_accept=no_accept, jobs=waits)
    folder = maintenance_dir(p.site)
    state = run(
        state,
        steps,
        budget=site_budget(p),
        elsewhere=lambda: store.site_held_out(p.site, but="maintenance"),
        paused=(folder / "paused").exists,
        save=lambda s: _save(p.site, s),
        now=timestamp,
    )
    return Rolled(state, steps.skipped, steps.done, steps.accepted, steps.drained)


def _roll(p: Plan, state: RolloutState, as_json: bool) -> None:
    try:
        rolled = roll(p, state)
    except SiteError as exc:
        raise invalid(exc, as_json) from None
    show_rollout(rolled.state, as_json, rolled)
    if rolled.state.status != "done":
        raise typer.Exit(EXIT_FAILED)


@maintenance_app.command("start")
def start_command(
    stack: StackArg,
    against: Annotated[str, typer.Option("--against", help="The revision the site runs (default HEAD).")] = "HEAD",
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Print the waves and each member's reasons (BMCs read); record and change nothing."
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Roll what the working tree's stack changes against the revision the site runs, with the nodes whose
    firmware (read through their BMCs) differs from their baseline: the waves `aisite diff --firmware` shows, each
    member cordoned, drained, applied, rebooted where needed, checked and given back."""
    old = load_plan_at(stack, against, as_json)
    new = load_plan(stack, as_json)
    with maintenance_lock(new.site):
        current = load(maintenance_dir(new.site) / "rollout.json")
        if current is not None and current.status != "done":
            print(f"a rollout is recorded ({current.change}, {current.status}): resume it", file=sys.stderr)
            raise typer.Exit(EXIT_INVALID)
        # The nodes with a firmware baseline are read through their BMCs: one that differs goes out to be set.
        fw = read_site(new)
        for name, reason in (fw.unread | fw.unsupported).items():
            print(f"firmware not read: {name}: {reason}", file=sys.stderr)
        change = f"{against} -> working tree" + (", firmware baseline" if fw.drifted else "")
        out = store.site_held_out(new.site, but="maintenance")
        state, why = start(rollout(old, new, out, fw.drifted), new.site, change, timestamp())
        if state is None:
            for w in why:
                print(f"cannot start: {w}", file=sys.stderr)
            raise typer.Exit(EXIT_INVALID)
        if dry_run:
            _print_intent(state, as_json)
            return
        begin(new.site, state, current)
        _roll(new, state, as_json)


def _print_intent(state: RolloutState, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"dry_run": True, "change": state.change, "waves": state.waves} | _reasons(state), indent=2))
        return
    out.print(f"would roll {state.change} in {len(state.waves)} wave(s):", markup=False)
    for i, wave in enumerate(state.waves, 1):
        for name in wave:
            m = state.members[name]
            reboot = ", reboot" if m.reboot else ""
            out.print(f"  wave {i}: {name}: {'; '.join(m.reasons)}{reboot}", markup=False, highlight=False)
    out.print("dry run: nothing recorded, no member cordoned", highlight=False)


def _reasons(state: RolloutState) -> dict[str, Any]:
    return {"members": {n: {"reasons": m.reasons, "reboot": m.reboot} for n, m in state.members.items()}}


@maintenance_app.command("resume")
def resume_command(stack: StackArg, as_json: JsonOpt = False) -> None:
    """Go on with the recorded rollout where it stopped (a failed step is tried again)."""
    p = load_plan(stack, as_json)
    with maintenance_lock(p.site):
        state = load(maintenance_dir(p.site) / "rollout.json")
        if state is None or state.status == "done":
            print("no rollout to resume", file=sys.stderr)
            raise typer.Exit(EXIT_INVALID)
        (maintenance_dir(p.site) / "paused").unlink(missing_ok=True)
        _roll(p, state, as_json)


@maintenance_app.command("status")
def status_command(stack: StackArg, as_json: JsonOpt = False) -> None:
    """The recorded rollout: each member's pending action, its error, and why the rollout stopped."""
    p = load_plan(stack, as_json)
    show_rollout(load(maintenance_dir(p.site) / "rollout.json"), as_json)


@maintenance_app.command("pause")
def pause_command(stack: StackArg) -> None:
    """Stop the running rollout before its next step (members keep their state)."""
    p = load_plan(stack)
    folder = maintenance_dir(p.site)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "paused").write_text(timestamp() + "\n")
    out.print("the rollout stops before its next step; `aisite maintenance resume` goes on")


@maintenance_app.command("skip")
def skip_command(stack: StackArg, member: Annotated[str, typer.Argument(help="The node to leave out.")]) -> None:
    """Leave a member out of the recorded rollout: one not yet cordoned (it keeps its old state), or one whose step
    failed (the operator's now, where the failure left it)."""
    p = load_plan(stack)
    with maintenance_lock(p.site):
        path = maintenance_dir(p.site) / "rollout.json"
        state = load(path)
        why = skip(state, member, timestamp()) if state else "no rollout recorded"
        if why:
            print(f"cannot skip: {why}", file=sys.stderr)
            raise typer.Exit(EXIT_INVALID)
        assert state is not None
        _save(p.site, state)
        out.print(f"{member} skipped")


def status_all_command(
    stack: StackArg,
    health: Annotated[
        bool,
        typer.Option("--health", help="Each node's health as the last `aisite health` pass recorded it, instead."),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Every node's and switch's one state, as provisioning, health and maintenance left it on this machine: in
    service, or what holds it out (provisioning,
    quarantined, a rollout's step) and the action it waits on. The site's disruption budget counts exactly these.
    With --health, each node's last recorded check and quarantine."""
    p = load_plan(stack, as_json)
    if health:
        show_recorded(p, as_json)
        return
    roles = {n.name: n.role for n in p.nodes} | {s.name: s.role for s in p.switches}
    members = store.load(members_file(p.site))
    rows = store.rows(roles, members)
    held = [r for r in rows if r["holds"]]
    # A name the site no longer has (removed from the stack while held) takes nothing from the budget: said.
    gone = sorted(n for n, m in members.items() if m.holds and n not in roles)
    gpus = site_budget(p).gpus_out(r["name"] for r in held)
    if as_json:
        doc = {"site": p.site, "members": [r | {"role": roles[r["name"]]} for r in rows], "not_in_site": gone}
        print(json.dumps(doc | {"gpus_out": gpus}, indent=2))
        return
    title = f"{p.site}: {len(rows) - len(held)} of {len(rows)} nodes and switches in service, {gpus} GPUs out"
    if not held:
        out.print(title, markup=False)
    else:
        t = Table(title=title)
        for col in ("member", "role", "state", "pending", "by", "since", "why"):
            t.add_column(col)
        for r in held:
            # Every owner's hold, the one that names the state first (a quarantined node in a rollout has two).
            for i, (owner, h) in enumerate(sorted(r["holds"].items(), key=lambda x: x[0] != r["by"])):
                name, role = (r["name"], roles[r["name"]]) if i == 0 else ("", "")
                t.add_row(name, role, h["state"], h["pending"] or "-", owner, h["since"], escape(h["message"]))
        out.print(t)
    for n in gone:
        out.print(f"{n}: held in the record but no longer in the site (not counted)", markup=False)
