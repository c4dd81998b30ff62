"""The three-tier lab (stacks/Pulumi.lab3.yaml as `itest3`), after the main lab is down: the two together would
pass the inotify instances a default Debian gives (fs.inotify.max_user_instances 128). Every session of every
tier, a rail across pods through the super-spines, a super-spine lost."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aisite.lab.podman import CONF
from aisite.loader import load_site, resolve_stack
from aisite.plan import FABRIC_ROLES, Plan, build_plan
from tests.conftest import ROOT, run_cli
from tests.lab.common import BMC_ENV, Pinger, podman, rotating, route_nexthops, tx_packets, wait_established, wait_for

# ------------------------------------------------------------------------------------------- the three-tier lab
# After the main lab is down (test_down_leaves_nothing above): the three-tier lab shares nothing with it, and the
# two together would pass the inotify instances a default Debian gives (fs.inotify.max_user_instances 128).
SITE3 = "itest3"


@pytest.fixture(scope="module")
def lab3_stack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """stacks/Pulumi.lab3.yaml as site `itest3` on ranges of its own (10.246.0.0/15): a running `lab3` is left be."""
    text = resolve_stack("lab3").read_text()
    text = text.replace("10.248.", "10.246.").replace("10.249.", "10.247.").replace("name: lab3\n", "name: itest3\n")
    path = tmp_path_factory.mktemp("lab3") / f"Pulumi.{SITE3}.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def lab3(lab3_stack: Path) -> Iterator[Plan]:
    """The three-tier lab up, its fabric deployed, every BGP session of every tier Established; removed after."""
    plan = build_plan(load_site(lab3_stack))
    try:
        up = run_cli("lab", "up", str(lab3_stack), env=BMC_ENV)
        assert up.returncode == 0, up.stdout + up.stderr
        deploy = run_cli("deploy", str(lab3_stack), "--layer", "fabric", "--json", env=BMC_ENV)
        assert deploy.returncode == 0, deploy.stdout + deploy.stderr
        yield plan
    finally:
        run_cli("lab", "down", str(lab3_stack))
        shutil.rmtree(ROOT / ".aisite" / SITE3, ignore_errors=True)


@rotating("three-tier")
def test_three_tiers_every_session_of_every_tier_is_established(lab3: Plan) -> None:
    fabric = wait_established(lab3, SITE3)
    assert {s.role for s in fabric} == {"leaf", "spine", "super-spine"}


@pytest.fixture(scope="module")
def pods_pair(lab3: Plan) -> tuple[str, str]:
    """gpu01's and gpu02's rail 0 (pods A and B), each routing rail 0's network through its leaf. The hosts layer's
    per-rail tables (roce_host, checked on the main lab) are not deployed here: one route stands in for them."""
    a, b = lab3.by_role("gpu")[:2]
    network = lab3.networks.rails[0]
    for node in (a, b):
        rail = node.rails[0]
        podman("exec", f"aisite-{SITE3}-{node.name}", "ip", "route", "replace", network, "via", rail.gateway)
    return a.rails[0].address, b.rails[0].address


def super_uplinks(plan: Plan, spine: str) -> dict[str, str]:
    """super-spine name -> the spine's port to it."""
    sw = next(s for s in plan.switches if s.name == spine)
    roles = {s.name: s.role for s in plan.switches}
    return {nb.peer: nb.interface for nb in sw.neighbors if roles[nb.peer] == "super-spine"}


def _routes_are(switch: str, prefix: str, ports: set[str]) -> bool:
    return route_nexthops(switch, prefix, SITE3) == ports


