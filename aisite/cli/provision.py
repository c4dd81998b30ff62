"""`aisite provision`: install the nodes from the plan over the network (BMC, boot server, installer, SSH)."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from aisite.cli.common import EXIT_FAILED, JsonOpt, StackArg, err, invalid, load_plan, out
from aisite.cli.progress import progress_runner
from aisite.deploy import write_json
from aisite.errors import Problem, SiteError
from aisite.loader import resolve_stack
from aisite.members import store
from aisite.members.budget import site_budget
from aisite.members.store import timestamp
from aisite.paths import IMAGES, lab_ssh_dir, members_file, provision_dir
from aisite.plan import Plan, ProvisionTarget
from aisite.plan.provisioning import missing_boot_macs
from aisite.provision import image as images
from aisite.provision.run import (
    Outcome,
    known_hosts_lines,
    load_records,
    member_installing,
    member_outcome,
    members_not_started,
    provision,
    record,
    would_provision,
)
from aisite.provision.world import CONTROLLER_TOKEN_ENV, ArmError, SiteWorld, controller_token
from aisite.render.inventory import inventory, inventory_text
from aisite.secrets import resolve


def _targets(p: Plan, limit: str | None, source: str, as_json: bool) -> list[ProvisionTarget]:
    assert p.provisioning is not None
    targets = list(p.provisioning.targets)
    if not limit:
        return targets
    names = [n.strip() for n in limit.split(",") if n.strip()]
    known = {t.node for t in targets} | {t.profile for t in targets}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise invalid(
            SiteError(
                source,
                [Problem("--limit", f"{', '.join(unknown)}: not a node to install or an install group of the site")],
            ),
            as_json,
        )
    return [t for t in targets if t.node in names or t.profile in names]


def _dry_run(
    p: Plan,
    targets: list[ProvisionTarget],
    secrets: dict[str, str],
    identity: Path | None,
    *,
    reinstall: bool,
    as_json: bool,
) -> None:
    assert p.provisioning is not None
    world = SiteWorld(p, inventory_text(inventory(p)), secrets, identity=identity)
    site = site_budget(p)
    intent = would_provision(
        world,
        p.provisioning,
        targets,
        load_records(provision_dir(p.site)),
        reinstall=reinstall,
        budget=lambda nodes: site.problem([*store.site_held_out(p.site), *nodes]),
    )
    if as_json:
        print(json.dumps({"site": p.site, "dry_run": True} | asdict(intent), indent=2))
        return
    out.print(f"unchanged (at the plan's version): {', '.join(intent.unchanged) or '-'}", highlight=False)
    for i, wave in enumerate(intent.waves, 1):
        out.print(f"wave {i}: would install {', '.join(wave)}", highlight=False)
    for node, why in intent.refused.items():
        out.print(escape(f"refused: {node}: {why}"), highlight=False)
    out.print("dry run: nothing booted, armed or recorded", highlight=False)


def provision_command(
    stack: StackArg,
    limit: Annotated[
        str | None, typer.Option(help="Only these nodes or install groups (comma-separated names).")
    ] = None,
    reinstall: Annotated[
        bool, typer.Option("--reinstall", help="Install again nodes already installed at the plan's version.")
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Say which nodes stand at the plan's version (asked over SSH) and the waves the rest would go in; "
            "boot, arm and record nothing.",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Install the site's nodes over the network: the boot server from the plan, then per node (in waves, with
    retries) a one-time network boot through its BMC, the install, and SSH with the host key it recorded. Nodes
    already at the plan's version are left alone. Records go to .aisite/<site>/provision/."""
    p = load_plan(stack, as_json)
    source = str(resolve_stack(stack))
    prov = p.provisioning
    if prov is None:
        raise invalid(SiteError(source, [Problem("site.provisioning", "not set: the site installs no node")]), as_json)
    targets = _targets(p, limit, source, as_json)
    no_mac = missing_boot_macs(p, {t.node for t in targets})
    if no_mac:
        raise invalid(SiteError(source, no_mac), as_json)
    values, problems = resolve(p)
    if problems:
        raise invalid(SiteError(source, problems), as_json)
    secrets = {k: str(v) for k, v in values.items()}
    lab = p.connection == "lab"
    identity = lab_ssh_dir(p.site) / "id_ed25519" if lab else None
    if identity and not identity.exists():
        print(f"{identity} is missing: bring the lab up first (aisite lab up {p.site})", file=sys.stderr)
        raise typer.Exit(EXIT_FAILED)
    if dry_run:
        _dry_run(p, targets, secrets, identity, reinstall=reinstall, as_json=as_json)
        return
    start = time.monotonic()

    def say_build(msg: str) -> None:
        err.print(msg, markup=False)

    try:
        built = images.ensure_site_images(prov, IMAGES, say_build)
    except images.ImageError as exc:
        print(f"error: the install image: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_FAILED) from None
    inv = inventory(p)
    text = inventory_text(inv)
    folder = provision_dir(p.site)
    token = controller_token(folder)
    secrets = dict(secrets) | {CONTROLLER_TOKEN_ENV: token}
    extra: dict[str, Any] = {
        "boot_server_images": [
            {"name": i.path.name, "os": i.os, "digest": i.digest, "src": str(i.path)} for i in built
        ],
        "boot_server_extra_deploy_keys": [identity.with_suffix(".pub").read_text().strip()] if identity else [],
    }
    result = progress_runner(
        "boot-server.yml", text, secrets, limit=None, check=False, groups={"boot_server": 1}, extravars=extra
    )
    if not result.ok:
        print(f"the boot server's playbook failed: {'; '.join(result.failures[-3:]) or result.status}", file=sys.stderr)
        raise typer.Exit(EXIT_FAILED)
    records = load_records(folder)
    members = members_file(p.site)
    world = SiteWorld(p, text, secrets, identity=identity, controller_token=token)
    site = site_budget(p)

    def budget(nodes: list[str]) -> str | None:
        # Asked before each wave, with what is out of service then (quarantined, in a rollout, failed installs).
        return site.problem([*store.site_held_out(p.site), *nodes])

    addresses = {t.node: t.address for t in prov.targets}

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err) as progress:
        bars = {t.node: progress.add_task(f"{t.node}: waiting for its wave", total=None) for t in targets}

        def say(node: str, what: str) -> None:
            if not err.is_terminal and progress.tasks[bars[node]].description != f"{node}: {what}":
                progress.console.print(f"{node}: {what}", markup=False)
            progress.update(bars[node], description=f"{node}: {what}")

        def begin(node: str) -> None:
            with store.editing(members) as held:
                member_installing(held, node, timestamp())

        def done(o: Outcome) -> None:
            say(
                o.node,
                {"failed": f"failed at {o.step}: {o.error}", "refused": f"refused: {o.error}"}.get(o.status, o.status),
            )
            at = timestamp()
            with store.editing(members) as held:
                member_outcome(held, o, at)
            records[o.node] = record(records.get(o.node), o, at)
            write_json(folder / f"{o.node}.json", records[o.node])
            known = folder / "known_hosts"
            tmp = known.with_suffix(".new")
            tmp.write_text("".join(f"{line}\n" for line in known_hosts_lines(addresses, records)))
            tmp.replace(known)

        try:
            outcomes = provision(
                world, prov, targets, records, reinstall=reinstall, say=say, done=done, begin=begin, budget=budget
            )
        except ArmError as exc:
            # No node of the wave can boot: what finished before is recorded; the rest is not started. The wave's
            # nodes, held as installing, are held as failed with why (never left installing).
            with store.editing(members) as held:
                members_not_started(held, str(exc), timestamp())
            print(f"error: {exc}", file=sys.stderr)
            raise typer.Exit(EXIT_FAILED) from None
    seconds = round(time.monotonic() - start, 1)
    doc = {
        "site": p.site,
        "seconds": seconds,
        "images": [{"os": i.os, "digest": i.digest} for i in built],
        "nodes": [o.to_dict() for o in outcomes],
        # What each node's firmware baseline asked of its BMC before its network boot.
        "firmware": world.firmware,
    }
    write_json(folder / "last.json", doc)
    failed = [o for o in outcomes if o.status in ("failed", "refused")]
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        table = Table(title=f"provision {p.site}: {len(outcomes)} node(s) in {seconds} s")
        for col in ("node", "result", "attempts", "seconds", "steps (s)", "error"):
            table.add_column(col)
        for o in outcomes:
            steps = ", ".join(f"{k} {v}" for k, v in o.steps.items()) or "-"
            style = {"installed": "green", "unchanged": "dim", "failed": "red", "refused": "yellow"}[o.status]
            result_text = f"failed at {o.step}" if o.status == "failed" else o.status
            table.add_row(o.node, result_text, str(o.attempts), str(o.seconds), steps, o.error or "-", style=style)
        out.print(table)
        for node, asked in sorted(world.firmware.items()):
            for what in asked:
                out.print(f"firmware {node}: {what}", markup=False, highlight=False)
    if failed:
        raise typer.Exit(EXIT_FAILED)
