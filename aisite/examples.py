"""Synthetic sites of any size, for property tests and benchmarks (never used to deploy anything)."""

from __future__ import annotations

import math
from ipaddress import IPv4Address, IPv4Network
from typing import Any


def dgx_h100_site(nodes: int, name: str = "synthetic", scalable_unit: int = 32) -> dict[str, Any]:
    """A rail-optimised DGX H100 site of `nodes` nodes (8 GPUs, 8 rails each), as a stack's `aisite:site` mapping."""
    sus = math.ceil(nodes / scalable_unit)
    leaves = sus * 8
    # 64-port leaves: half down to the nodes, half up; few spines with many uplinks for small sites.
    spines, uplinks = (4, 8) if leaves <= 16 else (32, 1)
    spine_ports = max(64, leaves * uplinks)
    return {
        "name": name,
        "domain": f"{name}.example.org",
        "secrets": {"bmc": {"username": "admin", "password_from": {"env": "AISITE_BENCH_BMC"}}},
        "networks": {
            "management": "10.0.0.0/20",
            "oob": "10.0.16.0/20",
            "storage": "10.0.32.0/20",
            "loopbacks": "10.0.48.0/24",
            "p2p": "10.0.64.0/19",
            "rails": [f"10.{100 + r}.0.0/16" for r in range(8)],
            "pods": "10.128.0.0/12",
            "services": "10.96.0.0/16",
        },
        "oob": {"protocol": "redfish", "credentials": "bmc"},
        "control_plane": {"count": 3, "vip": "10.0.0.10"},
        "gpu_nodes": [{"name": "h100", "model": "dgx-h100", "count": nodes, "name_pattern": "dgx{n:04d}"}],
        "storage_nodes": {"count": 4, "exports": [{"name": "datasets", "path": "/export/datasets"}]},
        "switches": {
            "leaves": {
                "count": leaves,
                "name_pattern": "leaf{n:03d}",
                "os": "cumulus",
                "os_version": "5.15",
                "ports": 64,
                "speed_gbps": 400,
            },
            "spines": {
                "count": spines,
                "name_pattern": "spine{n:02d}",
                "os": "cumulus",
                "os_version": "5.15",
                "ports": spine_ports,
                "speed_gbps": 400,
            },
        },
        "fabric": {"scalable_unit": scalable_unit, "uplinks_per_spine": uplinks},
        "kubernetes": {"tenants": [{"name": "all", "gpu_quota": nodes * 8, "groups": ["users"]}]},
    }


class _Blocks:
    """Hands out aligned IPv4 blocks in order from one range: each network of a generated site in turn."""

    def __init__(self, start: str) -> None:
        self.next = int(IPv4Address(start))

    def take(self, addresses: int) -> str:
        prefix = 32 - max(2, math.ceil(math.log2(addresses)))
        size = 1 << (32 - prefix)
        base = -(-self.next // size) * size  # aligned to its own size
        self.next = base + size
        return str(IPv4Network((base, prefix)))


def scale_site(gpus: int, tiers: int = 3, name: str = "") -> dict[str, Any]:
    """A DGX H100 site of `gpus` GPUs on 64-port 400G switches, with everything a real site of that size needs:
    networks sized to their hosts, enough management and out-of-band switches, a tenant holding every GPU.

    tiers=3: pods of 4 scalable units (32 leaves, 1,024 GPUs) under 32 spines each, 1:1 at every tier; the
    spines' uplinks go to 32 planes of super-spines (spine i of every pod to plane i), as a textbook fat tree of
    64-port switches, which ends at 64 pods (65,536 GPUs). tiers=2: 32 spines of one port per leaf (they cannot
    be real switches past 64 leaves: the shape a two-tier plan forced on large sites)."""
    nodes = -(-gpus // 8)
    su = 32
    sus = -(-nodes // su)
    leaves = sus * 8
    name = name or f"scale{gpus}"
    fabric: dict[str, Any] = {"scalable_unit": su, "uplinks_per_spine": 1, "asn_base": 4200000000}
    switches: dict[str, Any] = {
        "leaves": _fabric_group(leaves, "leaf{n:04d}", 64),
    }
    if tiers == 3:
        pods = -(-sus // 4)
        per_plane_links = min(16, 64 // pods)  # links from a spine to each super-spine of its plane
        per_plane = 32 // per_plane_links
        switches["spines"] = _fabric_group(pods * 32, "spine{n:04d}", 64)
        switches["super_spines"] = _fabric_group(32 * per_plane, "super{n:04d}", 64)
        fabric |= {"pod_size": 4, "uplinks_per_super_spine": per_plane_links, "super_spine_planes": 32}
        fabric_switches = leaves + pods * 32 + 32 * per_plane
        links = leaves * 32 * 2
    else:
        switches["spines"] = _fabric_group(32, "spine{n:02d}", max(64, leaves))
        fabric_switches = leaves + 32
        links = leaves * 32
    storage = max(4, nodes // 128)
    hosts = 3 + nodes + storage
    mgmt_cables = hosts + nodes + storage  # management and storage ports
    mgmt_switches = -(-mgmt_cables // 48)
    oob_cables = hosts + fabric_switches + mgmt_switches
    oob_switches = -(-oob_cables // 48)
    blocks = _Blocks("10.0.0.0")
    networks = {
        "management": blocks.take(hosts + 3),
        "oob": blocks.take(oob_cables + oob_switches + 3),
        "storage": blocks.take(nodes + storage + 3),
        "loopbacks": blocks.take(fabric_switches + 3),
        "p2p": blocks.take(2 * links),
        "rails": [f"10.{100 + r}.0.0/16" for r in range(8)],
        "pods": "100.64.0.0/10",
        "services": "10.96.0.0/16",
    }
    vip = str(IPv4Network(networks["management"]).network_address + 2)
    return {
        "name": name,
        "domain": f"{name}.example.org",
        "secrets": {"bmc": {"username": "admin", "password_from": {"env": "AISITE_BENCH_BMC"}}},
        "networks": networks,
        "oob": {"protocol": "redfish", "credentials": "bmc"},
        "control_plane": {"count": 3, "vip": vip},
        "gpu_nodes": [{"name": "h100", "model": "dgx-h100", "count": nodes, "name_pattern": "dgx{n:05d}"}],
        "storage_nodes": {"count": storage, "exports": [{"name": "datasets", "path": "/export/datasets"}]},
        "switches": switches
        | {
            "management": {"count": mgmt_switches, "name_pattern": "mgmt{n:04d}", "ports": 48, "speed_gbps": 25},
            "oob": {"count": oob_switches, "name_pattern": "oob{n:04d}", "ports": 48, "speed_gbps": 1},
        },
        "fabric": fabric,
        "kubernetes": {"tenants": [{"name": "all", "gpu_quota": nodes * 8, "groups": ["users"]}]},
    }


def _fabric_group(count: int, pattern: str, ports: int) -> dict[str, Any]:
    return {
        "count": count,
        "name_pattern": pattern,
        "os": "cumulus",
        "os_version": "5.15",
        "model": "SN5600",
        "ports": ports,
        "speed_gbps": 400,
    }
