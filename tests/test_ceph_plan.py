"""The Ceph cluster in the model and the plan (aisite.plan.ceph): daemons placed, OSDs per disk, pools sized in
placement groups with their margins and usable capacity, and every problem of a design said at once."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from aisite.cautions import site_warnings
from aisite.checks.ceph import ceph_problems
from aisite.errors import SiteError
from aisite.loader import parse_site
from aisite.plan import build_plan
from aisite.plan.ceph import MAX_PG_PER_OSD, MIN_PG, RGW_POOLS
from aisite.plan.types import plain
from tests.adhoc import load_module
from tests.ceph_local import LocalCeph, ceph_cluster
from tests.conftest import run_cli, stack_data

DESIGN: dict[str, Any] = {
    "pools": [
        {"name": "cephfs-meta", "application": "cephfs", "device_class": "nvme", "share": 5},
        {"name": "cephfs-data", "application": "cephfs", "device_class": "nvme", "share": 20},
        {
            "name": "datasets-ec",
            "application": "cephfs",
            "kind": "erasure",
            "k": 2,
            "m": 1,
            "device_class": "hdd",
            "share": 60,
        },
        {"name": "rgw-hot", "application": "rgw", "device_class": "nvme", "share": 30},
        {"name": "rgw-ec", "application": "rgw", "kind": "erasure", "k": 2, "m": 1, "device_class": "hdd", "share": 30},
    ],
    "filesystem": {"metadata_pool": "cephfs-meta", "data_pool": "cephfs-data", "layouts": {"/datasets": "datasets-ec"}},
    "s3": {
        "storage_classes": {"STANDARD": "rgw-hot", "STANDARD_IA": "rgw-ec"},
        "lifecycle": [{"prefix": "ingest/", "days": 30, "storage_class": "STANDARD_IA"}],
    },
}


def _site(
    ceph: dict[str, Any], count: int = 3, disks: list[dict[str, Any]] | None = None, stack: str = "lab"
) -> dict[str, Any]:
    site = stack_data(stack)
    site["storage_nodes"] |= {
        "count": count,
        "disks": disks
        if disks is not None
        else [
            {"tier": "hdd", "size_gb": 8000, "count": 4},
            {"tier": "nvme", "size_gb": 3840, "count": 2},
        ],
        "ceph": ceph,
    }
    return site


def test_three_storage_nodes_plan_daemons_osds_and_pools_by_cephs_own_rules() -> None:
    site = parse_site(_site(copy.deepcopy(DESIGN)))
    plan = build_plan(site)
    c = plan.ceph
    assert c is not None and c.release == "16.2"
    assert c.monitors == ("stor01", "stor02", "stor03") and c.managers == ("stor01", "stor02")
    # Monitors on the storage network (the storage nodes' storage ports); the cluster's id the same every run.
    addresses = {n.name: n.storage.address for n in plan.by_role("storage") if n.storage}
    assert c.mon_addresses == tuple((m, addresses[m]) for m in c.monitors)
    assert c.public_networks == (plan.networks.storage,)
    assert c.fsid == str(uuid.uuid5(uuid.NAMESPACE_DNS, "ceph.lab.lab.aisite.internal")) == build_plan(site).ceph.fsid  # type: ignore[union-attr]
    assert c.mds == ("stor01", "stor02") and c.rgw == ("stor01", "stor02", "stor03")
    assert len(c.osds) == 18 and [o.id for o in c.osds] == list(range(18))
    assert [(o.host, o.device_class) for o in c.osds[:6]] == [("stor01", "hdd")] * 4 + [("stor01", "nvme")] * 2
    assert c.raw_gb == {"hdd": 96_000, "nvme": 23_040}
    pools = {p.name: p for p in c.pools}
    # PGs: 100 per OSD x OSDs of the class x share / width, to the nearest power of two (at least 8).
    assert {n: pools[n].pg_num for n in ("datasets-ec", "rgw-ec", "cephfs-meta", "cephfs-data", "rgw-hot")} == {
        "datasets-ec": 256,  # 100 x 12 x 0.6 / 3 = 240
        "rgw-ec": 128,  # 120
        "cephfs-meta": 8,  # 10
        "cephfs-data": 32,  # 40
        "rgw-hot": 64,  # 60
    }
    # min_size: k + min(1, m - 1) for EC (2+1: 2, no margin beyond one failure), size - size/2 replicated.
    assert (pools["datasets-ec"].min_size, pools["datasets-ec"].margin) == (2, 1)
    assert (pools["rgw-hot"].width, pools["rgw-hot"].min_size) == (3, 2)
    assert pools["datasets-ec"].usable_gb == 38_400 and pools["cephfs-data"].usable_gb == 1_536
    # RGW's own pools and the manager's are planned small, and counted per OSD.
    assert all(pools[n].system and pools[n].pg_num == MIN_PG for n in RGW_POOLS)
    assert max(c.pgs_per_osd.values()) <= MAX_PG_PER_OSD
    # Every identity is one the role's module writes (it refuses any other before running a command).
    auth = load_module("ceph_auth")
    names = [i.name for i in c.identities]
    assert len(names) == len(set(names)) and auth.wanted([plain(i) for i in c.identities])
    assert c.fs_layouts == (("/datasets", "datasets-ec"),) and c.s3_lifecycle == (("ingest/", 30, "STANDARD_IA"),)
    # The EC pools with m = 1 are warned of (valid, but no coding chunk to spare while a node is down).
    warned = [str(w) for w in site_warnings(site, plan) if "ceph" in w.path]
    assert warned == [
        "site.storage_nodes.ceph: the hosts layer installs this cluster from Debian's packages (16.2 only: no "
        "upstream repository yet) with each OSD on a file, not a disk; it makes the clients ceph-csi and the tenants "
        "use, but does not copy their keys into Secrets yet: volumes will not bind until you make those Secrets",
        "site.storage_nodes.ceph.pools[2]: datasets-ec: erasure 2+1 has min_size 2 = k: while one host is down it "
        "takes writes with no coding chunk to spare (m >= 2 keeps one)",
        "site.storage_nodes.ceph.pools[4]: rgw-ec: erasure 2+1 has min_size 2 = k: while one host is down it takes "
        "writes with no coding chunk to spare (m >= 2 keeps one)",
    ]
    # Monitors on the control plane instead (h100pod's three nodes), OSDs as failure domains on one storage node.
    one = stack_data("h100pod")
    one["storage_nodes"] |= {"count": 1, "ceph": copy.deepcopy(DESIGN) | {"monitors": "control-plane"}}
    one["storage_nodes"]["disks"] = [
        {"tier": "hdd", "size_gb": 8000, "count": 4},
        {"tier": "nvme", "size_gb": 3840, "count": 3},
    ]
    for pool in one["storage_nodes"]["ceph"]["pools"]:
        pool["failure_domain"] = "osd"
    h100 = build_plan(parse_site(one))
    small = h100.ceph
    assert small is not None and small.monitors == ("cp01", "cp02", "cp03") and small.rgw == ("stor01",)
    # The control plane has no storage port: its monitors are on the management network, which Ceph then serves too.
    assert [a for _, a in small.mon_addresses] == [n.management.address for n in h100.by_role("control-plane")]
    assert small.public_networks == (h100.networks.management,)
    # The storage network from the plan's cables: one storage node's 25G port serves 32 DGX's 25G ports.
    cabled = {c.a_device: c for c in h100.cables if c.kind == "storage"}
    assert (small.serve_gbps, small.clients, small.client_gbps) == (cabled["stor01"].speed_gbps, 32, 25)
    assert small.storage_switches == tuple(sorted({c.b_device for c in cabled.values()}))
    assert c.serve_gbps == 0  # the lab cables no storage port: no figure, said by `aisite plan`
    # The lab's control plane is one node: not three monitors.
    with pytest.raises(SiteError) as exc:
        parse_site(_site(copy.deepcopy(DESIGN) | {"monitors": "control-plane"}))
    assert [str(p) for p in exc.value.problems] == [
        "site.storage_nodes.ceph.monitors: Ceph's monitors need a majority of three nodes; the control plane has 1"
    ]


def test_every_problem_of_a_design_is_said_at_once_each_at_its_path() -> None:
    bad = copy.deepcopy(DESIGN)
    bad["pools"][2] |= {"k": 4, "m": 2}  # 6 hosts needed, 3 there
    bad["pools"].append({"name": "fast", "application": "rbd", "device_class": "ssd"})  # no ssd disks
    bad["pools"].append({"name": "rgw-hot", "application": "rbd", "device_class": "nvme", "share": 50})
    bad["pools"].append({"name": "default.rgw.meta", "application": "rgw"})
    bad["filesystem"] |= {"data_pool": "datasets-ec", "layouts": {"/meta": "cephfs-meta", "/s3": "rgw-hot"}}
    bad["s3"]["storage_classes"] = {"COLD": "rgw-ec"}
    bad["s3"]["lifecycle"].append({"days": 1, "storage_class": "GLACIER"})
    with pytest.raises(SiteError) as exc:
        parse_site(_site(bad))
    assert [str(p) for p in exc.value.problems] == [
        "site.storage_nodes.ceph.pools[2]: erasure k+m 6 needs 6 failure domains (host); the site has 3 storage "
        "nodes with hdd OSDs",
        "site.storage_nodes.ceph.pools[5].device_class: no storage disk is ssd (disks: hdd, nvme)",
        "site.storage_nodes.ceph.pools[6].name: 'rgw-hot' is already pools[3]",
        "site.storage_nodes.ceph.pools[7].name: 'default.rgw.meta' is a pool Ceph makes for itself",
        "site.storage_nodes.ceph.pools: the pools on nvme OSDs share 105% of their capacity, over 100%",
        "site.storage_nodes.ceph.filesystem.data_pool: pool 'datasets-ec' is erasure-coded: the first data pool "
        "keeps every file's backtrace and must be replicated (put EC pools in layouts)",
        "site.storage_nodes.ceph.filesystem.layouts./meta: files cannot go to the metadata pool",
        "site.storage_nodes.ceph.filesystem.layouts./s3: pool 'rgw-hot' is for rbd, not cephfs",
        "site.storage_nodes.ceph.s3.storage_classes: STANDARD is missing: it is where objects land",
        "site.storage_nodes.ceph.s3.lifecycle[0].storage_class: STANDARD_IA is not one of storage_classes",
        "site.storage_nodes.ceph.s3.lifecycle[1].storage_class: GLACIER is not one of storage_classes",
    ]
    # Two storage nodes: no majority of monitors, and a size-3 pool across hosts has two.
    with pytest.raises(SiteError) as exc:
        parse_site(_site(copy.deepcopy(DESIGN), count=2))
    found = [str(p) for p in exc.value.problems]
    assert found[0].startswith("site.storage_nodes.ceph.monitors: Ceph's monitors need a majority of three nodes;")
    assert found[1] == (
        "site.storage_nodes.ceph.pools[0]: replicated size 3 needs 3 failure domains (host); the site has 2 storage "
        "nodes with nvme OSDs"
    )


def test_the_models_own_rules_refuse_a_pool_of_no_shape_and_a_memory_target_ceph_ignores() -> None:
    bad = copy.deepcopy(DESIGN) | {"osd_memory_target_mib": 896, "release": "15.2"}
    bad["pools"][0] |= {"kind": "erasure"}
    bad["pools"][1] |= {"k": 2}
    with pytest.raises(SiteError) as exc:
        parse_site(_site(bad))
    found = [str(p) for p in exc.value.problems]
    assert "site.storage_nodes.ceph.pools[0]: an erasure-coded pool needs k and m" in found
    assert "site.storage_nodes.ceph.pools[1]: k and m are for erasure-coded pools; a replicated pool has size" in found
    assert any(p.startswith("site.storage_nodes.ceph.osd_memory_target_mib: ") for p in found)
    assert any(p.startswith("site.storage_nodes.ceph.release: ") for p in found)


@st.composite
def _designs(draw: st.DrawFn) -> dict[str, Any]:
    pools = []
    for i in range(draw(st.integers(1, 8))):
        erasure = draw(st.booleans())
        pool: dict[str, Any] = {
            "name": f"p{i}",
            "application": draw(st.sampled_from(["rbd", "rgw", "cephfs"])),
            "failure_domain": draw(st.sampled_from(["host", "osd"])),
            "device_class": draw(st.sampled_from(["hdd", "nvme", None])),
            "share": draw(st.integers(1, 20)),
        }
        if erasure:
            pool |= {"kind": "erasure", "k": draw(st.integers(2, 8)), "m": draw(st.integers(1, 4))}
        else:
            pool["size"] = draw(st.integers(2, 4))
        pools.append(pool)
    return {"pools": pools, "monitors": "control-plane"}


@given(
    design=_designs(),
    count=st.integers(1, 12),
    hdd=st.integers(1, 24),
    nvme=st.integers(0, 4),
)
def test_a_design_either_has_its_problems_said_or_plans_within_cephs_limits(
    design: dict[str, Any], count: int, hdd: int, nvme: int
) -> None:
    disks = [{"tier": "hdd", "size_gb": 4000, "count": hdd}] + (
        [{"tier": "nvme", "size_gb": 2000, "count": nvme}] if nvme else []
    )
    data = _site(design, count=count, disks=disks, stack="h100pod")  # three control-plane nodes for the monitors
    try:
        site = parse_site(data)
    except SiteError as exc:
        assert all(p.path.startswith("site.storage_nodes") for p in exc.problems), exc.problems
        return
    assert ceph_problems(site) == []
    c = build_plan(site).ceph
    assert c is not None and len(c.osds) == count * (hdd + nvme)
    for p in c.pools:
        assert p.pg_num >= 1 and p.pg_num & (p.pg_num - 1) == 0  # a power of two
        assert 1 <= p.min_size <= p.width and p.margin >= 0
        assert p.usable_gb <= c.raw_gb.get(p.device_class, sum(c.raw_gb.values()))
    assert max(c.pgs_per_osd.values()) <= MAX_PG_PER_OSD


@pytest.mark.skipif(shutil.which("ceph-mon") is None, reason="ceph-mon is not installed (scripts/setup.sh does)")
def test_min_size_is_what_a_real_ceph_monitor_sets(tmp_path: Path) -> None:
    """Each pool of the design (and an EC 4+2) created on a real Ceph 16.2 monitor (Debian's, on loopback, no
    OSDs: pools exist without them): the min_size and width it reports are the plan's."""
    design = copy.deepcopy(DESIGN)
    design["pools"][2]["share"] = 40
    design["pools"].append(
        {
            "name": "wide",
            "application": "rbd",
            "kind": "erasure",
            "k": 4,
            "m": 2,
            "failure_domain": "osd",
            "device_class": "hdd",
        }
    )
    design["pools"].append({"name": "two", "application": "rbd", "size": 2, "device_class": "hdd", "share": 5})
    plan = build_plan(parse_site(_site(design)))
    assert plan.ceph is not None
    with ceph_cluster(tmp_path) as ceph:
        for p in (p for p in plan.ceph.pools if not p.system):
            if p.kind == "erasure":
                profile = f"k{p.k}m{p.m}"
                _ceph(ceph, "osd", "erasure-code-profile", "set", profile, f"k={p.k}", f"m={p.m}")
                _ceph(ceph, "osd", "pool", "create", p.name, "8", "8", "erasure", profile)
            else:
                _ceph(ceph, "osd", "pool", "create", p.name, "8", "8", "replicated", "--size", str(p.width))
            got = json.loads(_ceph(ceph, "osd", "pool", "get", p.name, "all", "--format", "json"))
            assert (got["size"], got["min_size"]) == (p.width, p.min_size), (p.name, got)


