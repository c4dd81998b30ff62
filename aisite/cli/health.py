"""`aisite health`: read every node's last health check and keep failing nodes out of jobs (quarantine)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from aisite.cli.common import EXIT_FAILED, JsonOpt, StackArg, load_plan, out
from aisite.cli.progress import progress_runner
from aisite.health.ceph import read_status, summary
from aisite.health.judge import NodeHealth
from aisite.health.quarantine import Action, NodeRecord
from aisite.health.site import apply_vars, confirm_applied, load_checks, load_state, run_pass, verdicts
from aisite.members.store import timestamp
from aisite.paths import health_dir, members_file
from aisite.plan import Plan
from aisite.render.inventory import group_sizes, inventory, inventory_text


def health_command(
    stack: StackArg,
    now: Annotated[bool, typer.Option("--now", help="Run every node's check now, then read it.")] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Read the checks and say what the quarantine would do; record and apply nothing."
        ),
    ] = False,
    as_json_: JsonOpt = False,
) -> None:
    """Each node's last check (role node_health), then the quarantine: a failing node tainted, cordoned and
    drained, a node clean for site.health.recover_after checks released, never more at once than the site's cap.
    Actions go to .aisite/SITE/health/ (checks, state, actions.jsonl, metrics,
    the Node objects). With Ceph, its own status (read on its first monitor) is shown too. Exit 1 when any node
    is unhealthy or could not be read, or Ceph is not HEALTH_OK."""
    plan = load_plan(stack, as_json_)
    inv = inventory(plan)
    groups = group_sizes(inv)
    read = progress_runner(
        "health-status.yml",
        inventory_text(inv),
        {},
        limit=None,
        check=False,
        groups=groups,
        extravars={"health_now": now},
    )
    records = dict(read.stats.get("health_states") or {})
    # The Ceph cluster's own verdict, site-wide: shown and counted, never a node's quarantine.
    ceph = read_status(read.stats.get("ceph_status"), plan.ceph.fsid) if plan.ceph else None
    folder = health_dir(plan.site)
    # Members a rollout or provisioning holds out of service take their place in the same budget.
    members = members_file(plan.site)
    hp = run_pass(plan, records, folder, members, dry_run=dry_run)
    applied = None
    if hp.to_apply and not dry_run:
        applied = progress_runner(
            "health-apply.yml",
            inventory_text(inv),
            {},
            limit=None,
            check=False,
            groups=groups,
            extravars=apply_vars(hp),
        )
    skipped = [
        s for v in ((applied.stats.get("skipped") or {}) if applied else {}).values() for s in v.get("health", [])
    ]
    # Only a decision the cluster took stops being pending: skipped (no API server) or failed, it is applied
    # again on the next pass.
    pending = [i["node"] for i in hp.to_apply]
    if applied and applied.ok and not skipped:
        confirm_applied(folder, pending, members, timestamp())
        pending = []
    bad = (
        [n for n, h in hp.results.items() if not h.healthy]
        + hp.missing
        + (["ceph"] if ceph and not ceph.healthy else [])
    )
    if as_json_:
        doc = {
            "site": plan.site,
            "cap": hp.limit,
            "nodes": verdicts(hp.results),
            "missing": hp.missing,
            "quarantined": sorted(n for n, r in hp.state.items() if r.quarantined),
            "actions": [asdict(a) for a in hp.actions],
            "not_applied": skipped,
            "pending": pending,
            "files": hp.files,
            "dry_run": dry_run,
            "ceph": asdict(ceph) | {"healthy": ceph.healthy} if ceph else None,
        }
        print(json.dumps(doc, indent=2))
        raise typer.Exit(EXIT_FAILED if bad else 0)
    title = f"{plan.site}: node health (cap {hp.limit} quarantined at once)"
    out.print(
        _table(title, plan, results=hp.results, state=hp.state, actions=hp.actions, mood="would " if dry_run else "")
    )
    for s in skipped:
        out.print(escape(f"not applied: {s}"), highlight=False)
    if pending:
        out.print(f"pending on the cluster (applied again next pass): {', '.join(pending)}", highlight=False)
    if ceph:
        out.print(escape(summary(ceph)), style=None if ceph.healthy else "red", highlight=False)
    if dry_run:
        out.print("dry run: nothing recorded, nothing applied", highlight=False)
    else:
        out.print(f"records: {folder}")
    if hp.missing:
        print(f"warning: no check read from {', '.join(hp.missing)}", file=sys.stderr)
    raise typer.Exit(EXIT_FAILED if bad else 0)


def _table(
    title: str,
    plan: Plan,
    *,
    results: dict[str, NodeHealth],
    state: dict[str, NodeRecord],
    actions: list[Action],
    mood: str = "",
) -> Table:
    t = Table(title=title)
    for col in ("node", "verdict", "problems", "quarantine", "action"):
        t.add_column(col)
    acted = {a.node: a for a in actions}
    for node in [n.name for n in plan.nodes]:
        h = results.get(node)
        rec = state.get(node)
        a = acted.get(node)
        verdict = "[red]no check[/]" if h is None else ("[green]healthy[/]" if h.healthy else "[red]unhealthy[/]")
        problems = "; ".join(f"{p.check} {p.subject}: {p.message}" for p in h.problems) if h else ""
        quarantine = f"since {rec.since} ({rec.reason})" if rec and rec.quarantined else "-"
        action = escape(f"{mood}{a.kind}: {a.reason}") if a else "-"
        t.add_row(node, verdict, escape(problems), escape(quarantine), action)
    return t


def show_recorded(plan: Plan, as_json: bool) -> None:
    """What the last `aisite health` pass on this machine recorded: each node's verdict and quarantine, read
    from .aisite/SITE/health/ alone (no node reached, nothing decided). Exit 1 when a node was unhealthy or
    unread then, as health itself would."""
    folder = health_dir(plan.site)
    last = load_checks(folder)
    state = load_state(folder / "state.json")
    names = [n.name for n in plan.nodes]
    bad = [n for n, h in last.results.items() if not h.healthy and n in names] + last.missing
    if as_json:
        doc = {
            "site": plan.site,
            "checked_at": last.at or None,
            "nodes": verdicts(last.results),
            "missing": last.missing,
            "quarantined": sorted(n for n, r in state.items() if r.quarantined),
            "records": str(folder),
        }
        print(json.dumps(doc, indent=2))
    elif not last.at:
        out.print(f"no health pass recorded for {plan.site} on this machine ({folder}): `aisite health` makes one")
        return
    else:
        out.print(
            _table(
                f"{plan.site}: node health as last recorded ({last.at})",
                plan,
                results=last.results,
                state=state,
                actions=[],
            )
        )
    if bad:
        raise typer.Exit(EXIT_FAILED)
