"""The Ceph pools module (aisite.site.ceph_pools) run by Ansible against a real Ceph 16.2 monitor on loopback:
pools, rules, profiles and the file system created from a plan's pools, converged again with nothing to do, a
changed plan changing only what differs, and what Ceph cannot change refused before anything changes."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aisite.loader import parse_site
from aisite.plan import build_plan
from aisite.plan.types import plain
from tests.adhoc import load_module, run_module
from tests.ceph_local import LocalCeph, ceph_cluster
from tests.test_ceph_plan import DESIGN, _site

pytestmark = pytest.mark.skipif(
    shutil.which("ceph-mon") is None, reason="ceph-mon is not installed (scripts/setup.sh installs it)"
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCeph]:
    with ceph_cluster(tmp_path_factory.mktemp("ceph")) as c:
        yield c


def _pool(name: str, **kw: Any) -> dict[str, Any]:
    base = {
        "name": name,
        "application": "cephfs",
        "kind": "replicated",
        "width": 3,
        "min_size": 2,
        "k": None,
        "m": None,
        "failure_domain": "osd",
        "device_class": "all",
        "pg_num": 8,
        "usable_gb": 1,
        "system": False,
    }
    return base | kw


def _read(c: LocalCeph, *args: str) -> Any:
    return json.loads(subprocess.run([*c.cmd, *args, "-f", "json"], capture_output=True, text=True, check=True).stdout)


def _run(c: LocalCeph, pools: list[dict[str, Any]], fs: dict[str, Any] | None = None, check: bool = False) -> Any:
    args = {"pools": pools, "filesystem": fs, "cluster": c.cmd[1:]}
    return run_module("aisite.site.ceph_pools", args, check)


def test_pools_converge_then_rest_and_changes_touch_only_what_differs(cluster: LocalCeph) -> None:
    pools = [
        _pool("meta", failure_domain="host"),
        _pool("data", pg_num=16),
        _pool("ec", kind="erasure", width=3, min_size=2, k=2, m=1),
        _pool("s3data", application="rgw", kind="erasure", width=3, min_size=2, k=2, m=1),
        _pool("device_health_metrics", application="mgr", pg_num=1, system=True),
    ]
    fs = {"name": "fs1", "metadata_pool": "meta", "data_pool": "data", "data_pools": ["ec"]}
    dry = _run(cluster, pools, fs, check=True)
    assert dry["changed"] and any(a.startswith("fs new fs1") for a in dry["actions"]), dry
    assert "fs1" not in json.dumps(_read(cluster, "fs", "ls")), "check mode created the file system"

    first = _run(cluster, pools, fs)
    assert not first.get("failed") and first["changed"], first
    detail = {p["pool_name"]: p for p in _read(cluster, "osd", "pool", "ls", "detail")}
    assert set(detail) == {"meta", "data", "ec", "s3data"}, "the manager's own pool is the manager's to make"
    assert detail["data"]["pg_num"] == 16 and detail["data"]["size"] == 3 and detail["data"]["min_size"] == 2
    assert detail["ec"]["erasure_code_profile"] == "aisite-ec" and detail["ec"]["size"] == 3
    assert "ec_overwrites" in detail["ec"]["flags_names"], "an EC CephFS data pool needs overwrites"
    assert "ec_overwrites" not in detail["s3data"]["flags_names"], "RGW writes whole objects: no overwrites asked"
    assert detail["meta"]["pg_autoscale_mode"] == "off", "the plan sizes the pools, not the autoscaler"
    assert list(detail["s3data"]["application_metadata"]) == ["rgw"]
    rules = {r["rule_id"]: r["rule_name"] for r in _read(cluster, "osd", "crush", "rule", "dump")}
    assert rules[detail["meta"]["crush_rule"]] == "aisite-host-all" and rules[detail["data"]["crush_rule"]] == (
        "aisite-osd-all"
    )
    profile = _read(cluster, "osd", "erasure-code-profile", "get", "aisite-ec")
    assert (profile["k"], profile["m"], profile["crush-failure-domain"]) == ("2", "1", "osd")
    assert _read(cluster, "fs", "ls") == [
        {
            "name": "fs1",
            "metadata_pool": "meta",
            "metadata_pool_id": detail["meta"]["pool_id"],
            "data_pool_ids": [detail["data"]["pool_id"], detail["ec"]["pool_id"]],
            "data_pools": ["data", "ec"],
        }
    ]

    again = _run(cluster, pools, fs)
    assert again["changed"] is False and again["actions"] == [] and again["foreign"] == [], again

    for made in ("someone-elses", "device_health_metrics"):  # the second as a manager makes it: Ceph's defaults
        subprocess.run([*cluster.cmd, "osd", "pool", "create", made, "8"], check=True, capture_output=True)
    pools[1] = _pool("data", pg_num=16, min_size=3)
    changed = _run(cluster, pools, fs)
    assert changed["actions"] == [
        "osd pool set data min_size 3",
        "osd pool set device_health_metrics crush_rule aisite-osd-all",
        "osd pool set device_health_metrics pg_autoscale_mode off",
        "osd pool set device_health_metrics pg_num 1",
    ], changed
    assert changed["foreign"] == ["someone-elses"], "a pool aisite did not plan is reported, never removed"

    no_class = _run(cluster, [*pools, _pool("fast", device_class="nvme")], fs)
    assert no_class.get("failed") and "device class nvme does not exist" in no_class["msg"], "Ceph's word, passed on"

    recoded = [*pools[:2], _pool("ec", kind="erasure", width=5, min_size=4, k=4, m=1), *pools[3:]]
    refused = _run(cluster, recoded, fs)
    assert refused.get("failed") and "'ec': erasure coding" in refused["msg"] and refused["actions"] == [], refused
    # A device class set on the pool's profile by hand (--force rewrites the record): seen, not overlooked.
    profile = ["k=2", "m=1", "crush-failure-domain=osd", "crush-device-class=ssd", "--force"]
    subprocess.run([*cluster.cmd, "osd", "erasure-code-profile", "set", "aisite-ec", *profile], check=True)
    classed = _run(cluster, pools, fs)
    assert classed.get("failed") and "'crush-device-class': 'ssd'" in classed["msg"], classed
    flipped = [*pools[:2], _pool("ec"), *pools[3:]]
    refused = _run(cluster, flipped, fs)
    assert refused.get("failed") and "erasure-coded in the cluster, replicated in the plan" in refused["msg"]


@pytest.mark.parametrize(
    ("pools", "fs", "message"),
    [
        ([_pool("a b")], None, "is not a Ceph pool name"),
        ([_pool("x", kind="striped")], None, "kind must be one of"),
        ([_pool("x", kind="erasure")], None, "k must be an integer"),
        ([_pool("x", pg_num=True)], None, "pg_num must be an integer"),
        ([_pool("x")], {"name": "f", "metadata_pool": "x", "data_pool": "y"}, "'y' is not one of the pools"),
    ],
)
def test_a_plan_outside_the_narrow_shapes_is_refused_before_ceph_is_asked(
    tmp_path: Path, pools: list[dict[str, Any]], fs: dict[str, Any] | None, message: str
) -> None:
    args = {"pools": pools, "filesystem": fs, "ceph": str(tmp_path / "no-ceph")}
    r = run_module("aisite.site.ceph_pools", args)
    assert r.get("failed") and message in r["msg"], r


def test_the_plans_pools_as_the_inventory_carries_them_pass_the_modules_checks() -> None:
    """The plan's pools and the module's narrowing are written apart: every field the plan gives must pass."""
    mod = load_module("ceph_pools")
    plan = build_plan(parse_site(_site(DESIGN)))
    assert plan.ceph is not None
    checked = [mod.check_pool(p) for p in plain(plan.ceph.pools)]
    assert {p["name"] for p in checked} >= {"cephfs-meta", "datasets-ec", "rgw-ec", ".rgw.root"}
    assert all(p["pg_num"] >= 8 for p in checked if p["application"] != "mgr")
