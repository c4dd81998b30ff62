"""The `aisite` command: validate, plan, render and deploy a site without the Pulumi engine.

Exit codes: 0 ok; 2 invalid input (every problem on stderr as `path: message`, nothing written); 1 any other
failure.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from aisite.deploy import RunResult, record_run, run_playbook
from aisite.errors import Problem, SiteError
from aisite.lab import images, lab
from aisite.lab.podman import LabError, ensure_tools
from aisite.lab.topology import LabTopology, lab_topology
from aisite.loader import ROOT, load_site, resolve_stack
from aisite.plan import Plan, build_plan
from aisite.render.bundle import bundle, write_bundle
from aisite.render.inventory import inventory, inventory_yaml, secret_env, to_yaml
from aisite.secrets import resolve

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
CACHE = ROOT / ".aisite" / "cache"
LAYERS = ("oob", "fabric", "hosts", "cluster", "workloads")

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="An on-prem AI cluster site, as code.",
)
# Piped output (logs, CI) is not cut to 80 columns.
out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

StackArg = Annotated[str, typer.Argument(help="A stack name under stacks/ (e.g. lab) or a path to a stack file.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for programs instead of tables.")]


def _invalid(exc: SiteError, as_json: bool = False) -> typer.Exit:
    if as_json:
        doc = {
            "valid": False,
            "source": exc.source,
            "errors": [{"path": p.path, "message": p.message} for p in exc.problems],
        }
        print(json.dumps(doc, indent=2))
    # One problem per line, plain text, so editors and scripts can parse them.
    print(f"error: {exc.source}: {len(exc.problems)} problem(s)", file=sys.stderr)
    for p in exc.problems:
        print(str(p), file=sys.stderr)
    return typer.Exit(EXIT_INVALID)


def _load(stack: str, as_json: bool = False) -> Plan:
    try:
        return build_plan(load_site(stack))
    except SiteError as exc:
        raise _invalid(exc, as_json) from None


def _summary(plan: Plan) -> dict[str, Any]:
    roles = Counter(n.role for n in plan.nodes)
    return {
        "site": plan.site,
        "nodes": dict(roles),
        "gpus": sum(n.gpu.count for n in plan.nodes if n.gpu),
        "switches": dict(Counter(s.role for s in plan.switches)),
        "cables": dict(Counter(c.kind for c in plan.cables)),
        "bmcs": dict(Counter(n.bmc.protocol for n in plan.nodes)),
        "tenants": len(plan.tenants),
        "workloads": len(plan.workloads),
    }


def _counts(c: dict[str, int]) -> str:
    return f"{sum(c.values())} (" + ", ".join(f"{v} {k}" for k, v in c.items()) + ")"


@app.command()
def validate(stack: StackArg, as_json: JsonOpt = False) -> None:
    """Check a stack file; report every problem with its key path."""
    plan = _load(stack, as_json)
    s = _summary(plan)
    if as_json:
        print(json.dumps({"valid": True, "source": str(resolve_stack(stack)), "summary": s}, indent=2))
        return
    nodes = ", ".join(f"{v} {k}" for k, v in s["nodes"].items())
    out.print(
        f"[green]valid[/]: {resolve_stack(stack)}: site [bold]{plan.site}[/] ({nodes}; {s['gpus']} GPUs; "
        f"{sum(s['switches'].values())} switches; {sum(s['cables'].values())} cables)"
    )


@app.command()
def plan(stack: StackArg, as_json: JsonOpt = False) -> None:
    """Expand a site into its plan: nodes, switches, addresses, cabling, BGP, RoCE QoS."""
    p = _load(stack, as_json)
    if as_json:
        print(json.dumps(p.to_dict(), indent=2))
        return
    s = _summary(p)
    out.print(
        f"[bold]site {p.site}[/] ({p.domain}): {_counts(s['nodes'])} nodes, {s['gpus']} GPUs, "
        f"{_counts(s['switches'])} switches, {_counts(s['cables'])} cables"
    )
    nodes = Table(title="Nodes")
    for col in ("name", "role", "GPUs", "BMC", "mgmt", "rails"):
        nodes.add_column(col, no_wrap=True)
    for n in p.nodes:
        gpus = f"{n.gpu.count}x{n.gpu.type} R{n.gpu.driver_branch}" if n.gpu else "-"
        leaves = sorted({r.leaf for r in n.rails})
        rails = f"{len(n.rails)} -> {','.join(leaves)}" if n.rails else "-"
        nodes.add_row(n.name, n.role, gpus, f"{n.bmc.protocol} {n.bmc.address}", n.management.address, rails)
    out.print(nodes)
    switches = Table(title="Switches")
    for col in ("name", "role", "os", "ASN", "loopback", "mgmt", "peers", "host subnets"):
        switches.add_column(col, no_wrap=col != "host subnets")
    for sw in p.switches:
        switches.add_row(
            sw.name,
            sw.role,
            sw.os,
            str(sw.asn or "-"),
            sw.loopback or "-",
            sw.management_address,
            str(len(sw.neighbors)),
            " ".join(h.subnet for h in sw.host_subnets) or "-",
        )
    out.print(switches)
    q = p.roce
    out.print(
        f"RoCE: PFC priority {q.pfc_priority} ({q.pfc_enable}), trust {q.trust}, DSCP {q.roce_dscp} -> TC "
        f"{q.roce_tc} (ToS {q.traffic_class}), CNP DSCP {q.cnp_dscp} -> priority {q.cnp_priority}, ECN "
        f"{q.ecn_min_bytes}-{q.ecn_max_bytes} B, ETS {q.ets_roce_percent}/{q.ets_default_percent}, MTU "
        f"{q.switch_mtu}/{q.host_mtu}"
    )


@app.command()
def render(
    stack: StackArg,
    out_dir: Annotated[Path, typer.Option("--out", help="Directory to write inventory.yml, plan.json, manifests/.")],
    switch_configs: Annotated[
        bool,
        typer.Option(
            "--switch-configs",
            help="Also render each leaf's and spine's configuration (frr.conf, NVUE, config_db, Onyx) into "
            "switches/, with the switch roles' own templates; connects to nothing.",
        ),
    ] = False,
) -> None:
    """Write the Ansible inventory, the plan and the Kubernetes manifests of a site."""
    p = _load(stack)
    files = bundle(p)
    written = write_bundle(files, out_dir)
    if switch_configs:
        written += _render_switch_configs(p, out_dir / "switches")
    out.print(f"rendered site [bold]{p.site}[/]: {len(written)} files under {out_dir}")
    for path in written:
        out.print(f"  {path}")


def _render_switch_configs(p: Plan, dest: Path) -> list[Path]:
    """Run playbooks/switch-configs.yml against the plan's inventory (all local, no secrets needed)."""
    dest = dest.resolve()
    result = run_playbook("playbooks/switch-configs.yml", inventory_yaml(p), extravars={"aisite_render_dir": str(dest)})
    if result.rc != 0:
        err.print(f"[red]error[/]: rendering switch configurations failed: {'; '.join(result.failures)}")
        raise typer.Exit(1)
    fabric = [s for s in p.switches if s.role in ("leaf", "spine")]
    return sorted(path for s in fabric for path in dest.glob(f"{s.name}.*"))


