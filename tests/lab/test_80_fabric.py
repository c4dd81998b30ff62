"""The fabric: BGP converged and idempotent, rails across it with jumbo frames, ECMP over every spine, traffic
through a failed link, spine or hung spine, a manual change reverted, a cut cable repaired, and the LLDP cabling
check naming a miswire."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from aisite.lab.podman import CONF
from aisite.plan import Plan
from tests.conftest import run_cli
from tests.lab.common import (
    BMC_ENV,
    SITE,
    Pinger,
    addresses,
    podman,
    rotating,
    route_nexthops,
    tx_packets,
    wait_established,
    wait_for,
)


def test_fabric_converges_and_a_second_run_changes_nothing(
    up: subprocess.CompletedProcess[str], stack_file: Path, plan: Plan
) -> None:
    """The whole-site deploy (test_10_deploy's: `make lab`'s or the tests' own) was the fabric's first run: its
    sessions come up, and a second run of the layer changes nothing."""
    assert up.returncode == 0, up.stderr
    fabric = wait_established(plan, SITE)
    again = json.loads(run_cli("deploy", str(stack_file), "--layer", "fabric", "--json", env=BMC_ENV).stdout)
    assert again["status"] == "successful"
    assert {h: r["changed"] for h, r in again["recap"].items()} == {s.name: 0 for s in fabric}


def exec_ok(container: str, *cmd: str) -> bool:
    env = os.environ | {"CONTAINERS_CONF": str(CONF)}
    return (
        subprocess.run(["podman", "exec", container, *cmd], env=env, capture_output=True, check=False).returncode == 0
    )


@pytest.fixture(scope="module")
def rail_routes(up: subprocess.CompletedProcess[str], plan: Plan) -> tuple[str, str]:
    """gpu01 rail 0 and gpu02 rail 1: a pair whose traffic crosses leaf, spine, leaf.

    Source routing per rail as DESIGN.md has it (one table per rail, `ip rule from <rail address>`), set by the
    roce_host role in the site deploy above: without it gpu01 would reach gpu02's rail 1 through its own rail 1."""
    assert up.returncode == 0, up.stderr
    for node in plan.by_role("gpu"):
        c = f"aisite-{SITE}-{node.name}"
        rules = podman("exec", c, "ip", "rule", "show")
        for r in node.rails:
            assert f"from {r.address} lookup {r.table}" in rules, (node.name, rules)
            assert f"default via {r.gateway} dev {r.interface}" in podman(
                "exec", c, "ip", "route", "show", "table", str(r.table)
            )
    a, b = plan.by_role("gpu")[:2]
    return a.rails[0].address, b.rails[1].address


def test_rails_reach_across_the_fabric_with_jumbo_frames(
    up: subprocess.CompletedProcess[str], plan: Plan, rail_routes: tuple[str, str]
) -> None:
    """Same rail through a leaf's bridge, and rail 0 to rail 1 through leaf, spine, leaf (8972 bytes, DF set)."""
    a, b = plan.by_role("gpu")[:2]
    deadline = time.monotonic() + 30
    for src, dst in ((a.rails[0].address, b.rails[0].address), rail_routes):
        cmd = ("ping", "-c1", "-W2", "-M", "do", "-s", "8972", "-I", src, dst)
        while not exec_ok(f"aisite-{SITE}-{a.name}", *cmd):
            assert time.monotonic() < deadline, f"{src} -> {dst} not reachable"
            time.sleep(1)


def remote_block(plan: Plan) -> str:
    """The host block (on the far leaf) of gpu02's rail 1, as the fabric advertises it."""
    return plan.by_role("gpu")[1].rails[1].subnet


def uplinks(plan: Plan, leaf: str) -> dict[str, str]:
    """spine name -> the leaf's port to it."""
    sw = next(s for s in plan.switches if s.name == leaf)
    return {nb.peer: nb.interface for nb in sw.neighbors}


def test_ecmp_spreads_flows_over_every_spine(
    up: subprocess.CompletedProcess[str], plan: Plan, rail_routes: tuple[str, str]
) -> None:
    a = plan.by_role("gpu")[0]
    leaf, remote = a.rails[0].leaf, remote_block(plan)
    ports = uplinks(plan, leaf)
    assert len(ports) >= 2, "the lab stack needs two spines for ECMP"
    wait_for(
        f"{leaf}: a route to {remote} over every spine", lambda: route_nexthops(leaf, remote) == set(ports.values())
    )
    before = tx_packets(f"aisite-{SITE}-{leaf}", list(ports.values()))
    src, dst = rail_routes
    # 256 UDP flows (one datagram each, distinct source ports): the 5-tuple hash sends some over every spine.
    script = (
        "import socket\n"
        "for port in range(40000, 40256):\n"
        "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        f"    s.bind(('{src}', port)); s.sendto(b'x' * 64, ('{dst}', 9)); s.close()\n"
    )
    podman("exec", f"aisite-{SITE}-{a.name}", "python3", "-c", script)
    after = tx_packets(f"aisite-{SITE}-{leaf}", list(ports.values()))
    sent = {p: after[p] - before[p] for p in ports.values()}
    assert sum(sent.values()) >= 256, sent
    assert all(n >= 256 // (4 * len(ports)) for n in sent.values()), f"flows per uplink of {leaf}: {sent}"


def _fail(failure: str, broken: bool, spine: str, spine_ports: list[str], leaf: str, port: str) -> None:  # noqa: PLR0917
    """Break (`broken`) or repair one of the failures below."""
    if failure == "hung spine":
        # Its processes frozen: the kernel still forwards, BGP and BFD fall silent; BFD withdraws the routes.
        podman("pause" if broken else "unpause", f"aisite-{SITE}-{spine}")
        return
    state = "down" if broken else "up"
    if failure == "spine":
        # Every port of the spine down at once, as when it loses power.
        for p in spine_ports:
            podman("exec", f"aisite-{SITE}-{spine}", "ip", "link", "set", p, state)
    else:
        podman("exec", f"aisite-{SITE}-{leaf}", "ip", "link", "set", port, state)


# One failure every day; the other two take their turn with the other fault scenarios.
@pytest.mark.parametrize(
    "failure",
    [
        "leaf-spine link",
        pytest.param("spine", marks=rotating("faults")),
        pytest.param("hung spine", marks=rotating("faults")),
    ],
)
def test_traffic_survives_a_failure_and_returns_with_the_repair(
    up: subprocess.CompletedProcess[str], plan: Plan, rail_routes: tuple[str, str], failure: str
) -> None:
    a = plan.by_role("gpu")[0]
    leaf, remote = a.rails[0].leaf, remote_block(plan)
    ports = uplinks(plan, leaf)
    wait_for(f"{leaf}: ECMP over every spine", lambda: route_nexthops(leaf, remote) == set(ports.values()))
    pinger = Pinger(a.name, *rail_routes, seconds=25)
    # Fail the spine that carries the ping (the flow hashes onto one uplink): 2 s of its 10/s show where.
    before = tx_packets(f"aisite-{SITE}-{leaf}", list(ports.values()))
    time.sleep(2)
    after = tx_packets(f"aisite-{SITE}-{leaf}", list(ports.values()))
    spine, port = max(ports.items(), key=lambda sp: after[sp[1]] - before[sp[1]])
    assert after[port] - before[port] >= 15, (before, after)
    spine_ports = [nb.interface for nb in next(s for s in plan.switches if s.name == spine).neighbors]
    _fail(failure, True, spine, spine_ports, leaf, port)
    try:
        took = wait_for(
            f"{leaf} routes around {spine}", lambda: route_nexthops(leaf, remote) == set(ports.values()) - {port}, 10
        )
        time.sleep(5)
    finally:
        _fail(failure, False, spine, spine_ports, leaf, port)
    back = wait_for(f"{leaf}: {spine} back in ECMP", lambda: route_nexthops(leaf, remote) == set(ports.values()), 90)
    outage = pinger.outage_seconds()
    print(f"{failure}: rerouted in {took:.1f} s, traffic lost {outage:.1f} s, ECMP restored {back:.1f} s after repair")
    assert outage <= 5, f"{failure}: {outage:.1f} s of traffic lost"
    assert took <= 5, f"{failure}: {leaf} took {took:.1f} s to route around {spine}"


def frr_running(switch: str) -> str:
    return podman("exec", f"aisite-{SITE}-{switch}", "vtysh", "-c", "show running-config")


def test_a_manual_change_is_reverted_and_then_nothing_changes(
    up: subprocess.CompletedProcess[str], stack_file: Path, plan: Plan
) -> None:
    leaf = plan.switches_by_role("leaf")[0]
    port = leaf.neighbors[0].interface
    assert "maximum-paths 64" in frr_running(leaf.name)
    podman(
        "exec",
        f"aisite-{SITE}-{leaf.name}",
        "vtysh",
        "-c",
        "configure terminal",
        "-c",
        f"router bgp {leaf.asn}",
        "-c",
        "address-family ipv4 unicast",
        "-c",
        "maximum-paths 1",
    )
    podman("exec", f"aisite-{SITE}-{leaf.name}", "ip", "link", "set", port, "mtu", "1500")
    assert "maximum-paths 1" in frr_running(leaf.name)
    fix = json.loads(run_cli("deploy", str(stack_file), "--layer", "fabric", "--json", env=BMC_ENV).stdout)
    assert fix["status"] == "successful"
    changed = {h: r["changed"] for h, r in fix["recap"].items() if r["changed"]}
    assert set(changed) == {leaf.name}, changed
    assert "maximum-paths 64" in frr_running(leaf.name)
    wait_for(
        f"{leaf.name} {port} MTU back",
        lambda: addresses(f"aisite-{SITE}-{leaf.name}")[port]["mtu"] == plan.roce.switch_mtu,
        10,
    )
    again = json.loads(run_cli("deploy", str(stack_file), "--layer", "fabric", "--json", env=BMC_ENV).stdout)
    assert {h: r["changed"] for h, r in again["recap"].items() if r["changed"]} == {}


def test_a_cut_cable_is_repaired_by_up(up: subprocess.CompletedProcess[str], stack_file: Path, plan: Plan) -> None:
    assert up.returncode == 0, up.stderr
    rail = plan.by_role("gpu")[1].rails[0]
    podman("exec", f"aisite-{SITE}-{plan.by_role('gpu')[1].name}", "ip", "link", "del", rail.interface)
    again = json.loads(run_cli("lab", "up", str(stack_file), "--json", env=BMC_ENV).stdout)
    assert again["links_created"] == 1
    assert addresses(f"aisite-{SITE}-{plan.by_role('gpu')[1].name}")[rail.interface]["v4"] == [rail.address]
    assert addresses(f"aisite-{SITE}-{rail.leaf}")[rail.leaf_port]["up"]


def cabling(stack_file: Path) -> dict[str, Any]:
    r = run_cli("cabling", str(stack_file), "--json")
    doc: dict[str, Any] = json.loads(r.stdout)
    assert doc["errors"] == [], doc
    assert (r.returncode == 0) == (doc["miswires"] == []), r.stderr
    return doc


def pid(container: str) -> str:
    return podman("inspect", "--format", "{{.State.Pid}}", container).strip()


@rotating("faults")
def test_cabling_check_lists_every_miswire(up: subprocess.CompletedProcess[str], stack_file: Path, plan: Plan) -> None:
    """Swap two nodes' rail-0 cables at the leaf: the LLDP check names both ends; `lab up` recables, and the
    check comes back clean. Runs after the deploy test, which starts lldpd with the plan's names."""
    a, b = plan.by_role("gpu")[:2]
    ra, rb = a.rails[0], b.rails[0]
    assert ra.leaf == rb.leaf
    wait_for("a clean cabling report", lambda: cabling(stack_file)["miswires"] == [], 60)
    for node in (a, b):
        podman("exec", f"aisite-{SITE}-{node.name}", "ip", "link", "del", node.rails[0].interface)
    leaf_pid = pid(f"aisite-{SITE}-{ra.leaf}")
    for node, leaf_port in ((a, rb.leaf_port), (b, ra.leaf_port)):
        rail = node.rails[0]
        subprocess.run(
            [
                "ip",
                "link",
                "add",
                rail.interface,
                "netns",
                pid(f"aisite-{SITE}-{node.name}"),
                "mtu",
                str(rail.mtu),
                "type",
                "veth",
                "peer",
                "name",
                leaf_port,
                "netns",
                leaf_pid,
                "mtu",
                str(plan.roce.switch_mtu),
            ],
            check=True,
        )
        podman("exec", f"aisite-{SITE}-{node.name}", "ip", "link", "set", rail.interface, "up")
        podman("exec", f"aisite-{SITE}-{ra.leaf}", "ip", "link", "set", leaf_port, "up")
    want = sorted(
        [
            f"{a.name} {ra.interface}: cabled to {ra.leaf} {rb.leaf_port}; the plan says {ra.leaf} {ra.leaf_port}",
            f"{b.name} {rb.interface}: cabled to {rb.leaf} {ra.leaf_port}; the plan says {rb.leaf} {rb.leaf_port}",
        ]
    )
    try:
        wait_for("both miswires reported", lambda: sorted(cabling(stack_file)["miswires"]) == want, 60)
    finally:
        for node in (a, b):
            podman("exec", f"aisite-{SITE}-{node.name}", "ip", "link", "del", node.rails[0].interface)
        again = json.loads(run_cli("lab", "up", str(stack_file), "--json", env=BMC_ENV).stdout)
        assert again["links_created"] == 2
    wait_for("a clean cabling report after recabling", lambda: cabling(stack_file)["miswires"] == [], 60)
