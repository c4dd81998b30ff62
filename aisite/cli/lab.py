"""The emulated lab: `lab up`, `lab status`, `lab down`, `lab image`."""

from __future__ import annotations

import json
import sys
from functools import partial
from typing import Annotated, Any

import typer
from rich.table import Table

from aisite.cli.common import EXIT_FAILED, EXIT_INVALID, JsonOpt, err, invalid, load_plan, out
from aisite.deploy import forget_applied
from aisite.errors import SiteError
from aisite.fields import secret_env
from aisite.lab import images, lab
from aisite.lab.bmc import emulator_problems
from aisite.lab.podman import LabError, ensure_tools
from aisite.lab.topology import LabPlanError, LabTopology, lab_topology
from aisite.loader import resolve_stack
from aisite.paths import CACHE, IMAGES
from aisite.plan import Plan
from aisite.provision.image import prepare_site_images
from aisite.secrets import resolve, username_of, uses

lab_app = typer.Typer(no_args_is_help=True, help="The emulated lab: a site rehearsed on this machine with podman.")
LabStackArg = Annotated[str, typer.Argument(help="The stack to emulate (default: lab).")]


def lab_plan(stack: str, as_json: bool = False) -> Plan:
    """The stack's plan, refused unless it is made for the lab."""
    return lab_only(load_plan(stack, as_json))


def lab_only(plan: Plan) -> Plan:
    """The plan, refused (exit 2) unless it is made for the lab."""
    if plan.connection != "lab":
        # A real site's ranges never go on this machine's bridges: the lab emulates only stacks made for it.
        print(
            f"site.ansible.connection: {plan.connection!r}: stack {plan.site} describes real hosts; the lab emulates "
            "only stacks with ansible.connection: lab and ranges of their own (like stacks/Pulumi.lab.yaml)",
            file=sys.stderr,
        )
        raise typer.Exit(EXIT_INVALID)
    return plan


def _lab_topology(plan: Plan) -> LabTopology:
    try:
        return lab_topology(plan)
    except LabPlanError as exc:
        print(f"error: lab: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID) from None


def _lab_credentials(p: Plan, stack: str, as_json: bool) -> dict[str, tuple[str, str]]:
    """(username, password) per secret the BMC emulators use: the lab's BMCs accept what the site declares."""
    values, problems = resolve(p)
    if problems:
        raise invalid(SiteError(str(resolve_stack(stack)), problems), as_json)
    creds = {name: (username_of(p, name), str(values[secret_env(name)])) for name in uses(p)}
    problems = [q for name, (username, password) in creds.items() for q in emulator_problems(name, username, password)]
    if problems:
        raise invalid(SiteError(str(resolve_stack(stack)), problems), as_json)
    return creds


def _lab_failed(exc: LabError) -> typer.Exit:
    print(f"error: lab: {exc}", file=sys.stderr)
    return typer.Exit(EXIT_FAILED)


@lab_app.command("up")
def lab_up(stack: LabStackArg = "lab", as_json: JsonOpt = False) -> None:
    """Build the site's lab from its plan: images (cached), networks, node and switch containers, cabling."""
    plan = lab_plan(stack, as_json)
    topo = _lab_topology(plan)
    with err.status(f"lab {topo.site}: starting") as spinner:

        def say(msg: str) -> None:
            spinner.update(f"lab {topo.site}: {msg}")
            if not err.is_terminal:
                err.print(f"lab {topo.site}: {msg}", markup=False)

        prov = plan.provisioning
        # The install image `aisite provision` serves the lab's VMs is built while the lab comes up.
        beside = partial(prepare_site_images, prov, IMAGES, say) if prov is not None and topo.vms else None
        try:
            report = lab.up(topo, CACHE, say, _lab_credentials(plan, stack, as_json), beside)
        except LabError as exc:
            raise _lab_failed(exc) from None
    # A container made afresh has nothing applied: `deploy --changed` and `reconcile` must run it again.
    fresh = [c.host for c in topo.containers if c.name in report.containers_started]
    fresh += [f"{b.node}-bmc" for b in topo.bmcs if b.name in report.bmcs_started]
    # A VM made afresh has an empty disk: its node and BMC start over.
    fresh += [name for v in topo.vms if v.name in report.vms_started for name in (v.node, f"{v.node}-bmc")]
    forget_applied(topo.site, fresh)
    if as_json:
        print(json.dumps(vars(report), indent=2))
        return
    changed = (
        len(report.networks_created)
        + len(report.containers_started)
        + report.links_created
        + len(report.bmcs_started)
        + len(report.vms_started)
    )
    out.print(
        f"lab {topo.site} is up in {report.seconds} s: {len(report.networks_created)} networks, "
        f"{len(report.containers_started)} containers, {report.links_created} cables and "
        f"{len(report.bmcs_started)} BMC emulators and {len(report.vms_started)} VMs created"
        + ("" if changed else " (nothing to change)")
    )
    if report.beside:
        out.print(f"lab {topo.site}: {report.beside}", markup=False)
    _print_status(topo)


def _print_status(topo: LabTopology) -> list[dict[str, Any]]:
    rows = lab.status(topo)
    table = Table(title=f"lab {topo.site}")
    for col in ("name", "kind", "role", "container", "state", "addresses", "cabled ports"):
        table.add_column(col, no_wrap=True)
    for r in rows:
        addrs = " ".join(f"{k}={v}" for k, v in r["addresses"].items())
        table.add_row(
            r["name"],
            r["kind"],
            r["role"],
            r["container"],
            r["state"],
            addrs,
            f"{r['ports_present']}/{r['ports_planned']}",
            style=None if r["state"] == "running" and r["addresses_match"] else "red",
        )
    out.print(table)
    return rows


@lab_app.command("image")
def lab_image(kind: Annotated[str, typer.Argument(help="base, node, frr or bmc.")] = "node") -> None:
    """Print the tag of a lab image, building it (and the base) first when it is not cached (molecule uses this)."""
    known = ("base", *images.LAYERS)
    if kind not in known:
        print(f"unknown image {kind!r}; known: {', '.join(known)}", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    try:
        ensure_tools()
        tags = images.ensure_images(CACHE, lambda msg: err.print(msg, markup=False))
    except LabError as exc:
        raise _lab_failed(exc) from None
    print(tags[kind])


@lab_app.command("status")
def lab_status(stack: LabStackArg = "lab", as_json: JsonOpt = False) -> None:
    """Every node and switch of the lab with its container, addresses, state and cabling."""
    topo = _lab_topology(lab_plan(stack, as_json))
    try:
        if as_json:
            print(json.dumps({"site": topo.site, "members": lab.status(topo)}, indent=2))
            return
        _print_status(topo)
    except LabError as exc:
        raise _lab_failed(exc) from None


@lab_app.command("down")
def lab_down(stack: LabStackArg = "lab", as_json: JsonOpt = False) -> None:
    """Remove exactly what `lab up` created for the site (labelled containers and networks); images stay cached."""
    topo = _lab_topology(lab_plan(stack, as_json))
    try:
        removed = lab.down(topo.site, lambda msg: err.print(f"lab {topo.site}: {msg}", markup=False))
    except LabError as exc:
        raise _lab_failed(exc) from None
    forget_applied(topo.site)
    if as_json:
        print(json.dumps(removed, indent=2))
    else:
        out.print(
            f"lab {topo.site} is down: removed {len(removed['containers'])} containers and "
            f"{len(removed['networks'])} networks"
        )
