"""The machines as their vendors document them: the catalog's port maps, a site's own port list (a permutation
for firmware that numbers differently), the plan's rails carrying the real NIC, jobs that span scalable units
getting every rail, and the warnings a valid but surprising site gets."""

from __future__ import annotations

import copy
import json
import re
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any

import pytest
import yaml

from aisite.catalog import SERVER_MODELS
from aisite.errors import SiteError
from aisite.examples import scale_site
from aisite.loader import parse_site, resolve_stack
from aisite.plan import LABEL_PREFIX, Plan, build_plan
from aisite.platform import jobs, objects
from tests.conftest import run_cli, stack_data


def test_the_dgx_h100_map_is_the_user_guides_table() -> None:
    """Table 6 of the DGX H100/H200 User Guide, ordered by nearest GPU (rail N on GPU N's NIC): each PCI bus is
    the netdev's pNNN in hex, the list BasePOD's guide hands to mlxconfig."""
    for model in ("dgx-h100", "dgx-h200"):
        ports = SERVER_MODELS[model].compute_ports
        assert [p.gpu for p in ports] == list(range(8))
        assert [p.label for p in ports] == [
            "OSFP4P2", "OSFP3P2", "OSFP3P1", "OSFP4P1", "OSFP1P2", "OSFP2P2", "OSFP2P1", "OSFP1P1",
        ]  # fmt: skip
        for p in ports:
            bus = int(p.netdev.removeprefix("ibp").removesuffix("s0"))
            assert p.pci == f"0000:{bus:02x}:00.0"
        assert {p.pci.split(":")[1] for p in ports} == {"dc", "9a", "ce", "c0", "4f", "40", "5e", "18"}
        assert "User Guide" in SERVER_MODELS[model].source
    # No document found gives a DGX A100's or DGX-2's: nothing is derived for them.
    assert SERVER_MODELS["dgx-a100"].compute_ports == () == SERVER_MODELS["dgx-2"].compute_ports


def test_h100pod_rails_are_the_real_nics_and_cables_name_the_chassis_port() -> None:
    plan = build_plan(parse_site(stack_data("h100pod")))
    node = plan.by_role("gpu")[0]
    assert [(r.port, r.rdma) for r in node.rails][:2] == [("OSFP4P2", "mlx5_0"), ("OSFP3P2", "mlx5_3")]
    assert all(r.interface == f"rail{r.index}" and r.pci for r in node.rails)
    rail_cables = [c for c in plan.cables if c.kind == "rail" and c.a_device == node.name]
    assert [c.a_label for c in rail_cables] == [r.port for r in node.rails]


def _dgx_site(ports: list[dict[str, Any]] | None) -> dict[str, Any]:
    site = stack_data("h100pod")
    if ports is not None:
        site["gpu_nodes"][0]["ports"] = ports
    return site


def test_a_site_port_list_is_a_permutation_of_the_models() -> None:
    """Firmware that numbers differently: the site lists the model's ports in its own rail order and may rename
    their devices; a port the model lacks, one named twice, or one left out is refused, each at its path."""
    model = SERVER_MODELS["dgx-h100"].compute_ports
    swapped = [{"label": p.label} for p in model]
    swapped[0], swapped[1] = swapped[1], swapped[0]
    swapped[2] = {"label": model[2].label, "rdma": "mlx5_2"}
    plan = build_plan(parse_site(_dgx_site(swapped)))
    rails = plan.by_role("gpu")[0].rails
    assert [r.rdma for r in rails][:3] == ["mlx5_3", "mlx5_0", "mlx5_2"]
    assert rails[0].pci == model[1].pci  # the port's PCI function travels with it
    nccl = json.dumps(jobs(plan))
    assert "=mlx5_3,mlx5_0,mlx5_2,mlx5_5" in nccl

    bad = [{"label": p.label} for p in model]
    bad[7] = {"label": "OSFP9P9"}
    bad[6] = {"label": model[0].label}
    with pytest.raises(SiteError) as exc:
        parse_site(_dgx_site(bad))
    found = [str(p) for p in exc.value.problems]
    assert any(p.startswith("site.gpu_nodes[0].ports[7].label: dgx-h100 has no port 'OSFP9P9'") for p in found)
    assert any(p.startswith("site.gpu_nodes[0].ports[6].label: 'OSFP4P2' is already ports[0]") for p in found)
    assert any("not a permutation of the model's ports: missing OSFP1P1, OSFP2P1" in p for p in found)
    with pytest.raises(SiteError) as exc:
        parse_site(_dgx_site([{"label": p.label} for p in model[:7]]))
    assert [str(p) for p in exc.value.problems] == ["site.gpu_nodes[0].ports: 7 ports for 8 compute NICs"]
    dup = [{"label": p.label} for p in model]
    dup[1]["rdma"] = "mlx5_0"
    with pytest.raises(SiteError) as exc:
        parse_site(_dgx_site(dup))
    assert [str(p) for p in exc.value.problems] == ["site.gpu_nodes[0].ports: two ports share the rdma mlx5_0"]


