"""Three-tier fabrics in the plan: the two-tier stacks' plans unchanged to the byte, a pod's leaves cabled to its
own spines and every spine to the super-spines of its plane, ASNs per tier, and the bandwidth figures `aisite plan`
prints agreeing with the cables the plan lays."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pytest

from aisite.examples import scale_site
from aisite.loader import load_site, parse_site
from aisite.plan import FABRIC_ROLES, Plan, build_plan, fabric_capacity, fabric_layout
from tests.conftest import run_cli

# sha256 of `aisite plan STACK --json` before three tiers existed (commit 337ac11). A two-tier site's plan must not
# change by a byte with the third tier in the model: a change here is a change to every real site's addresses,
# ports or sessions. Update these only with a change meant to reach the two-tier sites, and say so in its commit.
# Provisioning added one key to every plan (`"provisioning": null` where a site installs no node), compared without
# it; the lab's stack gained a node to install (session 16) and two storage nodes for Ceph's monitors (session 30),
# so its digest is of that stack.
TWO_TIER_PLANS = {
    "dc1": "74b37764fd0ce677d5a6c8bffe486dd996ee393a27fc98b97722259a6db42d1d",
    "h100pod": "e0582bd422209529ab49f894156b6013fd142edaa16fef8d9c51f1256866ddf1",
    "lab": "a1e70053a586080d89a70075ffed752758b71eeee289c78b2d94e85f8b024c6a",
}


DC1_IB_WRITE_BW = {
    "name": "ib-write-bw",
    "kind": "ib-write-bw",
    "tenant": "research",
    "namespace": "tenant-research",
    "nodes": 2,
    "gpus_per_node": 0,
    "gpu_type": "v100",
    "image": None,
    "batch_size": None,
    "thresholds": {"min_value": None, "min_fraction_of_reference": None, "min_scaling_efficiency": None},
    "operator": None,
}


@pytest.mark.parametrize("stack", sorted(TWO_TIER_PLANS))
def test_two_tier_plans_are_byte_identical(stack: str) -> None:
    r = run_cli("plan", stack, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    # Keys added since, none of them a change of the fabric: provisioning (null where nothing is installed), the
    # acceptance thresholds, the health check settings, the leaf-block label (topology-aware placement), the
    # rails' speed, the NIC behind each rail (catalog) and the pods' network on it, a cable's chassis label, the
    # switches' front panel and host ports' far ends, the access switches' configuration, the disruption budget,
    # the etcd backups' settings, the certificates' renewal, the nodes' firmware baselines, and racks (NVL72: none
    # here) with the GPU allocation; served models and dc1's kserve addon; notebooks and h100pod's jupyterhub addon.
    del doc["serving"], doc["kubernetes"]["notebooks"]
    doc["kubernetes"]["addons"] = [a for a in doc["kubernetes"]["addons"] if a not in ("kserve", "jupyterhub")]
    if doc["provisioning"] is None:
        del doc["provisioning"]
    del doc["acceptance"], doc["health"], doc["maintenance"], doc["kubernetes"]["etcd_backup"], doc["ceph"]
    del doc["kubernetes"]["certificate_renew_days"]
    # What each network keeps back (issue 65): listed, and no address of these sites moved by it.
    del doc["reserved"]
    assert doc.pop("racks") == [] and doc["kubernetes"].pop("gpu_allocation") == "device-plugin"
    # Issue 67: the racks the GPU nodes are placed in for their power (h100pod's 30 kW racks), and the repository
    # each GPU group installs from, the repository now per group (its OS and CPUs).
    doc.pop("power_racks")
    assert doc.pop("nvidia_repository", None) is None
    root = "https://developer.download.nvidia.com/compute/cuda/repos/"
    # h100pod's DGX adopt DGX OS 7 (Ubuntu 24.04 based); the others' GPU nodes run Debian 12.
    own = root + ("ubuntu2404" if stack == "h100pod" else "debian12") + "/x86_64/"
    for node in doc["nodes"]:
        assert node.pop("rack") is None
        node["labels"].pop("aisite.io/leaf-block", None)
        del node["firmware"]  # the group's firmware baseline (none here)
        del node["nics"]  # the rail NICs' firmware settings (LINK_TYPE ETH where the PCI function is known)
        del node["os"]  # the OS the node runs and how it got it (issue 67)
        if node["gpu"]:
            del node["gpu"]["kernel_modules"]  # the driver's flavour (issue 67)
            del node["gpu"]["nvlsm"], node["gpu"]["cdmm"]  # fabric software and coherent memory (issue 67)
            assert node["gpu"].pop("repository") == own
        for rail in node["rails"]:
            for key in ("speed_gbps", "port", "netdev", "rdma", "pci", "gpu", "pod_network", "pod_pool"):
                del rail[key]
    for cable in doc["cables"]:
        del cable["a_label"]
    for sw in doc["switches"]:  # the front panel (breakouts) and who each host port faces
        del sw["breakout"], sw["cage_lanes"], sw["cages"], sw["breakout_mode"], sw["hwsku"]
        # the management and out-of-band switches aisite configures: their VLANs, ports and (now required) release
        del sw["vlans"], sw["access_ports"]
        if sw["role"] in ("management", "oob"):
            sw["os_version"] = ""
            # the front panels the catalog now holds them to: dc1's SN2010 has 18 node ports, not 48; h100pod's
            # in-band management is on SN4600s (an SN2201's node ports are 1G)
            sw["ports"] = 48
            if sw["model"] == "SN4600":
                sw["model"] = "SN2201"
        for hs in sw["host_subnets"]:
            del hs["peers"]
    if stack == "dc1":  # dc1 dropped its ib-write-bw workload (no document names a DGX-2's RDMA devices)
        doc["workloads"].insert(3, DC1_IB_WRITE_BW)
    if stack == "lab":  # the lab's second tenant, for Ceph's isolation between two (issue 64): no fabric change
        doc["tenants"] = [t for t in doc["tenants"] if t["name"] != "team-b"]
    # The site's one repository, where the plan held it before each group had its own.
    items = list(doc.items())
    at = [k for k, _ in items].index("dns_servers") + 1
    doc = dict([*items[:at], ("nvidia_repository", root + "debian12/x86_64/"), *items[at:]])
    text = json.dumps(doc, indent=2) + "\n"
    assert hashlib.sha256(text.encode()).hexdigest() == TWO_TIER_PLANS[stack]


@pytest.fixture(scope="module")
def lab3() -> Plan:
    return build_plan(load_site("lab3"))


def test_the_three_tier_lab_has_two_pods_under_two_super_spines(lab3: Plan) -> None:
    roles = Counter(s.role for s in lab3.switches)
    assert roles == {"leaf": 4, "spine": 4, "super-spine": 2}
    by_name = {s.name: s for s in lab3.switches}
    # Pod A: leaf01-02, spine01-02; pod B: leaf03-04, spine03-04; every spine to both super-spines (one plane).
    assert {nb.peer for nb in by_name["leaf01"].neighbors} == {"spine01", "spine02"}
    assert {nb.peer for nb in by_name["leaf04"].neighbors} == {"spine03", "spine04"}
    assert {nb.peer for nb in by_name["spine03"].neighbors} == {"leaf03", "leaf04", "super01", "super02"}
    assert {nb.peer for nb in by_name["super01"].neighbors} == {f"spine0{i}" for i in range(1, 5)}
    # ASNs: the super-spines share one, each pod's spines one, each leaf its own (RFC 7938).
    asn = {s.name: s.asn for s in lab3.switches}
    assert asn["super01"] == asn["super02"] == 4200000000
    assert asn["spine01"] == asn["spine02"] != asn["spine03"] == asn["spine04"]
    assert len({asn[f"leaf0{i}"] for i in range(1, 5)}) == 4
    assert all(s.loopback and s.bfd for s in lab3.switches if s.role in FABRIC_ROLES)
    gpu01, gpu02 = lab3.by_role("gpu")
    assert {r.leaf for r in gpu01.rails} == {"leaf01", "leaf02"}
    assert {r.leaf for r in gpu02.rails} == {"leaf03", "leaf04"}


def test_spine_uplinks_take_the_top_ports_and_super_spines_count_from_the_bottom(lab3: Plan) -> None:
    spine = next(s for s in lab3.switches if s.name == "spine03")
    ports = {nb.peer: nb.interface for nb in spine.neighbors}
    assert ports == {"leaf03": "swp1", "leaf04": "swp2", "super01": "swp15", "super02": "swp16"}
    super01 = next(s for s in lab3.switches if s.name == "super01")
    assert [(nb.interface, nb.peer) for nb in super01.neighbors] == [
        ("swp1", "spine01"),
        ("swp2", "spine02"),
        ("swp3", "spine03"),
        ("swp4", "spine04"),
    ]


@pytest.mark.parametrize("planes", [1, 2])
def test_planes_split_the_super_spines_between_the_spines_of_a_pod(planes: int) -> None:
    data = scale_site(4096)  # 4 pods of 32 spines; 32 planes by default
    data["fabric"]["super_spine_planes"] = planes
    data["switches"]["super_spines"]["count"] = 2 * planes
    data["switches"]["super_spines"] |= {"ports": 256, "model": ""}  # a chassis: more than an SN5600 holds
    data["fabric"]["uplinks_per_super_spine"] = 1
    data["fabric"]["oversubscription"] = {"spines": 64}
    plan = build_plan(parse_site(data))
    supers = {s.name: i for i, s in enumerate(plan.switches_by_role("super-spine"))}
    for i, spine in enumerate(plan.switches_by_role("spine")):
        plane = (i % 32) % planes
        ups = {nb.peer for nb in spine.neighbors if nb.peer in supers}
        assert ups == {name for name, k in supers.items() if k % planes == plane}, spine.name


@pytest.mark.parametrize("stack", ["lab", "lab3", "h100pod"])
def test_the_printed_bandwidth_is_the_cabled_bandwidth(stack: str) -> None:
    """fabric_capacity works from the site's shape; the plan's cables are what gets built: they must agree on the
    busiest leaf's and spine's bandwidth down and up."""
    site = load_site(stack)
    plan = build_plan(site)
    capacity = fabric_capacity(site, fabric_layout(site))
    assert capacity is not None
    role = {s.name: s.role for s in plan.switches}
    down: Counter[str] = Counter()
    up: Counter[str] = Counter()
    for c in plan.cables:
        for me, other in ((c.a_device, c.b_device), (c.b_device, c.a_device)):
            if role.get(me) not in ("leaf", "spine"):
                continue
            below = {"leaf": ("rail",), "spine": ("leaf",)}[role[me]]
            if c.kind == "rail" or role.get(other) in below:
                down[me] += c.speed_gbps
            elif role.get(other) in FABRIC_ROLES:
                up[me] += c.speed_gbps
    for tier in capacity.tiers:
        members = [s.name for s in plan.switches_by_role(tier.name.removesuffix("s").replace("leave", "leaf"))]
        assert max(down[m] for m in members) == tier.down_gbps, tier
        assert max(up[m] for m in members) == tier.up_gbps, tier
