"""Synthetic sites of any size, for property tests and benchmarks (never used to deploy anything)."""

from __future__ import annotations

import math
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