def _spanning(tiers: int, gpus: int) -> Plan:
    site = scale_site(gpus, tiers=tiers, name=f"span{tiers}")
    site["kubernetes"]["addons"] = ["gpu-operator", "network-operator", "kueue", "mpi-operator"]
    site["kubernetes"]["tenants"][0]["pod_security"] = "baseline"
    site["fabric"]["rail_pod_addresses"] = 2
    nodes = gpus // 8
    site["workloads"] = [
        {"name": "big", "kind": "nccl-allreduce", "tenant": "all", "nodes": nodes // 2, "gpus_per_node": 8}
    ]
    return build_plan(parse_site(site))


@pytest.mark.parametrize(("tiers", "gpus"), [(2, 1024), (3, 2048)])
def test_a_job_spanning_units_gets_every_rail_on_every_node(tiers: int, gpus: int) -> None:
    """A 64-node job on a 4-unit site (and a 128-node one across two pods of a three-tier site) is larger than a
    unit: its pods name one network per rail, each node's file of that name holds its unit's pool, the pool is
    the node's leaf block with the leaf as gateway and a route to the rail's other blocks."""
    plan = _spanning(tiers, gpus)
    units = {n.scalable_unit for n in plan.by_role("gpu")}
    assert len(units) == gpus // 256
    (w,) = plan.workloads
    assert w.nodes > plan.kubernetes.scalable_unit
    (job,) = [o for o in jobs(plan)["workloads/big.yaml"] if o["kind"] == "MPIJob"]
    pod = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    assert pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"].split(",") == [
        f"aisite-rail{r}" for r in range(8)
    ]
    assert f"{LABEL_PREFIX}/scalable-unit" not in pod["spec"].get("nodeSelector", {})
    rails = objects(plan)["rails.yaml"]
    pools = {o["metadata"]["name"]: o["spec"] for o in rails if o["kind"] == "IPPool"}
    blocks: dict[int, list[IPv4Network]] = {}
    for spec in pools.values():
        blocks.setdefault(int(IPv4Network(spec["subnet"]).network_address.packed[1]) - 100, []).append(
            IPv4Network(spec["subnet"])
        )
    for n in plan.by_role("gpu"):
        for r in n.rails:
            spec = pools[r.pod_pool]
            (term,) = spec["nodeSelector"]["nodeSelectorTerms"]
            assert term["matchExpressions"][0]["values"] == [n.labels[f"{LABEL_PREFIX}/scalable-unit"]]
            assert (spec["subnet"], spec["gateway"]) == (r.subnet, r.gateway)
            (route,) = spec["routes"]
            reach = IPv4Network(route["dst"])
            others = [b for b in blocks[r.index] if str(b) != r.subnet]
            assert len(others) == len(units) - 1 and all(b.subnet_of(reach) for b in others)
            assert IPv4Address(spec["gateway"]) in IPv4Network(spec["subnet"])


