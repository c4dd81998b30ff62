"""Running the site's playbooks: `deploy`, `cabling`, and `play` (how the Pulumi layers call Ansible)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from aisite.changes import LayerState, contents_text, layer_states, resolve_pattern, run_limit
from aisite.cli.common import (
    EXIT_FAILED,
    EXIT_INVALID,
    LAYERS,
    OPTIONAL_LAYERS,
    JsonOpt,
    StackArg,
    complete_layer,
    err,
    group_sizes,
    invalid,
    load_plan,
    out,
    timestamp,
)
from aisite.cli.maintenance import Rolled, begin, maintenance_lock, roll, show_rollout
from aisite.cli.progress import progress_runner
from aisite.deploy import (
    RunResult,
    applied_hosts,
    forget_applied,
    merge,
    record_applied,
    record_run,
)
from aisite.errors import SiteError
from aisite.layer_run import LayerRun, run_layer
from aisite.loader import resolve_stack
from aisite.maintenance.hold import HoldBack, applied_plan, hold_back, record_applied_stack
from aisite.maintenance.run import start
from aisite.maintenance.state import load as load_rollout
from aisite.maintenance.steps import MEMBER_LAYERS
from aisite.members import store
from aisite.paths import maintenance_dir
from aisite.plan import Plan
from aisite.platform.serving import retired_ids
from aisite.render.bundle import write_bundle
from aisite.render.inventory import inventory, inventory_text
from aisite.render.manifests import layer_files, manifest_files
from aisite.repo import GitError, verified_tip
from aisite.secrets import resolve

Run = tuple[list[str], str | None]  # layers of one playbook run, its --limit


def _runs(  # noqa: PLR0917
    states: dict[str, LayerState],
    inv: dict[str, Any],
    layer: str | None,
    limit: str | None,
    changed: bool,
    check: bool,
    applied: dict[str, dict[str, str]],
    as_json: bool,
    pulled: tuple[str, ...] = (),
    held: frozenset[str] = frozenset(),
) -> list[Run]:
    """The playbook runs of a deploy: the whole site in one (or one layer); with --changed each layer on its
    pending hosts; with --check each layer on its own, so drift is known per layer. The layers the nodes pull
    (gitops.pull_layers) are theirs: left out unless asked for by name (--layer), each other layer run alone.
    Members held back for a rollout (`held`) are left out of every run: then each layer runs on its own hosts."""
    if not changed and not held:
        if layer:
            return [([layer], limit)]
        if check or pulled:
            return [([name], limit) for name in LAYERS if name not in pulled]
        return [(list(LAYERS), limit)]
    among = resolve_pattern(limit, inv) if limit else None
    if limit and among is None:
        why = "with --changed" if changed else "while members are held back for a rollout"
        msg = f"--limit {limit!r}: {why}, give host and group names (a:b or a,b)"
        if as_json:
            print(json.dumps({"valid": False, "errors": [{"path": "--limit", "message": msg}]}))
        print(msg, file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    runs: list[Run] = []
    for name, state in states.items():
        if (layer and name != layer) or (not layer and name in pulled):
            continue
        chosen = state.pending(applied.get(name, {})) if changed else list(state.hosts)
        pending = [h for h in chosen if (among is None or h in among) and h not in held]
        if pending:
            runs.append(([name], run_limit(state, pending)))
    return runs


def _hosts_of(state: LayerState, inv: dict[str, Any], limit: str | None) -> list[str]:
    if limit is None:
        return list(state.hosts)
    chosen = resolve_pattern(limit, inv)
    return [h for h in state.hosts if chosen is None or h in chosen]


def _outcome(
    states: dict[str, LayerState], runs: list[Run], results: list[RunResult], check: bool
) -> tuple[dict[str, dict[str, str]], dict[str, list[str]]]:
    """What the runs applied (layer -> host -> state: every host a successful run reached) and, for a check, what
    it found drifted (layer -> hosts that would change, whose applied state is then forgotten so that the next
    --changed run converges them)."""
    applied: dict[str, dict[str, str]] = {}
    drifted: dict[str, list[str]] = {}
    for (names, _), r in zip(runs, results, strict=False):
        for name in names:
            if check:
                hosts = sorted({c.split(": ", 1)[0] for c in r.changes} & set(states[name].hosts))
                if hosts:
                    drifted[name] = hosts
            elif r.ok:
                applied[name] = {h: s for h, s in states[name].hosts.items() if h in r.recap}
    return applied, drifted


def _recap_table(result: RunResult) -> Table:
    table = Table(title="Recap")
    for col in ("host", "ok", "changed", "failed", "unreachable", "skipped"):
        table.add_column(col, justify="left" if col == "host" else "right")
    for host, r in result.recap.items():
        style = "red" if r.failed or r.unreachable else ("yellow" if r.changed else "green")
        table.add_row(host, str(r.ok), str(r.changed), str(r.failed), str(r.unreachable), str(r.skipped), style=style)
    return table


def deploy(  # noqa: PLR0917 (typer: one parameter per option)
    stack: StackArg,
    layer: Annotated[
        str | None,
        typer.Option(
            help=f"Run one layer only: {', '.join((*LAYERS, *OPTIONAL_LAYERS))}.", autocompletion=complete_layer
        ),
    ] = None,
    limit: Annotated[str | None, typer.Option(help="Ansible host pattern to limit the run to.")] = None,
    check: Annotated[bool, typer.Option("--check", help="Ansible check mode: report, change nothing.")] = False,
    one_time_boot: Annotated[
        str | None,
        typer.Option(
            "--one-time-boot",
            help="pxe or cd: the BMCs set this boot device for the next boot only and restart the node "
            "(provisioning; use --limit NODE-bmc to pick the nodes).",
        ),
    ] = None,
    boot_media: Annotated[
        str | None,
        typer.Option(
            "--boot-media",
            help="With --one-time-boot cd: an http(s) image URL that Redfish BMCs insert as virtual media first.",
        ),
    ] = None,
    changed: Annotated[
        bool,
        typer.Option(
            "--changed",
            help="Run each layer only on the hosts whose state (their variables with the layer's playbook, roles "
            "and rendered files) differs from what its last successful run applied from this machine; nothing "
            "when none does. With --limit: only among those hosts (names and groups).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run playbooks/site.yml (or one layer, or the layers that changed) against the site's inventory with
    ansible-runner."""
    if one_time_boot is not None and one_time_boot not in ("pxe", "cd"):
        print(f"--one-time-boot: {one_time_boot!r} is not pxe or cd", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    if boot_media is not None and (one_time_boot != "cd" or not boot_media.startswith(("http://", "https://"))):
        print(f"--boot-media: {boot_media!r} needs --one-time-boot cd and an http(s) URL", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    if layer is not None and layer not in (*LAYERS, *OPTIONAL_LAYERS):
        print(f"--layer: unknown layer {layer!r}; known: {', '.join((*LAYERS, *OPTIONAL_LAYERS))}", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    if changed and (layer or one_time_boot or check):
        print("--changed picks the layers itself: not with --layer, --one-time-boot or --check", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    p = load_plan(stack, as_json)
    secret_env, problems = resolve(p)
    if problems:
        raise invalid(SiteError(str(resolve_stack(stack)), problems), as_json)
    inv = inventory(p)
    text = inventory_text(inv)
    groups = group_sizes(inv)
    # The platform's charts and objects, rendered for the platform play (and part of its layer's state).
    platform = manifest_files(p)
    applies = layer_files(platform)
    # One definition of "changed" with reconcile, diff and the Pulumi layers: each host's state per layer.
    names = (*LAYERS, layer) if layer in OPTIONAL_LAYERS else LAYERS
    states = layer_states(names, inv, {name: contents_text(files) for name, files in applies.items()})
    pulled = p.pulled_layers
    # Disruptive changes are rolled, not applied at once: against the stack the last whole-site deploy applied,
    # the members a change needs out of service (and those of a rollout under way) are left out of these runs.
    applied_before = applied_hosts(p.site)
    hold, compared = HoldBack(), "--check, --one-time-boot and the controller's layers hold nothing back"
    if not check and not one_time_boot and (layer is None or layer in MEMBER_LAYERS):
        old, compared = applied_plan(p.site)
        current = load_rollout(maintenance_dir(p.site) / "rollout.json")
        # A member with nothing applied from here (new, reinstalled, a lab container made afresh) is not in
        # service: it takes the change at once.
        in_service = {h for name, hosts in applied_before.items() if name in MEMBER_LAYERS for h in hosts}
        out_ = store.site_held_out(p.site, but="maintenance")
        hold = hold_back(old, p, current, out_, in_service=in_service)
        if hold.rollout is not None and (layer or limit):
            # Rolling is the whole change's business: a run narrowed to a layer or some hosts leaves it waiting.
            hold.rollout = None
            hold.problems.append("a deploy narrowed by --layer or --limit does not roll: deploy the whole site")
    held = frozenset(hold.members)
    runs = _runs(states, inv, layer, limit, changed, check, applied_before, as_json, pulled, held)
    playbooks = [f"{names[0] if len(names) == 1 else 'site'}.yml" for names, _ in runs]
    started = time.time()
    results = []
    with tempfile.TemporaryDirectory(prefix="aisite-platform-") as platform_dir:
        write_bundle(platform, Path(platform_dir))
        extravars = {
            "platform_dir": platform_dir,
            "platform_files": json.dumps([name for name in applies["platform"] if not name.startswith("charts/")]),
            "workload_files": json.dumps(list(applies["workloads"])),
            # A candidate's objects once its canary ended: applying the files never deletes them.
            "workload_removals": json.dumps(retired_ids(p)),
        }
        if layer == "pull" and p.gitops and p.pulled_layers and not check:
            # The floor a node's first pass must descend from: the branch's tip as this controller fetched and
            # verified it now (a signed commit by an allowed signer), never one a node is served later.
            try:
                extravars["pull_floor"] = verified_tip(
                    p.gitops.pull_repository, p.gitops.branch, p.gitops.allowed_signers
                )
            except GitError as exc:
                print(
                    f"--layer pull: no trusted floor for the nodes' first pass: {exc}; nothing was run", file=sys.stderr
                )
                raise typer.Exit(EXIT_FAILED) from None
        if one_time_boot:
            extravars["bmc_one_time_boot"] = one_time_boot
        if boot_media:
            extravars["bmc_boot_media_url"] = boot_media
        for playbook, (_, run_limit) in zip(playbooks, runs, strict=True):
            results.append(
                progress_runner(
                    playbook,
                    text,
                    {k: str(v) for k, v in secret_env.items()},
                    limit=run_limit,
                    check=check,
                    groups=groups,
                    extravars=extravars,
                )
            )
            if not results[-1].ok:
                break
    result = merge(results)
    applied, drifted = _outcome(states, runs, results, check)
    record_applied(p.site, applied, drifted)
    # Then what it held back rolls, member by member; the stack is recorded once every member took it or is
    # owned by a rollout.
    rolled: Rolled | None = None
    if result.ok and hold.rollout is not None:
        rolled = _roll_held(p, hold, str(resolve_stack(stack)), as_json)
    if result.ok and hold.settled and layer is None and limit is None and not check and not one_time_boot:
        record_applied_stack(p.site, resolve_stack(stack).read_text())
    if one_time_boot and not check:
        # The nodes asked to boot from the network or a CD are being reinstalled: nothing stays applied to them.
        forget_applied(p.site, [h.removesuffix("-bmc") for h in result.recap if h.endswith("-bmc")])
    playbook = " ".join(playbooks)
    # What a host could not do and said so (a BMC without NTP, a node without a GPU): host -> role -> reasons.
    skipped = {
        str(h): {str(role): [str(x) for x in reasons] for role, reasons in dict(by_role).items()}
        for h, by_role in dict(result.stats.get("skipped") or {}).items()
    }
    doc = {
        "status": result.status,
        "rc": result.rc,
        "failures": result.failures,
        "skipped": skipped,
        "recap": {h: vars(r) for h, r in result.recap.items()},
        "layers": [n for names, _ in runs[: len(results)] for n in names],
        # Layers the nodes converge themselves (gitops.pull_layers), not run from here unless asked by --layer.
        "pulled_by_nodes": [n for n in pulled if n != layer],
        # Each layer run and the hosts it ran on (every host the layer targets, or those --changed/--limit chose).
        "runs": [
            {"layer": n, "hosts": _hosts_of(states[n], inv, run_limit)}
            for names, run_limit in runs[: len(results)]
            for n in names
        ],
        "changes": result.changes,
        # What this deploy left to a rollout (members, why, the waves; why a change cannot roll now).
        "held_back": hold.to_dict() | {"compared_with_applied": not compared, "why_not": compared},
        "rollout": rolled.doc() if rolled else None,
        # Where the time went: wall seconds per play, the slowest tasks summed over their hosts, and the tasks
        # a pass waited longest for.
        "plays": result.plays,
        "slowest_tasks": [{"task": t, "seconds": sec} for t, sec in result.slowest()],
        "longest_tasks": [{"task": t, "seconds": sec} for t, sec in result.slowest_walls()],
        # Each play's slowest hosts, their tasks' seconds summed: the host a play waited for.
        "slowest_hosts": {
            play: [{"host": h, "seconds": sec} for h, sec in top] for play, top in result.slowest_hosts().items()
        },
    }
    record_run(
        p.site,
        "changed" if changed else layer or "site",
        doc
        | {
            "playbook": playbook,
            "limit": limit,
            "check": check,
            "started": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
            "seconds": round(time.time() - started, 1),
        },
    )
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        out.print(_recap_table(result))
        for host, by_role in sorted(skipped.items()):
            for role, reasons in sorted(by_role.items()):
                for reason in reasons:
                    out.print(f"[yellow]skipped[/] {host} ({role}): {reason}")
        for f in result.failures:
            err.print(f"[red]failed[/]: {f}")
        if playbooks:
            out.print(f"{playbook}: [{'green' if result.ok else 'red'}]{result.status}[/]")
        else:
            out.print("[green]nothing to run[/]: every host's state in every layer is the one last applied from here")
        for member, why in hold.members.items():
            out.print(escape(f"held back for a rollout: {member}: {why}"), style="yellow", highlight=False)
        for problem in hold.problems:
            err.print(escape(f"not rolled now: {problem}"), style="red", highlight=False)
        if rolled:
            show_rollout(rolled.state, False, rolled)
    if not result.ok or hold.problems or (rolled and rolled.state.status != "done"):
        raise typer.Exit(EXIT_FAILED)


def _roll_held(p: Plan, hold: HoldBack, stack: str, as_json: bool) -> Rolled | None:
    """Roll the members deploy held back, in their waves, as `aisite maintenance start` would (resumable the same
    way); None, with why in the hold's problems, where it cannot start."""
    assert hold.rollout is not None
    with maintenance_lock(p.site):
        current = load_rollout(maintenance_dir(p.site) / "rollout.json")
        state, why = start(hold.rollout, p.site, f"deploy of {stack} (held back from it)", timestamp())
        if state is None:
            hold.problems += why
            return None
        begin(p.site, state, current)
        try:
            return roll(p, state)
        except SiteError as exc:
            raise invalid(exc, as_json) from None


def cabling(stack: StackArg, as_json: JsonOpt = False) -> None:
    """Compare every cabled port's LLDP neighbour with the plan (GPU node rails, Linux switches' fabric links)
    and list every miswire; changes nothing."""
    p = load_plan(stack, as_json)
    inv = inventory(p)
    groups = group_sizes(inv)
    # Reads LLDP on nodes and switches only: no BMC or switch credential is needed.
    result = progress_runner("cabling.yml", inventory_text(inv), {}, limit=None, check=False, groups=groups)
    miswires = [str(m) for m in result.stats.get("cabling_miswires", [])]
    checked = int(result.stats.get("cabling_checked", 0))
    # Failures other than the report's own assert (a host unreachable, lldpcli missing) are errors, not miswires.
    errors = [f for f in result.failures if "Cabling | Fail on any miswire" not in f]
    if as_json:
        print(json.dumps({"checked_hosts": checked, "miswires": miswires, "errors": errors}, indent=2))
    else:
        for m in miswires:
            out.print(f"[red]miswire[/]: {m}")
        for e in errors:
            err.print(f"[red]failed[/]: {e}")
        if not miswires and not errors:
            out.print(f"cabling: {checked} hosts, every cabled port sees its planned neighbour")
    if miswires or errors or not result.ok:
        raise typer.Exit(EXIT_FAILED)


def play() -> None:
    """Run one layer on the hosts it is pending on, from the document a Pulumi layer gives on standard input
    (aisite.layer_run: the inventory, the layer's states, the pending hosts), and record what it applied: how
    `pulumi up` shares the scope and the applied state of `aisite deploy --changed`."""
    try:
        run = LayerRun.model_validate_json(sys.stdin.read())
    except ValidationError as exc:
        for e in exc.errors():
            print(f"stdin.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID) from None
    secret_env = {k: v for k, v in os.environ.items() if k.startswith("AISITE_SECRET_")}
    result = run_layer(run, secret_env)
    if result is None:
        print(f"{run.layer}: nothing to run (every host's state is the one last applied)")
        return
    for host, r in result.recap.items():
        print(f"{host}: ok={r.ok} changed={r.changed} failed={r.failed} unreachable={r.unreachable}")
    for f in result.failures:
        print(f"failed: {f}", file=sys.stderr)
    if not result.ok:
        raise typer.Exit(EXIT_FAILED)