def _ceph(ceph: LocalCeph, *args: str) -> str:
    r = subprocess.run([*ceph.cmd, *args], capture_output=True, text=True, check=False, timeout=60)
    assert r.returncode == 0, (args, r.stderr[-2000:])
    return r.stdout


def test_tenants_get_a_directory_a_client_and_an_s3_user_within_what_the_pools_hold() -> None:
    """A tenant's CephFS directory lands in the pool of its nearest layout (or the first data pool); its quota and
    every other tenant's in that pool must fit what the pool holds after copies; S3 quotas the classes' pools."""
    design = copy.deepcopy(DESIGN) | {"tenants": {"team-a": {"cephfs_gb": 1000, "s3_gb": 500}}}
    plan = build_plan(parse_site(_site(design)))
    assert plan.ceph is not None
    (t,) = plan.ceph.tenants
    assert (t.namespace, t.cephfs_dir, t.cephfs_pool, t.client, t.s3_user, t.s3_bucket) == (
        "tenant-team-a",
        "/tenants/team-a",
        "cephfs-data",
        "client.tenant-team-a",
        "tenant-team-a",
        "tenant-team-a",
    )
    # Its files on a RADOS namespace of its own, its S3 user and bucket in an RGW tenant of its own (RGW's names
    # take '_', not '-').
    assert (t.rados_namespace, t.s3_tenant) == ("tenant-team-a", "tenant_team_a")
    assert ("/tenants/team-a", "tenant-team-a") in plan.ceph.fs_namespaces
    assert ("/datasets", "datasets") in plan.ceph.fs_namespaces
    # A layout above the tenants' tree sends their files to its pool.
    design["filesystem"]["layouts"]["/tenants"] = "datasets-ec"
    assert build_plan(parse_site(_site(design))).ceph.tenants[0].cephfs_pool == "datasets-ec"  # type: ignore[union-attr]

    bad = copy.deepcopy(DESIGN) | {
        "tenants": {"team-a": {"cephfs_gb": 1537}, "nobody": {"s3_gb": 1}},
    }
    with pytest.raises(SiteError) as exc:
        parse_site(_site(bad))
    assert [str(p) for p in exc.value.problems] == [
        "site.storage_nodes.ceph.tenants.nobody: tenant 'nobody' is not declared under site.kubernetes.tenants"
    ]
    bad["tenants"].pop("nobody")
    with pytest.raises(SiteError) as exc:
        parse_site(_site(bad))
    assert [str(p) for p in exc.value.problems] == [
        "site.storage_nodes.ceph.tenants: tenants ask 1537 GB of CephFS in cephfs-data, which holds 1536 GB after "
        "copies"
    ]
    bad["tenants"]["team-a"] = {"s3_gb": 10**6}
    with pytest.raises(SiteError) as exc:
        parse_site(_site(bad))
    assert [str(p) for p in exc.value.problems] == [
        "site.storage_nodes.ceph.tenants: tenants ask 1000000 GB of S3; its storage classes' pools hold 21504 GB"
    ]
    no_fs = {k: v for k, v in copy.deepcopy(DESIGN).items() if k not in ("filesystem", "s3")}
    with pytest.raises(SiteError) as exc:
        parse_site(_site(no_fs | {"tenants": {"team-a": {"cephfs_gb": 1, "s3_gb": 1}}}))
    assert [str(p) for p in exc.value.problems] == [
        "site.storage_nodes.ceph.tenants.team-a.cephfs_gb: the cluster has no file system (ceph.filesystem)",
        "site.storage_nodes.ceph.tenants.team-a.s3_gb: the cluster has no S3 (ceph.s3)",
    ]


