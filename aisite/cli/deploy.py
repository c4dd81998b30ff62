"""Running the site's playbooks: `deploy`, `cabling`, and `play` (how the Pulumi layers call Ansible)."""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from aisite.apply import Applied, ApplyFailedError, ApplyInputError, Request, apply
from aisite.cli.common import (
    EXIT_FAILED,
    EXIT_INVALID,
    JsonOpt,
    StackArg,
    complete_layer,
    err,
    invalid,
    load_plan,
    out,
)
from aisite.cli.maintenance import EXIT_BUSY, show_rollout
from aisite.cli.progress import progress_runner
from aisite.deploy import RunResult
from aisite.errors import SiteError
from aisite.layer_run import LayerRun, run_layer
from aisite.loader import resolve_stack
from aisite.maintenance.roll import MaintenanceBusyError
from aisite.playbooks import LAYERS, OPTIONAL_LAYERS
from aisite.render.inventory import group_sizes, inventory, inventory_text
from aisite.secrets import resolve


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
    req = Request(layer, limit, check, one_time_boot, boot_media, changed)
    for path, message in req.problems():
        print(f"{path}: {message}", file=sys.stderr)
    if req.problems():
        raise typer.Exit(EXIT_INVALID)
    p = load_plan(stack, as_json)
    secret_env, problems = resolve(p)
    if problems:
        raise invalid(SiteError(str(resolve_stack(stack)), problems), as_json)
    try:
        done = apply(p, req, resolve_stack(stack), secret_env, progress_runner, note)
    except ApplyInputError as exc:
        if as_json:
            print(json.dumps({"valid": False, "errors": [{"path": exc.path, "message": exc.message}]}))
        print(exc, file=sys.stderr)
        raise typer.Exit(EXIT_INVALID) from None
    except ApplyFailedError as exc:
        print(f"{exc}; nothing was run", file=sys.stderr)
        raise typer.Exit(EXIT_FAILED) from None
    except MaintenanceBusyError as exc:
        print(exc, file=sys.stderr)
        raise typer.Exit(EXIT_BUSY) from None
    except SiteError as exc:
        raise invalid(exc, as_json) from None
    _show(done, as_json)
    if not done.ok:
        raise typer.Exit(EXIT_FAILED)


def note(message: str) -> None:
    err.print(message, markup=False, highlight=False)


def _show(done: Applied, as_json: bool) -> None:
    if as_json:
        print(json.dumps(done.doc, indent=2))
        return
    result, hold, rolled = done.result, done.scope.hold, done.rolled
    out.print(_recap_table(result))
    for host, by_role in sorted(done.doc["skipped"].items()):
        for role, reasons in sorted(by_role.items()):
            for reason in reasons:
                out.print(f"[yellow]skipped[/] {host} ({role}): {reason}")
    for f in result.failures:
        err.print(f"[red]failed[/]: {f}")
    if done.scope.playbooks:
        out.print(f"{' '.join(done.scope.playbooks)}: [{'green' if result.ok else 'red'}]{result.status}[/]")
    else:
        out.print("[green]nothing to run[/]: every host's state in every layer is the one last applied from here")
    for member, why in hold.members.items():
        out.print(escape(f"held back for a rollout: {member}: {why}"), style="yellow", highlight=False)
    for problem in hold.problems:
        err.print(escape(f"not rolled now: {problem}"), style="red", highlight=False)
    if rolled:
        show_rollout(rolled.state, False, rolled)


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