def _progress_runner(
    playbook: str,
    inventory: str,
    secret_env: dict[str, str],
    *,
    limit: str | None,
    check: bool,
    groups: dict[str, int],
    extravars: dict[str, str] | None = None,
) -> RunResult:
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as progress:
        bar = progress.add_task(f"{playbook}: starting", total=None)
        state: dict[str, Any] = {"done": 0, "task": "", "hosts": None}

        def on_event(event: dict[str, Any]) -> None:
            kind = event.get("event", "")
            data = event.get("event_data", {})
            if kind == "playbook_on_play_start":
                # Simple `a:b` patterns of inventory groups give the play's host count; others stay open-ended.
                parts = str(data.get("play_pattern", "")).split(":")
                state["hosts"] = sum(groups[g] for g in parts) if all(g in groups for g in parts) else None
            elif kind == "playbook_on_task_start":
                state["task"] = data.get("task", "")
                state["done"] = 0
                if not err.is_terminal:
                    # Logs and CI get one line per task instead of a redrawn bar.
                    progress.console.print(f"{data.get('play', '')} | {state['task']}", markup=False)
                total = 1 if data.get("run_once") else state["hosts"]
                progress.update(bar, description=f"{data.get('play', '')} | {state['task']}", completed=0, total=total)
            elif kind in ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable"):
                state["done"] += 1
                progress.update(bar, completed=state["done"])
                if kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
                    progress.console.print(f"[red]{kind.split('_')[-1]}[/]: {data.get('host')}: {state['task']}")

        result = run_playbook(
            playbook, inventory, secret_env, on_event=on_event, limit=limit, check=check, extravars=extravars
        )
        progress.update(bar, description=f"{playbook}: {result.status}")
    return result


