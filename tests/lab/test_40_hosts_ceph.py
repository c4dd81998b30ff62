"""The hosts layer's result read inside the nodes, and the Ceph cluster on the storage nodes: the data sets read on
every GPU node, an S3 object moved to its erasure-coded class, an OSD killed during a read."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import time
from typing import Any

from minio import Minio

from aisite.lab.ceph import with_admin_mount
from aisite.lab.podman import CONF
from aisite.plan import Plan
from tests.lab.common import (
    CEPH_ADMIN_MOUNT,
    ceph_json,
    ceph_plan,
    check_hosts_baseline,
    node_sh,
    paced_read,
    wait_ceph_reports,
    wait_ceph_settled,
    wait_for,
    wait_visible,
    write_data_set,
)


def test_hosts_have_the_baseline_rails_and_nfs(up: subprocess.CompletedProcess[str], plan: Plan) -> None:
    assert up.returncode == 0, up.stderr
    check_hosts_baseline(plan)


def test_ceph_runs_on_the_storage_nodes_and_every_gpu_node_reads_the_data_sets(
    up: subprocess.CompletedProcess[str], plan: Plan
) -> None:
    assert up.returncode == 0, up.stderr
    c = ceph_plan(plan)
    took = wait_ceph_settled(plan, 180)
    print(f"Ceph settled {took:.0f} s into this test: {len(c.monitors)} monitors, {len(c.osds)} OSDs")
    fs = ceph_json(plan, "fs", "status", c.filesystem)
    assert [m["state"] for m in fs["mdsmap"]].count("active") == 1 and {m["name"] for m in fs["mdsmap"]} == set(c.mds)
    sha = write_data_set(plan, "probe.bin", 16)
    assert c.gpu_client is not None
    (_, mountpoint), *_ = c.gpu_client.mounts
    for gpu in plan.by_role("gpu"):
        mounts = json.loads(node_sh(plan, gpu.name, f"findmnt -J -o TARGET,FSTYPE,OPTIONS {mountpoint}"))
        (m,) = mounts["filesystems"]
        assert m["fstype"].startswith("fuse.ceph") and "ro" in m["options"].split(","), (gpu.name, m)
        wait_visible(plan, gpu.name, f"{mountpoint}/probe.bin")
        assert node_sh(plan, gpu.name, f"sha256sum {mountpoint}/probe.bin").split()[0] == sha, gpu.name
        # Read-only: the data sets are written by their owners, never from a GPU node.
        said = node_sh(plan, gpu.name, f"touch {mountpoint}/x 2>&1 && echo written || true")
        assert "Read-only file system" in said or "Permission denied" in said, (gpu.name, said)


def test_an_s3_object_put_from_the_controller_reaches_its_erasure_coded_class(
    up: subprocess.CompletedProcess[str], plan: Plan
) -> None:
    """The tenant's bucket, from this machine: an object under the lifecycle rule's prefix moves to the rule's
    class (its EC pool) a lifecycle day after it was written (10 s in the lab), one elsewhere stays; both read
    back as written."""
    assert up.returncode == 0, up.stderr
    c = ceph_plan(plan)
    tenant = c.tenants[0]
    prefix, _, target = c.s3_lifecycle[0]
    pools = dict(c.s3_classes)
    user = json.loads(
        node_sh(plan, c.monitors[0], f"radosgw-admin user info --tenant={tenant.s3_tenant} --uid={tenant.s3_user}")
    )
    key = user["keys"][0]  # held in this process only, never printed
    endpoint = c.s3_endpoint.removeprefix("http://")
    s3 = Minio(endpoint, key["access_key"], key["secret_key"], secure=False, region="default")
    first = c.monitors[0]
    before = set(node_sh(plan, first, f"rados -p {pools[target]} ls").split())
    body = os.urandom(8 << 20)
    stamp = f"itest-{int(time.time())}"
    names = {f"{prefix}{stamp}": target, f"hot/{stamp}": "STANDARD"}
    start = time.monotonic()
    for name in names:
        s3.put_object(tenant.s3_bucket, name, io.BytesIO(body), len(body))

    def storage_class(name: str) -> str:
        return str(s3.stat_object(tenant.s3_bucket, name).metadata.get("x-amz-storage-class", "STANDARD"))

    took = wait_for(f"{prefix}{stamp} in {target}", lambda: storage_class(f"{prefix}{stamp}") == target, 240)
    print(f"lifecycle moved {prefix}{stamp} to {target} ({pools[target]}) {took:.0f} s after the put")
    assert {n: storage_class(n) for n in names} == names
    for name in names:
        got = s3.get_object(tenant.s3_bucket, name)
        try:
            assert hashlib.sha256(got.read()).digest() == hashlib.sha256(body).digest(), name
        finally:
            got.close()
            got.release_conn()
    assert set(node_sh(plan, first, f"rados -p {pools[target]} ls").split()) - before, "the EC pool holds it"
    assert time.monotonic() - start >= 10, "a lifecycle day is 10 s: nothing moves sooner"


def _as_client(plan: Plan, client: str, command: str) -> subprocess.CompletedProcess[str]:
    """`rados COMMAND` on the first monitor as one of the plan's clients, with its own key (read from the monitor
    into a root-only file for the command's length): what a tenant holding that key could do."""
    first = ceph_plan(plan).monitors[0]
    script = (
        f"k=$(mktemp) && ceph auth get {client} -o $k 2>/dev/null && timeout 60 rados --id "
        f"{client.removeprefix('client.')} --keyring $k {command}; rc=$?; rm -f $k; exit $rc"
    )
    return subprocess.run(
        ["podman", "exec", f"aisite-{plan.site}-{first}", "sh", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=os.environ | {"CONTAINERS_CONF": str(CONF)},
    )


def test_a_tenants_keys_reach_its_own_files_and_bucket_and_no_other_tenants(
    up: subprocess.CompletedProcess[str], plan: Plan
) -> None:
    """Issue 64, on the lab's Ceph: each tenant's directory is laid out on its own RADOS namespace and its key
    names that namespace alone, so team-a's key cannot list, read or write team-b's objects with rados (before, its
    `tag cephfs data=FS` capability reached every data pool whole); the GPU nodes' key reads the data sets'
    namespace only. In S3, team-b making a bucket of team-a's bucket's name makes its own, in its RGW tenant."""
    assert up.returncode == 0, up.stderr
    c = ceph_plan(plan)
    a, b = c.tenants[0], c.tenants[1]
    first = c.monitors[0]
    wait_ceph_settled(plan, 180)
    stamp = f"itest-{int(time.time())}"
    out = node_sh(
        plan,
        first,
        with_admin_mount(
            c.filesystem or "",
            CEPH_ADMIN_MOUNT,
            f"echo {b.name}-secret > {CEPH_ADMIN_MOUNT}{b.cephfs_dir}/{stamp};"
            f" echo {a.name}-own > {CEPH_ADMIN_MOUNT}{a.cephfs_dir}/{stamp}; sync;"
            f" stat -c %i {CEPH_ADMIN_MOUNT}{b.cephfs_dir}/{stamp} {CEPH_ADMIN_MOUNT}{a.cephfs_dir}/{stamp};"
            f" getfattr --only-values -n ceph.file.layout.pool_namespace {CEPH_ADMIN_MOUNT}{b.cephfs_dir}/{stamp}",
        ),
    ).split()
    ino_b, ino_a, namespace_b = int(out[0]), int(out[1]), out[2]
    obj_b, obj_a = f"{ino_b:x}.00000000", f"{ino_a:x}.00000000"
    assert namespace_b == b.rados_namespace
    pool = b.cephfs_pool
    assert obj_b in node_sh(plan, first, f"rados -p {pool} -N {b.rados_namespace} ls").split()
    own = _as_client(plan, a.client, f"-p {a.cephfs_pool} -N {a.rados_namespace} ls")
    assert own.returncode == 0 and obj_a in own.stdout.split(), own.stderr
    refused = {
        "list": f"-p {pool} -N {b.rados_namespace} ls",
        "read": f"-p {pool} -N {b.rados_namespace} get {obj_b} /dev/stdout",
        "write": f"-p {pool} -N {b.rados_namespace} put {obj_b} /etc/hostname",
        "list every namespace": f"-p {pool} --all ls",
    }
    for what, command in refused.items():
        r = _as_client(plan, a.client, command)
        assert r.returncode != 0 and "Operation not permitted" in r.stderr, (what, r.stdout, r.stderr)
    r = _as_client(plan, "client.gpu-nodes", f"-p {pool} -N {b.rados_namespace} ls")
    assert r.returncode != 0 and "Operation not permitted" in r.stderr, r.stderr
    data_pool = dict(c.fs_layouts)[c.gpu_client.mounts[0][0]] if c.gpu_client else ""
    assert _as_client(plan, "client.gpu-nodes", f"-p {data_pool} -N datasets ls").returncode == 0
    # team-b's object is as team-b wrote it: nothing above overwrote it.
    assert node_sh(plan, first, f"rados -p {pool} -N {b.rados_namespace} get {obj_b} /dev/stdout").strip() == (
        f"{b.name}-secret"
    )
    print(f"{a.client} refused on {b.rados_namespace}: {', '.join(refused)}; reads {a.rados_namespace}")

    def keys(t: Any) -> Minio:
        user = json.loads(node_sh(plan, first, f"radosgw-admin user info --tenant={t.s3_tenant} --uid={t.s3_user}"))
        key = user["keys"][0]  # in this process only, never printed
        return Minio(c.s3_endpoint.removeprefix("http://"), key["access_key"], key["secret_key"], secure=False)

    s3_b = keys(b)
    if not s3_b.bucket_exists(a.s3_bucket):
        s3_b.make_bucket(a.s3_bucket)
    s3_b.put_object(a.s3_bucket, stamp, io.BytesIO(b"b"), 1)
    owners = {
        t: json.loads(node_sh(plan, first, f"radosgw-admin bucket stats --bucket={t}/{a.s3_bucket}"))["owner"]
        for t in (a.s3_tenant, b.s3_tenant)
    }
    assert owners == {a.s3_tenant: f"{a.s3_tenant}${a.s3_user}", b.s3_tenant: f"{b.s3_tenant}${b.s3_user}"}
    assert stamp not in [o.object_name for o in keys(a).list_objects(a.s3_bucket)]


def test_an_osd_killed_during_a_read_loses_no_byte_and_the_cluster_recovers(
    up: subprocess.CompletedProcess[str], plan: Plan
) -> None:
    """A GPU node reads a data-set file (EC 2+1) while the last storage node's OSD is killed: the read completes
    with the file's checksum, Ceph reports the OSD down and the data degraded, and with the OSD started again the
    cluster recovers (the time printed)."""
    assert up.returncode == 0, up.stderr
    c = ceph_plan(plan)
    wait_ceph_settled(plan, 120)
    osd = c.osds[-1]
    sha = write_data_set(plan, "osd-loss.bin", 128)
    gpu = plan.by_role("gpu")[0].name
    assert c.gpu_client is not None
    (_, mountpoint), *_ = c.gpu_client.mounts
    wait_visible(plan, gpu, f"{mountpoint}/osd-loss.bin")
    reader = paced_read(plan, gpu, f"{mountpoint}/osd-loss.bin", 128)
    unit = f"ceph-osd@{osd.id}"
    try:
        time.sleep(1)
        node_sh(plan, osd.host, f"systemctl kill -s KILL {unit}; systemctl stop {unit}")
        killed = time.monotonic()
        down = wait_ceph_reports(plan, {"OSD_DOWN", "PG_DEGRADED"})
        out, err = reader.communicate(timeout=300)
        assert reader.returncode == 0, err
        assert out.strip() == sha, "every byte read back as written"
        print(
            f"osd.{osd.id} killed: reported down and degraded after {down:.0f} s; the read ended after"
            f" {time.monotonic() - killed:.0f} s with the file's checksum"
        )
    finally:
        node_sh(plan, osd.host, f"systemctl start {unit}")
    recovered = wait_ceph_settled(plan, 300)
    print(f"osd.{osd.id} started again: recovered (every PG active+clean) in {recovered:.0f} s")
