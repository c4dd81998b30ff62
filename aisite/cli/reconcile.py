"""`aisite diff` (what a commit changes, for review) and `aisite reconcile` (apply the site from its repository)."""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from typer.core import TyperGroup

from aisite.cli.common import (
    EXIT_FAILED,
    EXIT_INVALID,
    JsonOpt,
    StackArg,
    complete_layer,
    complete_stack,
    err,
    load_plan,
    load_plan_at,
    out,
)
from aisite.cli.progress import progress_runner
from aisite.diff import markdown, site_diff
from aisite.firmware import read_site
from aisite.foreign import show
from aisite.loader import resolve_stack
from aisite.members import store
from aisite.playbooks import LAYERS, OPTIONAL_LAYERS
from aisite.reconcile.hook import post_receive
from aisite.reconcile.nodes import convergence
from aisite.reconcile.nodes import write_metrics as write_nodes_metrics
from aisite.reconcile.run import Config, reconcile_pass, watch
from aisite.reconcile.state import BusyError, PassRecord, load_status, workdir
from aisite.render.inventory import group_sizes, inventory, inventory_text

EXIT_BUSY = 75  # EX_TEMPFAIL: another reconcile holds the lock; try again later


class _StackFirst(TyperGroup):
    """`aisite reconcile STACK --repo URL` (a pass) beside `aisite reconcile status STACK`: the first word that is
    neither an option, an option's value nor a subcommand is the stack (the pass's --stack), so the
    stack is positional here as in every other command (--stack, the older form, still works)."""

    # ctx: typer's own click Context (typer vendors click; its module is private).
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        takes_value = {
            name
            for p in self.params
            if p.param_type_name == "option" and not getattr(p, "is_flag", False)
            for name in p.opts
        }
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--":
                break
            if arg.startswith("-"):
                i += 2 if arg in takes_value else 1
                continue
            if arg not in self.commands:
                args = [*args[:i], "--stack", arg, *args[i + 1 :]]
            break
        return super().parse_args(ctx, args)


reconcile_app = typer.Typer(
    cls=_StackFirst,
    help="Apply the site from its Git repository: a pass (aisite reconcile STACK --repo URL), a watch loop, a drift "
    "check, and what they recorded. Exit 0 applied or unchanged; 1 failed, refused, or drift found by --check; "
    "2 bad options; 75 another reconcile of the stack is running.",
    invoke_without_command=True,
    no_args_is_help=False,
)