def test_warnings_are_printed_in_json_and_fail_only_when_strict(tmp_path: Path) -> None:
    """DGX systems on Debian are warned (NVIDIA supports them on DGX OS or Ubuntu); the shipped DGX examples adopt
    their nodes on DGX OS and pass --strict."""
    text = resolve_stack("h100pod").read_text()
    adopt = "        install: {method: adopt, os: dgx-os-7}\n"
    assert adopt in text
    (tmp_path / "Pulumi.debian.yaml").write_text(text.replace(adopt, "", 1))
    r = run_cli("validate", str(tmp_path / "Pulumi.debian.yaml"), "--json")
    assert r.returncode == 0, r.stderr
    warnings = json.loads(r.stdout)["warnings"]
    assert [w["path"] for w in warnings] == ["site.gpu_nodes[0].model"]
    assert warnings[0]["message"] == (
        "dgx-h100 runs Debian 12 here; NVIDIA supports DGX systems on DGX OS or Ubuntu only (adopt them as they "
        "arrive with install: {method: adopt, os: dgx-os-7}, or declare install: {os: debian-12} to accept Debian)"
    )
    strict = run_cli("validate", str(tmp_path / "Pulumi.debian.yaml"), "--strict")
    assert strict.returncode == 1 and "warning: site.gpu_nodes[0].model" in strict.stdout
    for stack in ("h100pod", "mixed"):
        ok = run_cli("validate", stack, "--strict")
        assert ok.returncode == 0 and "warning" not in ok.stdout, (stack, ok.stdout, ok.stderr)


def test_what_a_valid_site_likely_did_not_mean_is_warned() -> None:
    from aisite.cautions import site_warnings

    site = copy.deepcopy(stack_data("h100pod"))
    site["kubernetes"]["addons"].remove("network-operator")
    site["switches"]["leaves"]["speed_gbps"] = 200
    site["switches"]["leaves"]["count"] = 16
    site["fabric"]["uplinks_per_spine"] = 4
    site["fabric"]["oversubscription"] = {"leaves": 2}
    s = parse_site(site)
    found = [str(w) for w in site_warnings(s, build_plan(s))]
    assert any(w.startswith("site.kubernetes.addons: GPU nodes have rails but the network-operator") for w in found)
    slow = "site.switches.leaves.speed_gbps: 200G leaf ports serve dgxh100's 400G NICs"
    assert any(w.startswith(slow) for w in found)
    assert any(w.startswith("site.switches.leaves.count: 8 of 16 leaves have no GPU node") for w in found)
    assert not any("ports" in w.split(":")[0] for w in found)  # the DGX H100's devices are documented


def test_the_cabling_plan_lists_every_cable_and_draws_the_fabric() -> None:
    """cabling/cables.csv: a row per cable of the plan, a DGX's rail by its chassis label beside the interface;
    cabling/fabric.svg: well-formed, a box per switch and railed node, a line per linked pair."""
    import csv
    import io
    import xml.etree.ElementTree as ET

    from aisite.render.cabling import cables_csv, fabric_svg

    plan = build_plan(parse_site(stack_data("h100pod")))
    rows = list(csv.DictReader(io.StringIO(cables_csv(plan))))
    assert len(rows) == len(plan.cables) == 640
    node = plan.by_role("gpu")[0]
    mine = [r for r in rows if r["device"] == node.name and r["kind"] == "rail"]
    assert [(r["port"], r["interface"], r["far_device"], r["far_port"]) for r in mine] == [
        (r.port, r.interface, r.leaf, r.leaf_port) for r in node.rails
    ]
    assert {r["speed_gbps"] for r in mine} == {"400"}
    svg = ET.fromstring(fabric_svg(plan))
    ns = "{http://www.w3.org/2000/svg}"
    boxes = [t.text for t in svg.iter(f"{ns}text")][:-1]
    assert sorted(boxes) == sorted(
        [s.name for s in plan.switches if s.role in ("leaf", "spine")] + [n.name for n in plan.nodes if n.rails]
    )
    pairs = {(c.a_device, c.b_device) for c in plan.cables if c.kind in ("rail", "fabric")}
    assert len(list(svg.iter(f"{ns}line"))) == len(pairs) == 32 * 8 + 8 * 4
    # Its racks' power budget (site.facility) places each DGX in a rack; nothing else is placed in one.
    placed = {n: r.name for r in plan.power_racks for n in r.nodes}
    assert {(r["device"], r["rack"]) for r in rows if r["device"] in placed} == set(placed.items())
    assert {r["rack"] for r in rows if r["device"] not in placed} == {""}
    # GB200 NVL72: a tray's cables name its rack.
    gb = build_plan(parse_site(stack_data("gb200")))
    racked = {r["device"]: r["rack"] for r in csv.DictReader(io.StringIO(cables_csv(gb))) if r["rack"]}
    assert racked and racked == {t: r.name for r in gb.racks for t in r.trays if t in racked}
    assert set(racked.values()) == {r.name for r in gb.racks}