def _recap_table(result: RunResult) -> Table:
    table = Table(title="Recap")
    for col in ("host", "ok", "changed", "failed", "unreachable", "skipped"):
        table.add_column(col, justify="left" if col == "host" else "right")
    for host, r in result.recap.items():
        style = "red" if r.failed or r.unreachable else ("yellow" if r.changed else "green")
        table.add_row(host, str(r.ok), str(r.changed), str(r.failed), str(r.unreachable), str(r.skipped), style=style)
    return table


@app.command()
def deploy(  # noqa: PLR0917 (typer: one parameter per option)
    stack: StackArg,
    layer: Annotated[str | None, typer.Option(help=f"Run one layer only: {', '.join(LAYERS)}.")] = None,
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
    as_json: JsonOpt = False,
) -> None:
    """Run playbooks/site.yml (or one layer) against the site's rendered inventory with ansible-runner."""
    if one_time_boot is not None and one_time_boot not in ("pxe", "cd"):
        print(f"--one-time-boot: {one_time_boot!r} is not pxe or cd", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    if boot_media is not None and (one_time_boot != "cd" or not boot_media.startswith(("http://", "https://"))):
        print(f"--boot-media: {boot_media!r} needs --one-time-boot cd and an http(s) URL", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    if layer is not None and layer not in LAYERS:
        print(f"--layer: unknown layer {layer!r}; known: {', '.join(LAYERS)}", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    p = _load(stack, as_json)
    secret_env, problems = resolve(p)
    if problems:
        raise _invalid(SiteError(str(resolve_stack(stack)), problems), as_json)
    playbook = f"playbooks/{layer or 'site'}.yml"
    inv = inventory(p)
    groups = {name: len(g["hosts"]) for name, g in inv["all"]["children"].items()}
    started = time.time()
    result = _progress_runner(
        playbook,
        to_yaml(inv),
        {k: str(v) for k, v in secret_env.items()},
        limit=limit,
        check=check,
        groups=groups,
        extravars=({"bmc_one_time_boot": one_time_boot} if one_time_boot else {})
        | ({"bmc_boot_media_url": boot_media} if boot_media else {}),
    )
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
        # Where the time went: wall seconds per play, and the slowest tasks summed over their hosts.
        "plays": result.plays,
        "slowest_tasks": [{"task": t, "seconds": sec} for t, sec in result.slowest()],
    }
    record_run(
        p.site,
        layer or "site",
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
        out.print(f"{playbook}: [{'green' if result.ok else 'red'}]{result.status}[/]")
    if not result.ok:
        raise typer.Exit(EXIT_FAILED)


@app.command()
def cabling(stack: StackArg, as_json: JsonOpt = False) -> None:
    """Compare every cabled port's LLDP neighbour with the plan (GPU node rails, Linux switches' fabric links)
    and list every miswire; changes nothing."""
    p = _load(stack, as_json)
    inv = inventory(p)
    groups = {name: len(g["hosts"]) for name, g in inv["all"]["children"].items()}
    # Reads LLDP on nodes and switches only: no BMC or switch credential is needed.
    result = _progress_runner("playbooks/cabling.yml", to_yaml(inv), {}, limit=None, check=False, groups=groups)
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


oob_app = typer.Typer(no_args_is_help=True, help="The out-of-band network: the site's BMCs.")
app.add_typer(oob_app, name="oob")


@oob_app.command("discover")
def oob_discover(
    stack: StackArg,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for each address to answer.")] = 1.0,
    via_gateway: Annotated[
        bool,
        typer.Option(
            "--via-gateway", help="Probe even though the range is reached through a gateway, not a local link."
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Probe the plan's out-of-band range: which declared BMCs answer (with serials and MACs), which are
    missing, and which BMCs answer at addresses the site does not declare (new hardware)."""
    from aisite import oob  # sushy and pyghmi load only for this command

    p = _load(stack, as_json)
    values, problems = resolve(p)
    if problems:
        raise _invalid(SiteError(str(resolve_stack(stack)), problems), as_json)
    route = oob.route_to(p.networks.oob)
    if not route or (route.get("gateway") and not via_gateway):
        # A range this machine does not sit on (a lab that is down, a site elsewhere) would be probed through the
        # default route: refuse unless asked.
        how = f"through gateway {route['gateway']} on {route.get('dev')}" if route else "not at all"
        print(
            f"site.networks.oob: {p.networks.oob} is reached {how}, not on a local link; bring the lab up, run "
            "from a machine on the out-of-band network, or pass --via-gateway",
            file=sys.stderr,
        )
        raise typer.Exit(EXIT_FAILED)
    declared = {n.bmc.address: (n.name, n.bmc.protocol, n.bmc.port) for n in p.nodes}
    creds = {n.bmc.address: n.bmc.credentials for n in p.nodes}
    default_creds = next(iter(creds.values()), "")
    tls = {n.bmc.address: n.bmc.tls_verify for n in p.nodes}
    default_tls = all(tls.values()) if tls else True

    def target_for(address: str, protocol: str) -> oob.Target:
        # An undeclared BMC is tried with the credentials of the site's BMCs (new hardware is usually set up alike).
        name = creds.get(address, default_creds)
        port = declared[address][2] if address in declared else (443 if protocol == "redfish" else 623)
        username = str(p.secrets.get(name, {}).get("username") or "")
        password = str(values.get(secret_env(name), ""))
        return oob.Target(protocol, address, port, username, password, tls.get(address, default_tls), timeout * 5)

    with err.status(f"probing {p.networks.oob} for BMCs"):
        found = oob.discover(p.networks.oob, declared, target_for, timeout=timeout)
    if as_json:
        print(json.dumps(found.to_dict(), indent=2))
        return
    table = Table(title=f"BMCs on {found.network}")
    for col in ("address", "node", "protocol", "state", "power", "serial", "MACs / error"):
        table.add_column(col)
    for what, rows, style in (
        ("declared", found.declared, "green"),
        ("missing", found.missing, "red"),
        ("undeclared", found.undeclared, "yellow"),
    ):
        for f in rows:
            facts = f.facts
            table.add_row(
                f.address,
                f.node or "-",
                f.protocol or "-",
                what,
                facts.power if facts else "-",
                (facts.serial or "-") if facts else "-",
                ", ".join(facts.macs) if facts and facts.macs else (f.error or "-"),
                style=style,
            )
    out.print(table)
    out.print(
        f"{len(found.declared)} declared BMC(s) answer, {len(found.missing)} missing, "
        f"{len(found.undeclared)} undeclared"
    )


lab_app = typer.Typer(no_args_is_help=True, help="The emulated lab: a site rehearsed on this machine with podman.")
app.add_typer(lab_app, name="lab")
LabStackArg = Annotated[str, typer.Argument(help="The stack to emulate (default: lab).")]


def _lab_topology(stack: str, as_json: bool = False) -> LabTopology:
    plan = _load(stack, as_json)
    if plan.connection != "podman":
        # A real site's ranges never go on this machine's bridges: the lab emulates only stacks made for it.
        print(
            f"site.ansible.connection: {plan.connection!r}: stack {plan.site} describes real hosts; the lab emulates "
            "only stacks with ansible.connection: podman and ranges of their own (like stacks/Pulumi.lab.yaml)",
            file=sys.stderr,
        )
        raise typer.Exit(EXIT_INVALID)
    return lab_topology(plan)


def _lab_credentials(stack: str, as_json: bool) -> dict[str, tuple[str, str]]:
    """(username, password) per secret the BMC emulators use: the lab's BMCs accept what the site declares."""
    p = _load(stack, as_json)
    values, problems = resolve(p)
    if problems:
        raise _invalid(SiteError(str(resolve_stack(stack)), problems), as_json)
    by_env = {secret_env(name): name for name in p.secrets}
    creds = {by_env[k]: (str(p.secrets[by_env[k]]["username"]), str(v)) for k, v in values.items()}
    # The emulators' own limit, on top of what real BMCs accept: ipmi_sim reads its users from a quoted file.
    problems = [
        Problem(f"site.secrets.{name}", f"the {what} contains '\"', which the lab's IPMI emulator cannot read")
        for name, (username, password) in creds.items()
        for what, value in (("user name", username), ("password", password))
        if '"' in value
    ]
    if problems:
        raise _invalid(SiteError(str(resolve_stack(stack)), problems), as_json)
    return creds


def _lab_failed(exc: LabError) -> typer.Exit:
    print(f"error: lab: {exc}", file=sys.stderr)
    return typer.Exit(EXIT_FAILED)


@lab_app.command("up")
def lab_up(stack: LabStackArg = "lab", as_json: JsonOpt = False) -> None:
    """Build the site's lab from its plan: images (cached), networks, node and switch containers, cabling."""
    topo = _lab_topology(stack, as_json)
    with err.status(f"lab {topo.site}: starting") as spinner:

        def say(msg: str) -> None:
            spinner.update(f"lab {topo.site}: {msg}")
            if not err.is_terminal:
                err.print(f"lab {topo.site}: {msg}", markup=False)

        try:
            report = lab.up(topo, CACHE, say, _lab_credentials(stack, as_json))
        except LabError as exc:
            raise _lab_failed(exc) from None
    if as_json:
        print(json.dumps(vars(report), indent=2))
        return
    changed = (
        len(report.networks_created) + len(report.containers_started) + report.links_created + len(report.bmcs_started)
    )
    out.print(
        f"lab {topo.site} is up in {report.seconds} s: {len(report.networks_created)} networks, "
        f"{len(report.containers_started)} containers, {report.links_created} cables and "
        f"{len(report.bmcs_started)} BMC emulators created" + ("" if changed else " (nothing to change)")
    )
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
    topo = _lab_topology(stack, as_json)
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
    topo = _lab_topology(stack, as_json)
    try:
        removed = lab.down(topo.site, lambda msg: err.print(f"lab {topo.site}: {msg}", markup=False))
    except LabError as exc:
        raise _lab_failed(exc) from None
    if as_json:
        print(json.dumps(removed, indent=2))
    else:
        out.print(
            f"lab {topo.site} is down: removed {len(removed['containers'])} containers and "
            f"{len(removed['networks'])} networks"
        )


@app.command(hidden=True)
def play(
    playbook: Annotated[str, typer.Option(help="Playbook path relative to the project.")],
    inventory: Annotated[str, typer.Option(help="Inventory file, or - for standard input.")] = "-",
) -> None:
    """Run one playbook against an inventory read from stdin (how the Pulumi layers call Ansible)."""
    text = sys.stdin.read() if inventory == "-" else Path(inventory).read_text()
    secret_env = {k: v for k, v in os.environ.items() if k.startswith("AISITE_SECRET_")}
    result = run_playbook(playbook, text, secret_env)
    for host, r in result.recap.items():
        print(f"{host}: ok={r.ok} changed={r.changed} failed={r.failed} unreachable={r.unreachable}")
    for f in result.failures:
        print(f"failed: {f}", file=sys.stderr)
    if not result.ok:
        raise typer.Exit(EXIT_FAILED)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(EXIT_FAILED)
    except OSError as exc:
        # A file that cannot be read or written is a failure of the run, not of the site: exit 1, no traceback.
        print(f"error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        sys.exit(EXIT_FAILED)
