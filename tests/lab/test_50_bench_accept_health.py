"""The site's own tools on the deployed lab: `bench` (DDP and iperf3 over the rails, the data set from CephFS),
`accept` naming the injected faults and nothing else, and `health` quarantining within its cap."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import yaml

from aisite.lab import faults
from aisite.lab.ceph import with_admin_mount
from aisite.paths import members_file
from aisite.payloads.resnet import SAMPLE_SUFFIX, sample_bytes
from aisite.plan import Plan
from tests.conftest import ROOT, run_cli
from tests.lab.common import (
    BMC_ENV,
    CEPH_ADMIN_MOUNT,
    SITE,
    addresses,
    ceph_plan,
    node_sh,
    podman,
    rotating,
    wait_visible,
)


def write_samples_to_ceph(plan: Plan, name: str, count: int, image_size: int) -> tuple[str, int, int]:
    """A data set of `count` random samples of the ResNet payload's format (a label byte, then the image's bytes)
    in the first data-set directory, written through an admin ceph-fuse mount on the first monitor; where the GPU
    nodes mount it, the count and each sample's bytes."""
    c = ceph_plan(plan)
    assert c.gpu_client is not None
    (directory, _), *_ = c.fs_layouts
    mounted = dict(c.gpu_client.mounts)[directory]
    size = sample_bytes(image_size)
    target = f"{CEPH_ADMIN_MOUNT}{directory}/{name}"
    node_sh(
        plan,
        c.monitors[0],
        with_admin_mount(
            c.filesystem,
            CEPH_ADMIN_MOUNT,
            f"mkdir -p {target}; for i in $(seq 0 {count - 1});"
            f" do head -c {size} /dev/urandom > {target}/$(printf %06d $i){SAMPLE_SUFFIX}; done",
        ),
    )
    return f"{mounted}/{name}", count, size