def test_more_ports_than_cages_splits_every_cage() -> None:
    """128 x 400G on an SN5600 is each 800G cage split 2x400G (Cumulus Linux's breakout table for the SN5600):
    Cumulus and the lab's FRR name the ports swp1s0, swp1s1, SONiC by first lane (Ethernet0, Ethernet4; its YANG
    in test_sonic_yang), Onyx is refused until its breakout is rendered."""
    site = stack_data("h100pod")
    site["switches"]["leaves"]["ports"] = 128
    plan = build_plan(parse_site(site))
    leaf = plan.switches_by_role("leaf")[0]
    assert (leaf.breakout, leaf.cage_lanes, leaf.cages) == (2, 8, 64)
    assert leaf.host_subnets[0].ports[:3] == ("swp1s0", "swp1s1", "swp2s0")
    assert leaf.host_subnets[0].peers[0] == "dgx001:rail0 (OSFP4P2)"
    uplinks = [nb.interface for nb in leaf.neighbors]
    assert len(uplinks) == 32 and all(re.fullmatch(r"swp([1-9]|[1-5][0-9]|6[0-4])s[01]", u) for u in uplinks)
    spine = plan.switches_by_role("spine")[0]
    assert spine.breakout == 1 and spine.neighbors[0].interface == "swp1"
    site["switches"]["leaves"]["os"] = site["switches"]["spines"]["os"] = "onyx"
    site["switches"]["leaves"].pop("os_version")
    site["switches"]["spines"].pop("os_version")
    with pytest.raises(SiteError) as exc:
        parse_site(site)
    assert [str(p) for p in exc.value.problems] == [
        "site.switches.leaves.ports: 128 ports on 64 cages means splitting each SN5600 cage, and aisite renders no "
        "Onyx breakout yet: declare at most 64 (one 400G port a cage) or run Cumulus Linux, FRR or SONiC"
    ]


def test_cumulus_splits_each_cage_in_use(tmp_path: Path) -> None:
    """NVUE's `link breakout 2x` on every cage of a 128-port leaf (the split ports then carry the configuration);
    a leaf of one port a cage renders no breakout (Spectrum's firmware sets the speed itself)."""
    from tests.test_switch_configs import render_switches

    text = resolve_stack("h100pod").read_text().replace("name: h100pod\n", "name: split\n", 1)
    text = text.replace(
        'leaves: {count: 8, name_pattern: "leaf{n:02d}", os: cumulus, model: SN5600, ports: 64,',
        'leaves: {count: 8, name_pattern: "leaf{n:02d}", os: cumulus, model: SN5600, ports: 128,',
    )
    (tmp_path / "Pulumi.split.yaml").write_text(text)
    _, switches = render_switches(tmp_path / "Pulumi.split.yaml", tmp_path / "out")
    interfaces = yaml.safe_load((switches / "leaf01.nvue.yaml").read_text())[0]["set"]["interface"]
    assert all(interfaces[f"swp{c}"]["link"]["breakout"] == {"2x": {}} for c in range(1, 65))
    assert interfaces["swp1s0"]["description"] == "dgx001:rail0 (OSFP4P2)"
    spine = yaml.safe_load((switches / "spine01.nvue.yaml").read_text())[0]["set"]["interface"]
    assert not any("breakout" in i.get("link", {}) for i in spine.values())


