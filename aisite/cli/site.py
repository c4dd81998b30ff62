"""Reading a site: `validate`, `plan`, `render`."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from aisite.cautions import site_warnings
from aisite.cli.common import EXIT_FAILED, EXIT_INVALID, JsonOpt, StackArg, err, load_plan, load_site_plan, out
from aisite.deploy import run_playbook
from aisite.loader import resolve_stack
from aisite.plan import FabricCapacity, Plan, PowerRack, RackPlan, fabric_capacity, fabric_layout
from aisite.plan.ceph import MAX_PG_PER_OSD
from aisite.plan.ceph_types import CephPlan
from aisite.platform.images import site_images
from aisite.render.bundle import OutputError, bundle, check_output, render_into
from aisite.render.inventory import inventory_yaml
from aisite.schema import schema


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
        "served_models": len(plan.serving),
        # What the reconciler promotes after a pass (`aisite promote STACK --automatic`).
        "automatic_promotions": [x.name for x in plan.serving if x.promotion and x.promotion.automatic],
    }


def _counts(c: dict[str, int]) -> str:
    return f"{sum(c.values())} (" + ", ".join(f"{v} {k}" for k, v in c.items()) + ")"


def validate(
    stack: StackArg,
    as_json: JsonOpt = False,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 when there are warnings.")] = False,
) -> None:
    """Check a stack file; report every problem with its key path, then what is valid but likely unintended."""
    site, plan = load_site_plan(stack, as_json)
    s = _summary(plan)
    warnings = site_warnings(site, plan)
    if as_json:
        doc = {
            "valid": True,
            "source": str(resolve_stack(stack)),
            "summary": s,
            "warnings": [{"path": w.path, "message": w.message} for w in warnings],
        }
        print(json.dumps(doc, indent=2))
    else:
        nodes = ", ".join(f"{v} {k}" for k, v in s["nodes"].items())
        out.print(
            f"[green]valid[/]: {resolve_stack(stack)}: site [bold]{plan.site}[/] ({nodes}; {s['gpus']} GPUs; "
            f"{sum(s['switches'].values())} switches; {sum(s['cables'].values())} cables)"
        )
        for w in warnings:
            out.print(f"[yellow]warning[/]: {escape(str(w))}")
    if strict and warnings:
        raise typer.Exit(EXIT_FAILED)


def schema_command() -> None:
    """Print the stack file's JSON Schema (draft 2020-12), generated from the model `validate` uses: for editors
    (the YAML language server) and other validators. What it refuses, validate refuses."""
    print(json.dumps(schema(), indent=2))


def plan(stack: StackArg, as_json: JsonOpt = False) -> None:
    """Expand a site into its plan: nodes, switches, addresses, cabling, BGP, RoCE QoS."""
    site, p = load_site_plan(stack, as_json)
    if as_json:
        print(p.to_json())
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
    _print_reserved(p)
    capacity = fabric_capacity(site, fabric_layout(site))
    if capacity:
        out.print(_fabric_line(capacity))
    if p.racks:
        _print_racks(p.racks)
    if p.power_racks:
        _print_power(p.power_racks)
    if p.ceph:
        _print_ceph(p.ceph)


def _print_reserved(p: Plan) -> None:
    """What each pooled network keeps back: a reviewer sees that the DNS server's address went to no node."""
    by_network: dict[str, list[str]] = {}
    for r in p.reserved:
        by_network.setdefault(r.network, []).append(f"{r.address} ({r.by})")
    for network, entries in by_network.items():
        net = getattr(p.networks, network)
        out.print(f"Reserved in {network} {net} (never handed out): " + escape(", ".join(entries)))


def _print_racks(racks: tuple[RackPlan, ...]) -> None:
    table = Table(title="Racks (one NVLink and IMEX domain each)")
    for col in ("rack", "group", "model", "trays", "GPUs", "NVLink switch trays", "IMEX peers"):
        table.add_column(col, no_wrap=col != "IMEX peers")
    for r in racks:
        trays = f"{r.trays[0]}..{r.trays[-1]} ({len(r.trays)}{'' if r.full else ', partial'})"
        peers = f"{r.imex_peers[0]}..{r.imex_peers[-1]}" if r.imex_peers else "-"
        table.add_row(r.name, r.group, r.model, trays, str(r.gpus), str(r.switch_trays), peers)
    out.print(table)


def _print_power(racks: tuple[PowerRack, ...]) -> None:
    """Each rack's GPU nodes and the most they draw, against the site's budget (site.facility)."""
    table = Table(title=f"Rack power (GPU nodes; budget {racks[0].budget_w / 1000:g} kW a rack)")
    for col in ("rack", "group", "model", "nodes", "kW max", "of budget", "cooling"):
        table.add_column(col, no_wrap=True)
    for r in racks:
        nodes = f"{r.nodes[0]}..{r.nodes[-1]} ({len(r.nodes)})" if r.nodes else "-"
        share = f"{100 * r.max_w / r.budget_w:.0f}%"
        table.add_row(r.name, r.group, r.model, nodes, f"{r.max_w / 1000:g}", share, r.cooling or "-")
    out.print(table)
    total = sum(r.max_w for r in racks)
    out.print(f"Rack power: {len(racks)} racks, {total / 1000:g} kW at most for the GPU nodes")


