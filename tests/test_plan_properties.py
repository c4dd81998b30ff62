"""Properties of the plan over generated sites: no address twice, every cable with two distinct ends and no
port used twice, ports within each switch, and the same site always giving the same plan."""

from __future__ import annotations

import copy
import json
import re
from ipaddress import IPv4Address, IPv4Network, ip_interface
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aisite.catalog import CUDA_REPO_ARCH, GPU_TYPES, OS_RELEASES, SERVER_MODELS
from aisite.loader import parse_site
from aisite.plan import Plan, build_plan, fabric_layout

MODELS = [*SERVER_MODELS, "generic"]


@st.composite
def gpu_group(draw: st.DrawFn, index: int) -> dict[str, Any]:
    """A group of any model: x86 and Grace groups share a site, each on an OS NVIDIA's repository serves for it."""
    model = draw(st.sampled_from(MODELS))
    group: dict[str, Any] = {
        "name": f"g{index}",
        "model": model,
        "count": draw(st.integers(0, 24)),
        "name_pattern": f"g{index}n{{n:03d}}",
    }
    arm = model in SERVER_MODELS and SERVER_MODELS[model].cpu_arch == "arm64"
    if arm or draw(st.booleans()):  # Debian has no Arm packages of NVIDIA's: Grace trays are adopted on Ubuntu
        group["install"] = {"method": "adopt", "os": draw(st.sampled_from(["ubuntu-24.04", "dgx-os-7"]))}
    full = SERVER_MODELS[model].rack_trays if model in SERVER_MODELS else 0
    if full:  # a rack-scale model: whole racks, the rest in a partial one (its trays declared)
        count = group["count"]
        group["racks"] = [
            {"name": f"g{index}r{r}", "trays": min(full, count - r * full)} for r in range(-(-count // full))
        ]
    if model == "generic":
        gpu_type = draw(st.sampled_from(sorted(t for t in GPU_TYPES if t != "v100")))
        group |= {"gpu_type": gpu_type, "gpus": draw(st.integers(1, 8)), "nics": draw(st.integers(0, 8))}
    nics = group.get("nics", SERVER_MODELS[model].compute_nics if model in SERVER_MODELS else 0)
    if nics and draw(st.booleans()):
        group["rails"] = draw(st.integers(1, nics))
    return group


@st.composite
def sites(draw: st.DrawFn) -> dict[str, Any]:
    groups = [draw(gpu_group(i)) for i in range(draw(st.integers(1, 3)))]
    su = draw(st.integers(1, 16))
    cp = draw(st.sampled_from([1, 3, 5]))
    storage = draw(st.integers(0, 4))
    spines = draw(st.integers(0, 3))
    uplinks = draw(st.integers(1, 2))
    with_access = draw(st.booleans())
    leaf_os = draw(st.sampled_from(["frr", "sonic", "onyx", "cumulus"]))
    # Spines peer the way the leaves do: unnumbered (frr, cumulus) or over /31s (sonic, onyx).
    spine_os = draw(st.sampled_from(["frr", "cumulus"] if leaf_os in ("frr", "cumulus") else ["sonic", "onyx"]))
    data: dict[str, Any] = {
        "name": "prop",
        "domain": "prop.example.org",
        "secrets": {"b": {"username": "u", "password_from": {"env": "X"}}},
        "networks": {
            "oob": "10.0.0.0/22",
            "management": "10.0.4.0/22",
            "storage": "10.0.8.0/22",
            "loopbacks": "10.0.24.0/21",
            "p2p": "10.0.64.0/18",
            "rails": [f"10.{10 + r}.0.0/20" for r in range(8)],
            "pods": "10.128.0.0/16",
            "services": "10.129.0.0/16",
        },
        "oob": {"credentials": "b", "protocol": draw(st.sampled_from(["redfish", "ipmi"]))},
        "control_plane": {"count": cp, "vip": "10.0.4.10"},
        "gpu_nodes": groups,
        "storage_nodes": {"count": storage},
        "switches": {
            "leaves": {
                "count": 1,
                "name_pattern": "leaf{n:03d}",
                "os": leaf_os,
                "os_version": "5.15",
                "ports": 1024,
                "speed_gbps": 400,
            },
            "spines": {
                "count": spines,
                "name_pattern": "spine{n:02d}",
                "os": spine_os,
                "os_version": "5.15",
                "ports": 1024,
                "speed_gbps": 400,
            },
        },
        # BFD off where SONiC is drawn: bgpcfgd cannot enable it (the checks refuse it).
        "fabric": {
            "scalable_unit": su,
            "uplinks_per_spine": uplinks,
            "bfd": "sonic" not in (leaf_os, spine_os),
            "oversubscription": {"leaves": 64},
        },
    }
    if with_access:
        data["switches"]["management"] = {"count": 4, "name_pattern": "mgmt{n}", "ports": 48, "speed_gbps": 25}
        data["switches"]["oob"] = {"count": 16, "name_pattern": "oobsw{n}", "ports": 48, "speed_gbps": 1}
    # Explicit addresses on some nodes: pools must step around them.
    first = groups[0]
    explicit = draw(st.lists(st.integers(20, 200), unique=True, max_size=min(first["count"], 5)))
    first["nodes"] = [{"bmc": {"address": f"10.0.0.{o}"}, "management": {"address": f"10.0.5.{o}"}} for o in explicit]
    # Size the leaf tier to what the layout needs, so every generated site is valid.
    layout = fabric_layout(parse_site_shape(data))
    data["switches"]["leaves"]["count"] = max(layout.leaves_needed, 1)
    if layout.leaves_needed > 4 and not spines:
        data["switches"]["spines"]["count"] = 2  # a spineless mesh only makes sense for a handful of leaves
    if layout.leaves_needed * uplinks > 1024:
        data["fabric"]["uplinks_per_spine"] = 1  # keep within the spines' 1,024 ports
    if layout.leaves_needed and draw(st.booleans()):
        _three_tiers(draw, data, layout.leaves_needed // layout.scalable_units, spine_os)
    return data


def _three_tiers(draw: st.DrawFn, data: dict[str, Any], leaves_per_su: int, os: str) -> None:
    """Make a drawn site three-tier: pods of 1-3 scalable units, 1-2 planes of 1-2 super-spines, 1-2 spines per
    plane in each pod."""
    leaves = data["switches"]["leaves"]["count"]
    pod_size = draw(st.integers(1, 3))
    pods = -(-leaves // (pod_size * leaves_per_su))
    planes = draw(st.integers(1, 2))
    per_pod = planes * draw(st.integers(1, 2))
    data["switches"]["spines"]["count"] = pods * per_pod
    data["switches"]["super_spines"] = {
        "count": planes * draw(st.integers(1, 2)),
        "name_pattern": "super{n:02d}",
        "os": os,
        "os_version": "5.15",
        "ports": 1024,
        "speed_gbps": 400,
    }
    if "oob" in data["switches"]:
        data["switches"]["oob"]["count"] = 64  # room for every spine's and super-spine's management port
    data["fabric"] |= {
        "pod_size": pod_size,
        "super_spine_planes": planes,
        "uplinks_per_super_spine": draw(st.integers(1, 2)),
        # Drawn sites are not sized for bandwidth, only for ports and addresses.
        "oversubscription": {"leaves": 64, "spines": 64},
    }


def parse_site_shape(data: dict[str, Any]) -> Any:
    from aisite.model import Site

    return Site.model_validate(data)


def addresses(plan: Plan) -> list[tuple[str, IPv4Address]]:
    out: list[tuple[str, IPv4Address]] = [("vip", IPv4Address(plan.kubernetes.api_vip))]
    for n in plan.nodes:
        out.append((f"{n.name}.bmc", IPv4Address(n.bmc.address)))
        out.append((f"{n.name}.mgmt", IPv4Address(n.management.address)))
        if n.storage:
            out.append((f"{n.name}.storage", IPv4Address(n.storage.address)))
        out.extend((f"{n.name}.{r.interface}", IPv4Address(r.address)) for r in n.rails)
    for s in plan.switches:
        out.append((f"{s.name}.mgmt", IPv4Address(s.management_address)))
        if s.loopback:
            out.append((f"{s.name}.lo", ip_interface(s.loopback).ip))
        out.extend((f"{s.name}.{nb.interface}", ip_interface(nb.local_address).ip) for nb in s.neighbors)
        out.extend((f"{s.name}.gw{h.rail}", IPv4Address(h.gateway)) for h in s.host_subnets)
    return out


PROPS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(sites())
def test_each_gpu_node_installs_from_its_own_os_and_cpus_directory(data: dict[str, Any]) -> None:
    """x86 and Grace groups in one site: each node's NVIDIA repository is its OS's and its CPUs' directory."""
    site = parse_site(data)
    plan = build_plan(site)
    models = {g.name: g.model for g in site.gpu_nodes}
    for n in plan.nodes:
        if n.gpu is None:
            continue
        model = SERVER_MODELS.get(models[n.group])
        assert n.os.arch == (model.cpu_arch if model else "amd64")
        distro = OS_RELEASES[n.os.name].cuda_distro
        assert n.gpu.repository == f"{site.nvidia.repository}{distro}/{CUDA_REPO_ARCH[n.os.arch]}/"


@PROPS
@given(sites())
def test_no_address_is_assigned_twice(data: dict[str, Any]) -> None:
    plan = build_plan(parse_site(data))
    seen: dict[IPv4Address, str] = {}
    for owner, addr in addresses(plan):
        assert addr not in seen, f"{addr} given to {owner} and {seen[addr]}"
        seen[addr] = owner


@PROPS
@given(sites())
def test_addresses_lie_in_their_networks(data: dict[str, Any]) -> None:
    site = parse_site(data)
    plan = build_plan(site)
    nets = site.networks
    for n in plan.nodes:
        assert IPv4Address(n.bmc.address) in nets.oob
        assert IPv4Address(n.management.address) in nets.management
        for r in n.rails:
            block = IPv4Network(r.subnet)
            assert IPv4Address(r.address) in block and block.subnet_of(nets.rails[r.index])
            assert IPv4Address(r.gateway) in block and r.address != r.gateway


@PROPS
@given(sites())
def test_every_cable_has_two_distinct_ends_and_no_port_is_used_twice(data: dict[str, Any]) -> None:
    plan = build_plan(parse_site(data))
    used: set[tuple[str, str]] = set()
    ports = {s.name: s.ports for s in plan.switches}
    for c in plan.cables:
        a, b = (c.a_device, c.a_port), (c.b_device, c.b_port)
        assert a != b and c.a_device != c.b_device
        for end in (a, b):
            assert end not in used, f"{end} cabled twice"
            used.add(end)
            if end[0] in ports:
                number = int(re.findall(r"\d+", end[1])[-1])
                # SONiC names ports by first lane: Ethernet0, 4, 8, ... (8 lanes at 400G).
                index = number // 8 if end[1].startswith("Ethernet") else number - 1
                assert index < ports[end[0]], f"{end} beyond {ports[end[0]]} ports"


@PROPS
@given(sites())
def test_rail_n_of_each_scalable_unit_lands_on_one_leaf(data: dict[str, Any]) -> None:
    plan = build_plan(parse_site(data))
    leaf_of: dict[tuple[int | None, int], str] = {}
    for n in plan.nodes:
        for r in n.rails:
            key = (n.scalable_unit, r.index)
            assert leaf_of.setdefault(key, r.leaf) == r.leaf


@PROPS
@given(sites())
def test_bgp_sessions_are_symmetric(data: dict[str, Any]) -> None:
    plan = build_plan(parse_site(data))
    asn = {s.name: s.asn for s in plan.switches}
    sessions = {(s.name, nb.interface, nb.peer, nb.peer_interface) for s in plan.switches for nb in s.neighbors}
    for s in plan.switches:
        for nb in s.neighbors:
            assert (nb.peer, nb.peer_interface, s.name, nb.interface) in sessions
            assert nb.peer_asn == asn[nb.peer]
            assert nb.peer_asn != s.asn  # eBGP: every session crosses an ASN boundary


@PROPS
@given(sites())
def test_the_same_site_always_gives_the_same_plan(data: dict[str, Any]) -> None:
    first = build_plan(parse_site(data))
    again = build_plan(parse_site(json.loads(json.dumps(copy.deepcopy(data)))))
    assert first == again
    assert json.dumps(first.to_dict()) == json.dumps(again.to_dict())


@PROPS
@given(sites())
def test_each_tier_peers_only_up_and_down_with_valley_free_asns(data: dict[str, Any]) -> None:
    """Leaves peer with spines (their pod's alone in three tiers), spines with leaves and super-spines, super-spines
    with spines; a leaf has an ASN of its own, the spines of a pod share one, the super-spines share one."""
    site = parse_site(data)
    plan = build_plan(site)
    layout = fabric_layout(site)
    role = {s.name: s.role for s in plan.switches}
    pod = {s.name: i // layout.leaves_per_pod for i, s in enumerate(plan.switches_by_role("leaf"))}
    per_pod = layout.spines_per_pod or 1
    pod |= {s.name: i // per_pod for i, s in enumerate(plan.switches_by_role("spine"))}
    above = {"leaf": "spine", "spine": "super-spine"}
    for s in plan.switches_by_role("leaf") + plan.switches_by_role("spine") + plan.switches_by_role("super-spine"):
        peers = [nb.peer for nb in s.neighbors]
        for peer in peers:
            if layout.spines:
                assert role[peer] in (above.get(s.role), {v: k for k, v in above.items()}.get(s.role)), (s.name, peer)
            if layout.three_tier and {s.role, role[peer]} == {"leaf", "spine"}:
                assert pod[s.name] == pod[peer], f"{s.name} (pod {pod[s.name]}) peers with {peer} (pod {pod[peer]})"
        if s.role == "leaf" and layout.spines:
            # ECMP up: every spine of its pod, uplinks_per_spine times.
            assert len(peers) == per_pod * site.fabric.uplinks_per_spine and len(set(peers)) == per_pod
        if s.role == "spine" and layout.three_tier:
            ups = [p for p in peers if role[p] == "super-spine"]
            assert len(ups) == layout.spine_uplinks and len(set(ups)) == layout.super_spines_per_plane
    asns: dict[str, set[int]] = {}
    for s in plan.switches:
        if s.asn is not None:
            asns.setdefault(s.role, set()).add(s.asn)
    assert len(asns.get("leaf", ())) == len(plan.switches_by_role("leaf"))  # one each
    assert len(asns.get("super-spine", set())) <= 1
    if layout.three_tier:
        assert len(asns["spine"]) == layout.pods
        assert not asns["spine"] & asns["leaf"] and not asns["super-spine"] & (asns["spine"] | asns["leaf"])


@given(sites(), st.randoms(use_true_random=False))
def test_rails_carry_the_models_nics_and_a_port_permutation_only_reorders_them(data: dict[str, Any], rnd: Any) -> None:
    """A documented model's rail N is its port N (the catalog's order, nearest GPU N); a site's port list that
    permutes the model's ports gives each rail the NIC it names and changes nothing else of the rails."""
    plan = build_plan(parse_site(data))
    for n in plan.nodes:
        ports = SERVER_MODELS[n.model].compute_ports if n.model in SERVER_MODELS else ()
        for r in n.rails:
            want = ports[r.index] if r.index < len(ports) else None
            assert (r.port, r.rdma, r.pci) == ((want.label, want.rdma, want.pci) if want else ("", "", ""))
        assert len({r.pci for r in n.rails if r.pci}) == len([r for r in n.rails if r.pci])
    shuffled = copy.deepcopy(data)
    for g in shuffled["gpu_nodes"]:
        ports = SERVER_MODELS[g["model"]].compute_ports if g["model"] in SERVER_MODELS else ()
        if ports:
            labels = [p.label for p in ports]
            rnd.shuffle(labels)
            g["ports"] = [{"label": label} for label in labels]
    again = build_plan(parse_site(shuffled))
    by_label = {p.label: p for m in SERVER_MODELS.values() for p in m.compute_ports}
    for a, b in zip(plan.nodes, again.nodes, strict=True):
        assert [(r.address, r.leaf, r.leaf_port) for r in a.rails] == [
            (r.address, r.leaf, r.leaf_port) for r in b.rails
        ]
        for r in b.rails:
            if r.port:
                assert (r.rdma, r.pci) == (by_label[r.port].rdma, by_label[r.port].pci)


@PROPS
@given(sites(), st.data())
def test_no_planned_address_is_one_the_site_reserves(data: dict[str, Any], draw: st.DataObject) -> None:
    # Servers the site names inside the pooled networks, where the pools would otherwise hand out next.
    low = st.integers(2, 19)
    data["dns_servers"] = [f"10.0.4.{draw.draw(low)}", f"10.0.8.{draw.draw(low)}"]
    data["ntp_servers"] = [f"10.0.0.{draw.draw(low)}", f"10.0.24.{draw.draw(low)}"]
    plan = build_plan(parse_site(data))
    reserved = {IPv4Address(r.address): r.by for r in plan.reserved}
    for server in (*data["dns_servers"], *data["ntp_servers"]):
        assert IPv4Address(server) in reserved
    for net in ("management", "oob", "storage", "loopbacks"):
        assert reserved[IPv4Network(getattr(plan.networks, net)).network_address + 1].startswith("gateway")
    for owner, addr in addresses(plan):
        if owner != "vip" and ".gw" not in owner:
            assert addr not in reserved, f"{owner} was handed {addr}, reserved by {reserved[addr]}"