def test_clients_are_planned_with_the_capabilities_their_users_document() -> None:
    """A tenant's client for its directory (the MDS's path) and its RADOS namespace alone (the OSDs'), where `ceph
    fs authorize` would have given it every data pool whole (issue 64); ceph-csi's as its docs/capabilities.md lists
    them; the GPU nodes read the data sets' namespace only; RBD's user only with an RBD pool."""
    design = copy.deepcopy(DESIGN) | {"tenants": {"team-a": {"cephfs_gb": 10}}}
    design["pools"].append({"name": "vms", "application": "rbd", "device_class": "nvme", "share": 5})
    design["filesystem"]["layouts"] |= {"/models": "cephfs-data", "/tenants": "datasets-ec"}
    c = build_plan(parse_site(_site(design))).ceph
    assert c is not None
    caps = {i.name: dict(i.caps) for i in c.identities}
    assert list(caps) == sorted(caps)
    assert caps["client.tenant-team-a"] == {
        "mds": "allow rw fsname=data path=/tenants/team-a",
        "mon": "allow r fsname=data",
        "osd": "allow rw pool=datasets-ec namespace=tenant-team-a",
    }
    assert caps["client.csi-cephfs"] == {
        "mds": "allow r fsname=data path=/volumes, allow rws fsname=data path=/volumes/csi",
        "mgr": "allow rw",
        "mon": "allow r fsname=data",
        "osd": "allow rw tag cephfs metadata=data, allow rw tag cephfs data=data",
    }
    assert caps["client.gpu-nodes"] == {
        "mds": "allow r fsname=data path=/datasets, allow r fsname=data path=/models",
        "mon": "allow r fsname=data",
        "osd": "allow r pool=cephfs-data namespace=datasets, allow r pool=datasets-ec namespace=datasets",
    }
    assert not any(
        "tag cephfs data" in cap for name, c in caps.items() if name != "client.csi-cephfs" for cap in c.values()
    )
    assert caps["client.csi-rbd"] == {
        "mgr": "profile rbd pool=vms",
        "mon": "profile rbd",
        "osd": "profile rbd pool=vms",
    }
    assert c.gpu_client is not None and c.gpu_client.mounts == (
        ("/datasets", "/mnt/ceph/datasets"),
        ("/models", "/mnt/ceph/models"),
    )
    assert c.s3_endpoint == f"http://{dict(c.addresses)[c.rgw[0]]}:7480"

    bare = copy.deepcopy(DESIGN)
    del bare["filesystem"]
    c = build_plan(parse_site(_site(bare))).ceph
    assert c is not None and c.identities == () and c.gpu_client is None


def test_nodes_may_not_pull_the_hosts_layer_of_a_site_with_ceph() -> None:
    site = _site(copy.deepcopy(DESIGN))
    site["gitops"]["pull_layers"] = ["hosts"]
    with pytest.raises(SiteError) as exc:
        parse_site(site)
    assert [p.path for p in exc.value.problems] == ["site.gitops.pull_layers"]
    site["gitops"]["pull_layers"] = ["cluster"]
    assert build_plan(parse_site(site)).pulled_layers == ("cluster",)


def test_plan_prints_the_gpu_nodes_mounts_and_the_lifecycle_rules(tmp_path: Path) -> None:
    stack = tmp_path / "Pulumi.lab.yaml"
    stack.write_text(yaml.safe_dump({"config": {"aisite:site": _site(copy.deepcopy(DESIGN))}}))
    r = run_cli("plan", str(stack))
    assert r.returncode == 0, r.stderr[-2000:]
    text = " ".join(r.stdout.split())
    assert (
        "Ceph data sets on every GPU node, read-only (ceph-fuse, client.gpu-nodes): /datasets at /mnt/ceph/datasets"
        in text
    )
    assert "S3 lifecycle on each tenant's bucket: ingest/ -> STANDARD_IA after 30 days" in text