@rotating("three-tier")
def test_a_rail_in_one_pod_reaches_the_other_pod_through_the_super_spines(
    lab3: Plan, pods_pair: tuple[str, str]
) -> None:
    """Jumbo frames (8972 bytes, DF set) from pod A to pod B, five routers on the way (leaf, spine, super-spine,
    spine, leaf: TTL 64 arrives as 59); each leaf's route has a next hop per spine of its pod, each spine's a next
    hop per super-spine."""
    a, b = lab3.by_role("gpu")[:2]
    src, dst = pods_pair
    remote = b.rails[0].subnet
    leaf = a.rails[0].leaf
    spines = {nb.peer: nb.interface for nb in next(s for s in lab3.switches if s.name == leaf).neighbors}
    wait_for(
        f"{leaf}: a route to {remote} over both spines",
        functools.partial(_routes_are, leaf, remote, set(spines.values())),
    )
    for spine in spines:
        ups = set(super_uplinks(lab3, spine).values())
        assert len(ups) == len(lab3.switches_by_role("super-spine"))
        wait_for(f"{spine}: {remote} over every super-spine", functools.partial(_routes_are, spine, remote, ups))
    out = ""
    deadline = time.monotonic() + 30
    while "ttl=59" not in out:
        assert time.monotonic() < deadline, f"{src} -> {dst}: {out}"
        r = subprocess.run(
            [
                "podman",
                "exec",
                f"aisite-{SITE3}-{a.name}",
                "ping",
                "-c1",
                "-W2",
                "-M",
                "do",
                "-s",
                "8972",
                "-I",
                src,
                dst,
            ],
            env=os.environ | {"CONTAINERS_CONF": str(CONF)},
            capture_output=True,
            text=True,
            check=False,
        )
        out = r.stdout
        assert "ttl=" not in out or "ttl=59" in out, f"not five routed hops: {out}"
    assert "8980 bytes from" in out


@rotating("three-tier")
def test_a_super_spine_lost_costs_seconds_of_traffic(lab3: Plan, pods_pair: tuple[str, str]) -> None:
    """A 10/s ping between the pods while the super-spine carrying it loses every port (power lost): the spines
    route around it (BFD) and the ping loses at most a few seconds; with the ports back, ECMP over both returns."""
    a, b = lab3.by_role("gpu")[:2]
    remote = b.rails[0].subnet
    pod_a_spines = [nb.peer for nb in next(s for s in lab3.switches if s.name == a.rails[0].leaf).neighbors]
    supers = [s.name for s in lab3.switches_by_role("super-spine")]
    super_ports = {n: [nb.interface for nb in next(s for s in lab3.switches if s.name == n).neighbors] for n in supers}

    def tx(name: str) -> int:
        return sum(tx_packets(f"aisite-{SITE3}-{name}", super_ports[name]).values())

    pinger = Pinger(a.name, *pods_pair, seconds=25, site=SITE3)
    before = {n: tx(n) for n in supers}
    time.sleep(2)
    carried = {n: tx(n) - before[n] for n in supers}
    victim = max(carried, key=lambda n: carried[n])
    assert carried[victim] >= 15, carried  # 2 s of 10/s through one super-spine

    def via(spine: str, without: str = "") -> bool:
        ports = super_uplinks(lab3, spine)
        return route_nexthops(spine, remote, SITE3) == {p for n, p in ports.items() if n != without}

    for port in super_ports[victim]:
        podman("exec", f"aisite-{SITE3}-{victim}", "ip", "link", "set", port, "down")
    try:
        took = max(wait_for(f"{s} routes around {victim}", functools.partial(via, s, victim), 10) for s in pod_a_spines)
        time.sleep(5)
    finally:
        for port in super_ports[victim]:
            podman("exec", f"aisite-{SITE3}-{victim}", "ip", "link", "set", port, "up")
    for spine in pod_a_spines:
        wait_for(f"{spine}: {victim} back in ECMP", functools.partial(via, spine), 90)
    outage = pinger.outage_seconds()
    print(f"super-spine {victim} lost: spines rerouted within {took:.1f} s, traffic lost {outage:.1f} s")
    assert outage <= 3, f"{outage:.1f} s of traffic lost when {victim} went down"


@rotating("three-tier")
def test_three_tier_lab_down_leaves_nothing(lab3: Plan, lab3_stack: Path) -> None:
    down = run_cli("lab", "down", str(lab3_stack), "--json")
    assert down.returncode == 0, down.stderr
    fabric = [s for s in lab3.switches if s.role in FABRIC_ROLES]
    assert len(json.loads(down.stdout)["containers"]) == 2 * len(lab3.nodes) + len(fabric)
    assert podman("ps", "-aq", "--filter", f"label=io.aisite.lab={SITE3}") == ""
    assert podman("network", "ls", "-q", "--filter", f"label=io.aisite.lab={SITE3}") == ""