def test_management_and_oob_switches_are_configured_from_the_plans_cables(tmp_path: Path) -> None:
    """Each cable ending on a configured access switch is one access port of its network's VLAN (management and
    storage on the management switches, BMCs and switch management on the out-of-band ones), each uplink a trunk;
    `generic` switches get nothing, and the rendered NVUE carries exactly that."""
    site = parse_site(stack_data("h100pod"))
    plan = build_plan(site)
    vlan = {"management": 10, "storage": 20, "bmc": 30, "switch-management": 30}
    for sw in plan.switches:
        if sw.role not in ("management", "oob"):
            assert sw.access_ports == () and sw.vlans == ()
            continue
        cables = [c for c in plan.cables if c.b_device == sw.name]
        access = [p for p in sw.access_ports if p.vlan]
        assert [(p.port, p.vlan) for p in access] == [(c.b_port, vlan[c.kind]) for c in cables]
        assert [p.port for p in sw.access_ports if not p.vlan] == (
            ["swp49", "swp50"] if sw.role == "management" else ["swp49"]
        )
        assert sw.vlans == ((10, 20) if sw.role == "management" else (30,))
        assert len({p.port for p in sw.access_ports}) == len(sw.access_ports)
    # Every BMC and every managed switch's eth0 lands on an out-of-band access port of VLAN 30.
    oob_ports = {(sw.name, p.port) for sw in plan.switches if sw.role == "oob" for p in sw.access_ports if p.vlan == 30}
    assert {(c.b_device, c.b_port) for c in plan.cables if c.kind in ("bmc", "switch-management")} == oob_ports

    generic = stack_data("h100pod")
    generic["switches"]["oob"] = {k: v for k, v in generic["switches"]["oob"].items() if k not in ("os", "uplinks")}
    g = build_plan(parse_site(generic))
    assert all(sw.access_ports == () for sw in g.switches if sw.role == "oob")

    r = run_cli("render", "h100pod", "--out", str(tmp_path), "--switch-configs")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = yaml.safe_load((tmp_path / "switches" / "mgmt01.nvue.yaml").read_text())[0]["set"]
    mgmt01 = next(sw for sw in plan.switches if sw.name == "mgmt01")
    assert set(doc["interface"]) == {p.port for p in mgmt01.access_ports}
    for p in mgmt01.access_ports:
        domain = doc["interface"][p.port]["bridge"]["domain"]["br_default"]
        assert domain == ({"access": p.vlan} if p.vlan else {})
        assert doc["interface"][p.port]["description"] == p.description
    assert set(doc["bridge"]["domain"]["br_default"]["vlan"]) == {"10", "20"}
    assert "router" not in doc and "qos" not in doc  # a VLAN bridge alone


def test_access_switches_aisite_cannot_configure_are_refused() -> None:
    site = stack_data("h100pod")
    site["switches"]["management"] |= {"os": "onyx"}
    site["switches"]["oob"] |= {"os_version": None, "uplinks": ["swp3", "swp49", "swp49"]}
    with pytest.raises(SiteError) as exc:
        parse_site(site)
    found = [str(p) for p in exc.value.problems]
    assert any(
        p.startswith("site.switches.management.os: onyx: aisite configures management switches on cumulus")
        for p in found
    )
    assert any(p.startswith("site.switches.oob.os_version: say which Cumulus Linux release") for p in found)
    assert any(p.startswith("site.switches.oob.uplinks[0]: swp3 is one of the 48 ports aisite cables") for p in found)
    assert "site.switches.oob.uplinks[2]: swp49 is named twice" in found
    same = stack_data("h100pod")
    same["switches"]["management"]["vlans"] = {"management": 40, "storage": 40}
    same["switches"]["oob"]["uplinks"] = []
    with pytest.raises(SiteError) as exc:
        parse_site(same)
    assert [str(p) for p in exc.value.problems] == [
        "site.switches.management.vlans.storage: 40: the management network's VLAN as well"
    ]
    from aisite.cautions import site_warnings

    fine = stack_data("h100pod")
    fine["switches"]["oob"]["uplinks"] = []
    s = parse_site(fine)
    assert any(
        str(w).startswith(
            "site.switches.oob.uplinks: none: aisite replaces these cumulus switches' whole configuration"
        )
        for w in site_warnings(s, build_plan(s))
    )