def diff(
    stack: StackArg,
    against: Annotated[str, typer.Option("--against", help="The revision to compare the working tree with.")] = "HEAD",
    firmware: Annotated[
        bool,
        typer.Option(
            "--firmware",
            help="Also read the BMCs of the nodes with a firmware baseline: those that differ go out of service.",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """The plan of the stack at a revision (default HEAD) against the working tree: nodes, switches, addresses,
    routes, switch ports, cables, BGP sessions and Kubernetes objects added, removed or changed, the layers and
    hosts each change runs on, and the waves of what must go out of service. It reads only the two plans unless
    --firmware. Exit 0 either way; 2 when either side is invalid."""
    path = resolve_stack(stack)
    old = load_plan_at(stack, against, as_json)
    new = load_plan(stack, as_json)
    # Members held out of service on this machine (quarantined, provisioning, a rollout's) are out already: the
    # budget counts them.
    held = store.site_held_out(new.site)
    d = site_diff(old, new, LAYERS, held, read_site(new) if firmware else None)
    if as_json:
        print(json.dumps(d.to_dict() | {"against": against, "stack": str(path)}, indent=2))
    else:
        out.print(markdown(d, f"aisite diff {path.name}: {against} -> working tree"), markup=False, highlight=False)


def _print_pass(rec: PassRecord, as_json: bool) -> None:
    if as_json:
        print(json.dumps(asdict(rec), indent=2))
        return
    colour = {"applied": "green", "unchanged": "green", "drift": "yellow"}.get(rec.outcome, "red")
    # A commit's subject and git's words are the pusher's text: never read as markup.
    out.print(f"[{colour}]{rec.outcome}[/] {rec.commit[:12]} {show(repr(rec.subject))} ({rec.mode}, {rec.seconds} s)")
    if rec.signer:
        out.print(f"  signed: {rec.signer}", markup=False)
    if rec.rewound_from:
        out.print(f"  [yellow]moved back[/] from {rec.rewound_from[:12]} (--allow-rewind)")
    for note in rec.notes:
        out.print(f"  note: {note}", markup=False)
    for layer, hosts in rec.layers.items():
        out.print(f"  ran {layer} on {', '.join(hosts)}")
    for host, n in rec.changed.items():
        out.print(f"  changed {host}: {n} tasks")
    for host, tasks in rec.drifted.items():
        for task in tasks:
            out.print(f"  [yellow]drift[/] {host}: {task}")
    for p in rec.promotions:
        if p["state"] == "failed":
            continue  # said among the errors
        what = f"{p['serving']} {p['candidate']}".strip()
        commits = ", ".join(c[:12] for c in p.get("commits") or [])
        out.print(
            f"  promotion {what}: {p['state']}"
            + (f" ({p['note']})" if p.get("note") else "")
            + (f", commits {commits}" if commits else ""),
            markup=False,
        )
    for e in rec.errors:
        err.print(f"  [red]error[/]: {show(e, 1000)}")


# The form before the stack was positional, kept for scripts and units that still say --stack.
def _stack_arg(text: str) -> Any:
    return typer.Argument(metavar="STACK", help=text, autocompletion=complete_stack)


StackOpt = Annotated[str | None, typer.Option("--stack", hidden=True, help="The stack (give it first instead).")]


def _one_stack(arg: str | None, opt: str | None) -> str:
    if arg and opt and arg != opt:
        print(f"STACK: {arg!r} and --stack {opt!r}: give one", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    if not (arg or opt):
        print("STACK: required", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    return str(arg or opt)


@reconcile_app.callback()
def reconcile(  # noqa: PLR0917 (typer: one parameter per option)
    ctx: typer.Context,
    repo: Annotated[str | None, typer.Option("--repo", help="URL or path of the site repository.")] = None,
    branch: Annotated[str, typer.Option("--branch", help="The branch that describes the site.")] = "main",
    stack: Annotated[
        str | None,
        typer.Option("--stack", help="The stack in that repository (e.g. dc1); given first, without --stack."),
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="One pass, then exit (the default).")] = False,
    watch_: Annotated[bool, typer.Option("--watch", help="Poll the branch until stopped.")] = False,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between passes with --watch.")] = 60.0,
    full_every: Annotated[
        float | None,
        typer.Option("--full-every", help="With --watch: a full pass (every layer, every host) every N seconds."),
    ] = None,
    full: Annotated[bool, typer.Option("--full", help="Run every layer on every host, changed or not.")] = False,
    check: Annotated[
        bool,
        typer.Option("--check", help="Report drift (Ansible check mode) per host and task; change nothing."),
    ] = False,
    layer: Annotated[
        str | None,
        typer.Option(
            "--layer",
            help="With --check: check this layer only (as aisite deploy --layer).",
            autocompletion=complete_layer,
        ),
    ] = None,
    limit: Annotated[
        str | None,
        typer.Option("--limit", help="With --check: check these hosts only (host and group names, a:b or a,b)."),
    ] = None,
    allowed_signers: Annotated[
        Path | None,
        typer.Option(
            "--allowed-signers",
            help="OpenSSH allowed-signers file: apply only commits signed by a key listed there.",
        ),
    ] = None,
    engine: Annotated[str, typer.Option("--engine", help="ansible (aisite deploy) or pulumi (pulumi up).")] = "ansible",
    wait: Annotated[bool, typer.Option("--wait", help="Wait for a running reconcile instead of leaving.")] = False,
    allow_rewind: Annotated[
        str | None,
        typer.Option(
            "--allow-rewind",
            help="Apply this commit (full hash) although it does not descend from the applied one: moves the site "
            "back deliberately; recorded as such. Without it such a commit is refused.",
        ),
    ] = None,
    signing_key: Annotated[
        Path | None,
        typer.Option(
            "--signing-key",
            help="SSH key that signs the automatic promotions' commits (site.serving[].promotion.automatic).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Fetch the branch, verify and validate its commit, and apply only what changed (a pass). Exit 0 applied or
    unchanged; 1 failed, refused or drift found by --check; 2 bad options; 75 another reconcile is running."""
    if ctx.invoked_subcommand is not None:
        return
    problems = []
    if not repo:
        problems.append("--repo: required")
    elif repo.startswith("-"):
        problems.append(f"--repo: {repo!r} is not a URL or a path")
    if not stack:
        problems.append("STACK: required (aisite reconcile STACK --repo URL)")
    if once and watch_:
        problems.append("--once and --watch: choose one")
    if full and check:
        problems.append("--full and --check: choose one")
    if (layer or limit) and not check:
        problems.append("--layer and --limit: only with --check (a pass applies the whole commit or nothing)")
    if layer is not None and layer not in (*LAYERS, *OPTIONAL_LAYERS):
        problems.append(f"--layer: {layer!r} is not one of {', '.join((*LAYERS, *OPTIONAL_LAYERS))}")
    if limit is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+(?:[:,][A-Za-z0-9_.-]+)*", limit):
        problems.append(f"--limit: {limit!r} is not host or group names (a:b or a,b)")
    if engine not in ("ansible", "pulumi"):
        problems.append(f"--engine: {engine!r} is not ansible or pulumi")
    if allowed_signers is not None and not allowed_signers.is_file():
        problems.append(f"--allowed-signers: {allowed_signers}: no such file")
    if signing_key is not None and not signing_key.is_file():
        problems.append(f"--signing-key: {signing_key}: no such file")
    if interval <= 0:
        problems.append("--interval: must be above 0")
    if allow_rewind is not None and not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", allow_rewind):
        problems.append(f"--allow-rewind: {allow_rewind!r} is not a full commit hash")
    if allow_rewind is not None and watch_:
        problems.append("--allow-rewind and --watch: a rewind is one deliberate pass")
    if problems:
        for p in problems:
            print(f"error: {p}", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    assert repo is not None and stack is not None
    # The key is read by a child running in the work clone: its path must not depend on where this one runs.
    key = signing_key.resolve() if signing_key else None
    cfg = Config(repo, branch, stack, allowed_signers, engine, wait, allow_rewind, layer, limit, key)
    mode = "check" if check else "full" if full else "changed"

    def step(msg: str) -> None:
        err.print(f"[dim]{msg}[/]")

    if watch_:

        def on_pass(rec: PassRecord) -> None:
            _print_pass(rec, as_json)

        watch(cfg, interval, full_every, on_pass, step)
        return
    try:
        rec = reconcile_pass(cfg, mode, step)
    except BusyError as exc:
        if as_json:
            print(json.dumps({"outcome": "busy", "message": str(exc)}))
        print(f"busy: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_BUSY) from None
    _print_pass(rec, as_json)
    if rec.outcome not in ("applied", "unchanged"):
        raise typer.Exit(EXIT_FAILED)


@reconcile_app.command("status")
def status(
    stack_arg: Annotated[
        str | None,
        _stack_arg("The stack the reconciler applies."),
    ] = None,
    stack_opt: StackOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What the reconciler of a stack last did: the applied commit, the last passes, failures."""
    stack = _one_stack(stack_arg, stack_opt)
    st = load_status(stack, lambda msg: print(f"warning: {msg}", file=sys.stderr))
    if as_json:
        print(json.dumps(st.to_dict(), indent=2))
        return
    if not st.passes:
        out.print(f"no reconcile of stack {stack!r} recorded on this machine ({workdir(stack)})")
        return
    out.print(f"stack [bold]{stack}[/] from {st.repo} ({st.branch}): applied {st.applied_commit or 'nothing yet'}")
    out.print(f"failures: {st.failures_total}")
    for rec in st.passes[-10:]:
        _print_pass(rec, False)


@reconcile_app.command("nodes")
def nodes(
    stack_arg: Annotated[
        str | None,
        _stack_arg("The stack whose nodes pull their layers."),
    ] = None,
    stack_opt: StackOpt = None,
    tip: Annotated[
        str | None,
        typer.Option(help="The commit the site is at (default: the one the reconciler applied last on this machine)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """How the nodes that converge themselves (gitops.pull_layers) stand: each one's last pass, read on the node
    (state.json), as converged, behind (an older commit applied), failing (refused or failed, and for how long),
    never (no pass) or unreachable. Exit 1 when any is not converged."""
    stack = _one_stack(stack_arg, stack_opt)
    p = load_plan(stack, as_json)
    if not p.pulled_layers:
        print(f"{stack}: the site pulls no layer (gitops.pull_layers is empty)", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    if tip is not None and not re.fullmatch(r"[0-9a-f]{40}", tip):
        print(f"--tip: {tip!r} is not a full commit hash", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    tip = tip or load_status(stack, lambda msg: print(f"warning: {msg}", file=sys.stderr)).applied_commit or None
    inv = inventory(p)
    groups = group_sizes(inv)
    result = progress_runner("pull-status.yml", inventory_text(inv), {}, limit=None, check=False, groups=groups)
    records = dict(result.stats.get("pull_states") or {})
    down = [h for h, r in result.recap.items() if r.unreachable]
    now = time.time()
    rows = convergence([n.name for n in p.nodes], records, tip, now, down)  # every node pulls
    metrics = write_nodes_metrics(stack, rows, now, workdir(stack) / "aisite_reconcile_nodes.prom")
    if as_json:
        print(json.dumps({"tip": tip, "nodes": [asdict(r) for r in rows], "metrics": str(metrics)}, indent=2))
    else:
        table = Table(title=f"{stack}: nodes at {tip[:12] if tip else 'an unknown commit'}")
        for col in ("node", "state", "applied", "last pass", "since success", "message"):
            table.add_column(col)
        style = {"converged": "green", "behind": "yellow"}
        for r in rows:
            table.add_row(
                r.node,
                r.state,
                r.applied_commit[:12],
                f"{r.last_outcome} {r.last_pass_age_seconds:.0f} s ago" if r.last_pass_age_seconds else r.last_outcome,
                f"{r.since_success_seconds:.0f} s" if r.since_success_seconds is not None else "never",
                show(r.message),
                style=style.get(r.state, "red"),
            )
        out.print(table)
    if any(r.state != "converged" for r in rows):
        raise typer.Exit(EXIT_FAILED)


@reconcile_app.command("hook")
def hook(
    stack_arg: Annotated[
        str | None,
        _stack_arg("The stack the hook reconciles."),
    ] = None,
    stack_opt: StackOpt = None,
    branch: Annotated[str, typer.Option("--branch", help="The branch whose pushes trigger a pass.")] = "main",
    allowed_signers: Annotated[
        Path | None, typer.Option("--allowed-signers", help="Passed on to the reconcile.")
    ] = None,
) -> None:
    """Print a post-receive hook for a bare site repository: a push to the branch runs one reconcile pass (its
    output goes back to whoever pushed). Install it as hooks/post-receive, executable."""
    stack = _one_stack(stack_arg, stack_opt)
    print(post_receive(stack, branch, allowed_signers))