@rotating("three-tier")
def test_bench_runs_ddp_and_iperf3_over_the_rails_and_reports_them(
    up: subprocess.CompletedProcess[str], stack_file: Path, plan: Plan
) -> None:
    """The ResNet payload as DDP across both GPU nodes (gloo on their rails), reading its data set from CephFS
    through each node's ceph-fuse mount, and iperf3 across rails, for real; the switches' counters show where the
    traffic went; the report judges what the site asks and plots the series."""
    results = ROOT / ".aisite" / SITE / "results"
    shutil.rmtree(results, ignore_errors=True)
    data, count, size = write_samples_to_ceph(plan, "resnet-samples", 24, image_size=64)
    gpus = plan.by_role("gpu")
    for gpu in gpus:
        wait_visible(plan, gpu.name, f"{data}/{count - 1:06d}.sample")
    r = run_cli(
        "bench", "run", str(stack_file), "resnet50-train", "--steps", "2", "--data", data, "--json", env=BMC_ENV
    )
    assert r.returncode == 0, r.stdout + r.stderr
    runs = {d["world_size"]: d for d in json.loads(r.stdout)}
    assert sorted(runs) == [1, 2, 2 * len(gpus[0].rails)]
    w = next(w for w in plan.workloads if w.name == "resnet50-train")
    for n, d in runs.items():
        assert d["value"] > 0 and len(d["per_process"]) == n and d["params"]["lab"] is True
        assert d["backend"] == ("gloo" if n > 1 else None) and d["device"]["type"] == "cpu"
        # Every process read a batch of the data set's files at each step (1 warm-up, 2 timed), from the mount.
        read = d["params"]["data"]
        assert (read["dir"], read["files"]) == (data, count), read
        assert read["bytes_read"] == [(1 + 2) * (w.batch_size or 0) * size] * n, read
    print("data set read per step from CephFS:", {n: d["params"]["data"]["read_seconds"] for n, d in runs.items()})
    # One process per node, each on rail 0: the gradients crossed rail 0's leaf, and the spines stayed quiet
    # (rail-aligned traffic within a scalable unit never leaves its leaf).
    two = runs[2]
    assert two["params"]["placement"] == [f"{n.name}:{n.rails[0].interface}:{n.rails[0].address}" for n in gpus[:2]]
    moved = two["params"]["fabric_tx_bytes"]
    leaf0 = gpus[0].rails[0].leaf
    assert moved[leaf0] > 25_557_032 * 4, moved  # at least one fp32 gradient's worth through rail 0's leaf
    assert all(moved[s.name] < moved[leaf0] / 100 for s in plan.switches_by_role("spine")), moved
    r = run_cli("bench", "run", str(stack_file), "iperf3", "--seconds", "2", "--json", env=BMC_ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    (iperf,) = json.loads(r.stdout)
    spines = sum(iperf["params"]["fabric_tx_bytes"][s.name] for s in plan.switches_by_role("spine"))
    assert iperf["unit"] == "Gb/s" and iperf["value"] > 0 and spines > iperf["value"] * 1e9 / 8, iperf
    report = run_cli("bench", "report", str(stack_file), "--json", env=BMC_ENV)
    doc = json.loads(report.stdout)
    rows = {(row["workload"], row["processes"]): row for row in doc["rows"]}
    assert set(rows) == {("resnet50-train", n) for n in runs} | {("iperf3", 1)}
    assert all(row["reference"] is None for key, row in rows.items() if key[0] == "resnet50-train")
    assert rows[("iperf3", 1)]["verdict"] == ("pass" if iperf["value"] >= 0.5 else "fail")
    assert report.returncode == (0 if iperf["value"] >= 0.5 else 1)
    assert Path(doc["plot"]).read_bytes()[:4] == b"\x89PNG"


@rotating("three-tier")
def test_accept_names_the_slowed_rail_and_the_wrong_mtu_and_nothing_else(
    up: subprocess.CompletedProcess[str], stack_file: Path, plan: Plan
) -> None:
    """Two faults injected into the deployed lab: one node's rail slowed on its side of the veth (netem where the
    kernel has it, else tbf), another node's rail MTU set to 1500. `aisite accept` runs every stage for real and
    names exactly those two (node and rail), with the evidence that shows them, and draws the heat map."""
    gpus = [n for n in plan.by_role("gpu") if n.rails]
    slow, mtu = (gpus[1], gpus[1].rails[-1]), (gpus[0], gpus[0].rails[0])
    try:
        qdisc = faults.slow_rail(plan, slow[0].name, slow[1].interface, rate_mbit=500)
        faults.set_mtu(plan, mtu[0].name, mtu[1].interface, 1500)
        r = run_cli("accept", str(stack_file), "--json", env=BMC_ENV)
    finally:
        for node, rail in (slow, mtu):
            faults.clear(plan, node.name, rail.interface)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.startswith("{"), r.stderr[-4000:]
    doc = json.loads(r.stdout)
    named = {(f["node"], f["interface"], f["peer"]) for f in doc["findings"]}
    assert named == {(slow[0].name, slow[1].interface, None), (mtu[0].name, mtu[1].interface, None)}, (
        qdisc,
        doc["findings"],
    )
    by_node = {f["node"]: f for f in doc["findings"]}
    assert by_node[mtu[0].name]["what"].startswith("mtu: 1500")
    # The slowed rail shows on its link, on the pair it sends on, and in its unit's all_reduce (bisected to it).
    evidence = by_node[slow[0].name]["evidence"]
    assert any(">" in e and e.startswith(f"{slow[0].name}:{slow[1].interface}") for e in evidence), evidence
    assert any(e.startswith(f"unit{slow[0].scalable_unit}/rail{slow[1].index}") for e in evidence), evidence
    checks = doc["checks"]
    stages = {c["stage"] for c in checks if c["verdict"] != "skipped"}
    assert {"node", "link", "pair", "group"} <= stages
    passing = [c for c in checks if c["stage"] in ("link", "pair") and c["verdict"] == "pass"]
    assert passing and all(c["value"] > 0.5 for c in passing)
    assert all(c["verdict"] == "skipped" for c in checks if c["metric"] in ("dcgm-diag", "roce-qos")), "no GPU or mlx5"
    assert Path(doc["heatmap"]).read_bytes()[:4] == b"\x89PNG"
    # Cleared: the rails are as the plan has them again.
    assert addresses(f"aisite-{SITE}-{mtu[0].name}")[mtu[1].interface]["mtu"] == mtu[1].mtu


@rotating("three-tier")
def test_health_finds_a_rail_down_and_the_cap_holds_the_rest_in_service(
    up: subprocess.CompletedProcess[str], stack_file: Path, plan: Plan
) -> None:
    """The deploy installed every node's health check (role node_health). One node's rail is pulled down; `aisite
    health --now` runs each node's check and reads it: that node fails on its rail. Every lab node also fails its
    clock (the lab's ntp_servers address, this machine's bridge, serves no NTP), so more nodes fail than the cap
    allows: one, the worst, is quarantined, the others are held in service, each said; with no API server the Node
    object is written and reported not applied. The rail back, routes and all."""
    gpu = next(n for n in plan.by_role("gpu") if n.rails)
    rail = gpu.rails[-1]
    shutil.rmtree(ROOT / ".aisite" / SITE / "health", ignore_errors=True)
    members_file(SITE).unlink(missing_ok=True)
    try:
        faults.link_down(plan, gpu.name, rail.interface)
        r = run_cli("health", str(stack_file), "--now", "--json", env=BMC_ENV)
    finally:
        faults.clear(plan, gpu.name, rail.interface)
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["missing"] == [] and set(doc["nodes"]) == {n.name for n in plan.nodes}
    problems = {n: {(p["check"], p["subject"]) for p in v["problems"]} for n, v in doc["nodes"].items()}
    assert ("rail", rail.interface) in problems[gpu.name]
    assert all(("rail", rail.interface) not in p for n, p in problems.items() if n != gpu.name)
    rails_down = [p for p in doc["nodes"][gpu.name]["problems"] if p["check"] == "rail"]
    assert rails_down == [{"check": "rail", "subject": rail.interface, "message": "down (operstate DOWN)"}]
    # The containers have no kernel log of their own and no NVIDIA driver: said, not passed.
    assert any(s.startswith("xid:") for s in doc["nodes"][gpu.name]["skipped"])
    assert doc["cap"] == 1 and doc["quarantined"] == [gpu.name], doc["actions"]  # the worst: rail and clock
    kinds = {a["node"]: a["kind"] for a in doc["actions"]}
    assert kinds[gpu.name] == "quarantine"
    assert {n for n, k in kinds.items() if k == "held"} == {n for n, v in doc["nodes"].items() if not v["healthy"]} - {
        gpu.name
    }
    assert any("no Kubernetes API server" in s for s in doc["not_applied"])
    # The node's one state: quarantined, its taint still to apply (no API server took it); the only one out.
    status = json.loads(run_cli("status", str(stack_file), "--json").stdout)
    held = {m["name"]: (m["state"], m["pending"], m["by"]) for m in status["members"] if m["holds"]}
    assert held == {gpu.name: ("quarantined", "quarantine", "health")}, held
    node_obj = yaml.safe_load((Path(doc["files"]["objects"]) / f"{gpu.name}.yaml").read_text())
    assert node_obj["spec"]["taints"][0]["value"] == "rail" and node_obj["spec"]["unschedulable"] is True
    assert "aisite_health_held{node=" in Path(doc["files"]["metrics"]).read_text()
    status = podman(
        "exec", f"aisite-{SITE}-{gpu.name}", "cat", "/var/lib/node_exporter/textfile_collector/aisite_health.prom"
    )
    assert f'aisite_health_problem{{check="rail",subject="{rail.interface}"}} 1' in status
    routes = podman("exec", f"aisite-{SITE}-{gpu.name}", "ip", "route", "show", "table", str(rail.table))
    assert f"default via {rail.gateway}" in routes and addresses(f"aisite-{SITE}-{gpu.name}")[rail.interface]["up"]