def test_access_switches_are_held_to_their_front_panel() -> None:
    """A catalogued management or out-of-band switch (SN2010: 18 x 25G node ports, swp19-22 QSFP28 uplinks; SN2201:
    48 x 1G, swp49-52): more node ports, a faster speed or an uplink that is not one of its uplink ports is refused."""
    site = stack_data("dc1")
    site["switches"]["management"] |= {"ports": 48, "uplinks": ["swp19", "swp49"]}
    site["switches"]["oob"] |= {"model": "SN2201", "speed_gbps": 10}
    with pytest.raises(SiteError) as exc:
        parse_site(site)
    assert sorted(str(p) for p in exc.value.problems) == [
        "site.switches.management.ports: 48: an SN2010 has 18 node ports",
        "site.switches.management.uplinks[0]: swp19 is one of the 48 ports aisite cables nodes and BMCs to (ports: "
        "48): an uplink is a port beyond them",
        "site.switches.management.uplinks[1]: swp49: an SN2010's uplink ports are swp19, swp20, swp21, swp22",
        "site.switches.oob.speed_gbps: 10: an SN2201's 48 node ports run at most 1 Gbps (swp49, swp50, swp51, "
        "swp52 are its uplinks)",
    ]


@pytest.mark.parametrize(("model", "speed", "most"), [("SN5610", 400, 128), ("SN5400", 200, 128), ("SN5400", 100, 256)])
def test_the_sn5000_family_is_held_to_its_manuals_port_table(model: str, speed: int, most: int) -> None:
    """The SN5000 hardware manual's Data Interfaces table: an SN5610 (SN5600 family) 64 x 800G, 128 at 400G; an
    SN5400 64 x 400G, 128 at 200G, 256 at 100G. One port more than the table allows is refused."""
    site = stack_data("h100pod")
    site["switches"]["leaves"] |= {"model": model, "speed_gbps": speed, "ports": most}
    site["switches"]["spines"] |= {"model": model, "speed_gbps": speed}
    leaf = build_plan(parse_site(site)).switches_by_role("leaf")[0]
    assert leaf.breakout == most // 64 and leaf.cage_lanes == 8
    site["switches"]["leaves"]["ports"] = most + 1
    with pytest.raises(SiteError) as exc:
        parse_site(site)
    assert any(f"site.switches.leaves.ports: {most + 1}: an {model}" in str(p) for p in exc.value.problems)


def test_every_rail_nic_is_set_to_ethernet_with_the_models_sr_iov() -> None:
    """ConnectX-7 ports start as InfiniBand: the plan sets each rail NIC's port to Ethernet at its device (function
    0; a second port is LINK_TYPE_P2), with the model's SR-IOV settings; a model with no NIC baseline, Ethernet
    alone; a rail whose PCI function is unknown, nothing."""
    site = stack_data("h100pod")
    site["gpu_nodes"][0]["firmware"] = {"nic": {"sriov": True, "num_vfs": 8}}
    node = build_plan(parse_site(site)).by_role("gpu")[0]
    assert [n.pci for n in node.nics] == sorted(r.pci for r in node.rails)
    assert {n.settings for n in node.nics} == {(("LINK_TYPE_P1", 2), ("NUM_OF_VFS", 8), ("SRIOV_EN", 1))}
    assert sorted(r for n in node.nics for r in n.rails) == sorted(r.interface for r in node.rails)

    model = SERVER_MODELS["dgx-h100"].compute_ports
    ports = [{"label": p.label} for p in model]
    ports[1] = {"label": model[1].label, "pci": model[0].pci[:-1] + "1"}  # a dual-port card's second port
    node = build_plan(parse_site(_dgx_site(ports))).by_role("gpu")[0]
    first = next(n for n in node.nics if n.pci == model[0].pci)
    assert first.settings == (("LINK_TYPE_P1", 2), ("LINK_TYPE_P2", 2)) and first.rails == ("rail0", "rail1")
    assert len(node.nics) == 7

    lab = build_plan(parse_site(stack_data("lab")))
    assert all(n.nics == () for n in lab.nodes)  # the generic model's rails have no PCI function

    site["gpu_nodes"][0]["firmware"] = {"nic": {"num_vfs": 8}}
    with pytest.raises(SiteError) as exc:
        parse_site(site)
    assert [str(p) for p in exc.value.problems] == [
        "site.gpu_nodes[0].firmware.nic: num_vfs needs sriov: true (the NIC offers no virtual function without it)"
    ]
