"""`aisite maintenance`: roll a change that needs members out of service, wave by wave within the site's budget,
and see, pause, resume or skip it. Exit 0 done; 1 failed, waiting or paused (the rollout is recorded and
resumable); 2 bad input or a rollout that cannot start; 75 another maintenance command of the site is running."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from aisite.cli.common import EXIT_FAILED, EXIT_INVALID, JsonOpt, StackArg, err, invalid, load_plan, load_plan_at, out
from aisite.cli.health import show_recorded
from aisite.cli.progress import progress_runner
from aisite.errors import SiteError
from aisite.firmware import read_site
from aisite.maintenance.roll import MaintenanceBusyError, Rolled, begin, save_rollout
from aisite.maintenance.roll import maintenance_lock as roll_lock
from aisite.maintenance.roll import roll as roll_rollout
from aisite.maintenance.rollout import rollout
from aisite.maintenance.run import start
from aisite.maintenance.state import RolloutState, load, skip
from aisite.members import store
from aisite.members.budget import site_budget
from aisite.members.store import timestamp
from aisite.paths import maintenance_dir, members_file
from aisite.plan import Plan

EXIT_BUSY = 75
maintenance_app = typer.Typer(
    help="Roll a change that needs nodes out of service in waves within the site's disruption budget "
    "(cordon, drain, apply, reboot, verify, uncordon), resumable; see it, pause, resume or skip a node.",
    no_args_is_help=True,
)


@contextmanager
def maintenance_lock(site: str) -> Iterator[None]:
    """The site's maintenance lock; another command holding it exits 75."""
    try:
        with roll_lock(site):
            yield
    except MaintenanceBusyError as exc:
        print(exc, file=sys.stderr)
        raise typer.Exit(EXIT_BUSY) from None


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


def roll(p: Plan, state: RolloutState) -> Rolled:
    """The rollout from where it stands, with the CLI's progress (`maintenance start`, `resume`, and `deploy` for
    what it held back)."""
    return roll_rollout(p, state, progress_runner, lambda s: err.print(s, markup=False, highlight=False))


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
        save_rollout(p.site, state)
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