def _print_ceph(c: CephPlan) -> None:
    raw = ", ".join(f"{cls} {gb} GB" for cls, gb in sorted(c.raw_gb.items()))
    per_osd = ", ".join(f"{n} per {cls} OSD" for cls, n in sorted(c.pgs_per_osd.items()))
    out.print(
        f"Ceph {c.release}: monitors {', '.join(c.monitors)}; {len(c.osds)} OSDs ({raw} raw); placement groups "
        f"{per_osd} (Ceph refuses over {MAX_PG_PER_OSD})"
    )
    if c.serve_gbps:
        each = min(c.client_gbps, c.serve_gbps / c.clients) if c.clients else 0
        out.print(
            f"Ceph network: the storage nodes serve {c.serve_gbps} Gb/s through their storage ports; {c.clients} GPU "
            f"nodes at {c.client_gbps} Gb/s each read {each:.3g} Gb/s each when all read at once (storage ports on "
            f"{', '.join(c.storage_switches)}, the in-band management switches, storage VLAN)"
        )
    else:
        out.print("Ceph network: the storage ports are not cabled in the plan: no bandwidth to give")
    pools = Table(title="Ceph pools")
    for col in ("pool", "for", "layout", "on", "PGs", "min_size", "rides out", "usable GB"):
        pools.add_column(col, no_wrap=True)
    for pool in c.pools:
        layout = f"EC {pool.k}+{pool.m}" if pool.kind == "erasure" else f"{pool.width} copies"
        rides = f"{pool.margin} {pool.failure_domain}{'s' if pool.margin != 1 else ''}"
        usable = "-" if pool.system else str(pool.usable_gb)
        pools.add_row(
            pool.name, pool.application, layout, pool.device_class, str(pool.pg_num), str(pool.min_size), rides, usable
        )
    out.print(pools)
    for t in c.tenants:
        fs = f"{t.cephfs_dir} ({t.cephfs_gb} GB in {t.cephfs_pool}, as {t.client})" if t.cephfs_dir else "no CephFS"
        s3 = f"S3 user {t.s3_user} ({t.s3_gb} GB), bucket {t.s3_bucket}" if t.s3_user else "no S3"
        out.print(f"Ceph tenant {t.name}: {fs}; {s3}; keys as Secrets in {t.namespace}")
    if c.gpu_client:
        mounts = ", ".join(f"{d} at {m}" for d, m in c.gpu_client.mounts)
        out.print(f"Ceph data sets on every GPU node, read-only (ceph-fuse, {c.gpu_client.client}): {mounts}")
    if c.s3_lifecycle:
        rules = ", ".join(f"{p or '(all)'} -> {cls} after {d} days" for p, d, cls in c.s3_lifecycle)
        out.print(f"S3 lifecycle on each tenant's bucket: {rules}")


def _fabric_line(c: FabricCapacity) -> str:
    tiers = ", ".join(f"{t.name} {t.oversubscription:.3g}:1 ({t.down_gbps} Gbps down, {t.up_gbps} up)" for t in c.tiers)
    return (
        f"Fabric: {c.switch_tiers} tier{'s' if c.switch_tiers > 1 else ''}; bisection bandwidth "
        f"{c.bisection_gbps_per_gpu:.4g} Gbps per GPU (NIC {c.nic_gbps_per_gpu:.4g})"
        + (f"; oversubscription: {tiers}" if tiers else "")
    )


def images(stack: StackArg, as_json: JsonOpt = False) -> None:
    """Every container image the site pulls, pinned, with what pulls it: the list to fill an air-gapped mirror."""
    p = load_plan(stack, as_json)
    found = site_images(p)
    mirrored = {r.host for r in p.kubernetes.registries if r.mirrors}
    if as_json:
        doc = {
            "site": p.site,
            "images": [
                {"image": i, "sources": s, "platforms": list(found.platforms[i])} for i, s in found.images.items()
            ],
            "registries": {h: h in mirrored for h in found.registries()},
            "not_enumerated": found.not_enumerated,
        }
        print(json.dumps(doc, indent=2))
        return
    table = Table(title=f"Images of {p.site} ({len(found.images)})")
    table.add_column("image", no_wrap=True)
    table.add_column("pulled by")
    # Only a site of several architectures says which: a mirror must then hold each platform's image.
    several = len({p for ps in found.platforms.values() for p in ps}) > 1
    if several:
        table.add_column("platforms", no_wrap=True)
    for image, sources in found.images.items():
        table.add_row(image, ", ".join(sources), *([", ".join(found.platforms[image])] if several else []))
    out.print(table)
    for host in found.registries():
        out.print(f"registry {host}: " + ("through a mirror" if host in mirrored else "[yellow]pulled directly[/]"))
    for note in found.not_enumerated:
        out.print(f"[yellow]not listed[/]: {note}")


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
    """Write the Ansible inventory, the plan and the Kubernetes manifests of a site.

    The output directory is replaced whole, and only once everything rendered: on any failure it is left as it
    was. It must be new, empty, or one that render wrote before."""
    p = load_plan(stack)
    if any(c in str(out_dir) for c in "{}%"):
        # The path reaches the switch play as a variable: no template syntax in it.
        print(f"error: --out {out_dir}: a path with '{{', '}}' or '%' is refused", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    try:
        check_output(out_dir)
    except OutputError as exc:
        print(f"error: --out: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID) from None
    extra = (lambda stage: _render_switch_configs(p, stage / "switches")) if switch_configs else None
    try:
        written = render_into(out_dir, bundle(p), extra)
    except OutputError as exc:
        print(f"error: --out: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_FAILED) from None
    out.print(f"rendered site [bold]{p.site}[/]: {len(written)} files under {out_dir}")
    for path in written:
        out.print(f"  {path}")


def _render_switch_configs(p: Plan, dest: Path) -> None:
    """Run playbooks/switch-configs.yml against the plan's inventory (all local, no secrets needed)."""
    result = run_playbook("switch-configs.yml", inventory_yaml(p), extravars={"aisite_render_dir": str(dest.resolve())})
    if result.rc != 0:
        err.print(f"[red]error[/]: rendering switch configurations failed: {'; '.join(result.failures)}")
        raise typer.Exit(EXIT_FAILED)
