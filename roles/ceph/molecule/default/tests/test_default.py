"""The Ceph cluster the role brought up, asked through the ceph CLI and its S3 port: every daemon up, the OSDs in
the plan's device class, the pools as planned, the file system served, RGW answering."""

import base64
import json
import time


def _ceph(host, *args):
    out = host.check_output("ceph --connect-timeout 20 " + " ".join(args) + " -f json")
    return json.loads(out)


def test_every_daemon_runs_under_systemd(host):
    for unit in (
        "ceph-mon@stor01",
        "ceph-mgr@stor01",
        "ceph-osd@0",
        "ceph-osd@1",
        "ceph-osd@2",
        "ceph-mds@stor01",
        "ceph-radosgw@rgw.stor01",
    ):
        assert host.service(unit).is_running and host.service(unit).is_enabled, unit


def test_the_keys_are_readable_by_root_only(host):
    for path in ("/etc/ceph/ceph.client.admin.keyring", "/etc/ceph/ceph.mon.keyring"):
        assert host.file(path).mode == 0o600 and host.file(path).user == "root", path
    assert host.file("/var/lib/ceph/osd/ceph-0/keyring").user == "ceph"


def test_the_osds_are_up_in_and_of_the_plans_device_class(host):
    dump = _ceph(host, "osd", "dump")
    assert sorted((o["osd"], o["up"], o["in"]) for o in dump["osds"]) == [(0, 1, 1), (1, 1, 1), (2, 1, 1)]
    assert sorted(_ceph(host, "osd", "crush", "class", "ls-osd", "nvme")) == [0, 1, 2]
    assert dump["fsid"] == "0e1ef1b1-5c39-5b43-9c1f-6d1c8a3d4a11"


def test_the_pools_and_file_system_are_the_plans(host):
    pools = {p["pool_name"]: p for p in _ceph(host, "osd", "pool", "ls", "detail")}
    assert {"cephfs-meta", "cephfs-data", "datasets-ec", "rgw-ec", ".rgw.root"} <= set(pools)
    assert pools["datasets-ec"]["erasure_code_profile"] == "aisite-datasets-ec"
    assert pools["datasets-ec"]["min_size"] == 2 and "ec_overwrites" in pools["datasets-ec"]["flags_names"]
    assert pools[".rgw.root"]["pg_num"] == 8, "RGW's own pools made small before it starts"
    (fs,) = _ceph(host, "fs", "ls")
    assert fs["name"] == "cephfs" and fs["data_pools"] == ["cephfs-data", "datasets-ec"]


def test_the_cluster_settles_healthy_with_its_mds_active(host):
    # Every PG active+clean within two minutes; the only health check allowed is the machine's own disk (the
    # monitor warns below 30 % free, which says nothing of the role).
    for _ in range(60):
        checks = set(_ceph(host, "health", "detail")["checks"]) - {"MON_DISK_LOW"}
        pgs = _ceph(host, "pg", "stat")
        states = {s["name"]: s["num"] for s in pgs["pg_summary"]["num_pg_by_state"]}
        if not checks and states == {"active+clean": pgs["pg_summary"]["num_pgs"]}:
            break
        time.sleep(2)
    assert not checks, _ceph(host, "health", "detail")
    assert states == {"active+clean": pgs["pg_summary"]["num_pgs"]}, states
    mds = _ceph(host, "fs", "status", "cephfs")
    assert [m["state"] for m in mds["mdsmap"] if m["name"] == "stor01"] == ["active"]


def test_rgw_answers_s3_and_the_manager_serves_metrics(host):
    get = "python3 -c 'import sys, urllib.request as u; print(u.urlopen(sys.argv[1], timeout=10).read().decode())' "
    s3 = host.run(get + "http://127.0.0.1:7480/")
    assert s3.rc == 0 and "ListAllMyBucketsResult" in s3.stdout, s3.stdout + s3.stderr  # anonymous: no buckets
    metrics = host.run(get + "http://127.0.0.1:9283/metrics")
    assert metrics.rc == 0 and "ceph_health_status" in metrics.stdout, metrics.stderr


def test_the_file_system_is_laid_out_as_planned_and_left_unmounted(host):
    mounts = [line.split()[1] for line in host.file("/proc/mounts").content_string.splitlines() if "ceph-fuse" in line]
    assert mounts == ["/mnt/ceph/datasets"], "the role's temporary mount is gone; the client's stays"
    host.run_expect([0], "mkdir -p /mnt/verify && ceph-fuse --client_fs=cephfs /mnt/verify")
    try:
        layout = host.check_output("getfattr --only-values -n ceph.dir.layout.pool /mnt/verify/datasets")
        namespace = host.check_output("getfattr --only-values -n ceph.dir.layout.pool_namespace /mnt/verify/datasets")
        quota = host.check_output("getfattr --only-values -n ceph.quota.max_bytes /mnt/verify/tenants/team-a")
        tenant_ns = host.check_output(
            "getfattr --only-values -n ceph.dir.layout.pool_namespace /mnt/verify/tenants/team-a"
        )
        # A file written below the layout's directory lands in the EC pool, on the data sets' RADOS namespace.
        host.run_expect([0], "dd if=/dev/urandom of=/mnt/verify/datasets/probe bs=1M count=4 status=none && sync")
        ino = int(host.check_output("stat -c %i /mnt/verify/datasets/probe"))
        objects = host.check_output("rados -p datasets-ec -N datasets ls")
    finally:
        host.run("umount /mnt/verify")
    assert layout == "datasets-ec" and namespace == "datasets" and quota == "5000000000"
    assert tenant_ns == "tenant-team-a"
    assert f"{ino:x}.00000000" in objects.split()


def test_the_data_sets_are_mounted_read_only_as_the_gpu_nodes_client(host):
    # The client's key is root's; its mount is /datasets alone (its capabilities name no other path), read-only.
    assert host.file("/etc/ceph/aisite-client.keyring").mode == 0o600
    assert "fuse.ceph" in host.file("/etc/fstab").content_string
    (line,) = [m for m in host.file("/proc/mounts").content_string.splitlines() if " /mnt/ceph/datasets " in m]
    assert line.split()[3].startswith("ro"), line
    host.run_expect([0], "mkdir -p /mnt/verify && ceph-fuse --client_fs=cephfs /mnt/verify")
    try:
        host.run_expect([0], "dd if=/dev/urandom of=/mnt/verify/datasets/shard bs=1M count=2 status=none && sync")
        written = host.check_output("sha256sum < /mnt/verify/datasets/shard")
    finally:
        host.run("umount /mnt/verify")
    # Read through the client's mount (a fresh read: the client's cache may predate the file).
    for _ in range(15):
        read = host.run("sha256sum < /mnt/ceph/datasets/shard")
        if read.rc == 0:
            break
        time.sleep(2)
    assert read.stdout.strip() == written.strip(), read.stderr
    write = host.run("touch /mnt/ceph/datasets/mine")
    assert write.rc != 0 and ("Read-only" in write.stderr or "Permission denied" in write.stderr), write.stderr
    caps = _ceph(host, "auth", "get", "client.gpu-nodes")[0]["caps"]
    assert caps == {
        "mds": "allow r fsname=cephfs path=/datasets",
        "mon": "allow r fsname=cephfs",
        "osd": "allow r pool=datasets-ec namespace=datasets",
    }
    # The tenant's client too: its directory for the MDS, its RADOS namespace alone for the OSDs.
    assert _ceph(host, "auth", "get", "client.tenant-team-a")[0]["caps"] == {
        "mds": "allow rw fsname=cephfs path=/tenants/team-a",
        "mon": "allow r fsname=cephfs",
        "osd": "allow rw pool=cephfs-data namespace=tenant-team-a",
    }


def _as(host, client, command):
    """A rados command as one of the plan's clients, with its own key (read from the monitor into a root-only
    file for the command's length)."""
    return host.run(
        f"k=$(mktemp) && ceph auth get {client} -o $k 2>/dev/null && "
        f"timeout 60 rados --id {client.removeprefix('client.')} --keyring $k {command}; rc=$?; rm -f $k; exit $rc"
    )


def test_a_tenants_key_reaches_its_own_rados_namespace_and_no_other(host):
    # Issue 64: each tenant key carried `allow rw tag cephfs data=cephfs` (every data pool whole): team-a read and
    # overwrote team-b's files with rados. team-b's file is written through the file system, as team-b would.
    host.run_expect([0], "mkdir -p /mnt/verify && ceph-fuse --client_fs=cephfs /mnt/verify")
    try:
        host.run_expect([0], "echo team-b-secret > /mnt/verify/tenants/team-b/secret && sync")
        host.run_expect([0], "echo team-a-own > /mnt/verify/tenants/team-a/own && sync")
        ino_b = int(host.check_output("stat -c %i /mnt/verify/tenants/team-b/secret"))
        ino_a = int(host.check_output("stat -c %i /mnt/verify/tenants/team-a/own"))
    finally:
        host.run("umount /mnt/verify")
    obj_b, obj_a = f"{ino_b:x}.00000000", f"{ino_a:x}.00000000"
    assert obj_b in host.check_output("rados -p cephfs-data -N tenant-team-b ls").split()
    own = _as(host, "client.tenant-team-a", "-p cephfs-data -N tenant-team-a ls")
    assert own.rc == 0 and obj_a in own.stdout.split(), own.stderr
    for command in (
        "-p cephfs-data -N tenant-team-b ls",
        f"-p cephfs-data -N tenant-team-b get {obj_b} /dev/stdout",
        f"-p cephfs-data -N tenant-team-b put {obj_b} /etc/hostname",
        "-p cephfs-data --all ls",
        "-p cephfs-data ls",
    ):
        r = _as(host, "client.tenant-team-a", command)
        assert r.rc != 0 and "Operation not permitted" in r.stderr, (command, r.rc, r.stdout, r.stderr)
    # The GPU nodes' key reads the data sets' namespace alone: no tenant's objects.
    r = _as(host, "client.gpu-nodes", "-p cephfs-data -N tenant-team-b ls")
    assert r.rc != 0 and "Operation not permitted" in r.stderr, r.stderr
    assert _as(host, "client.gpu-nodes", "-p datasets-ec -N datasets ls").rc == 0
    assert host.check_output("rados -p cephfs-data -N tenant-team-b get " + obj_b + " /dev/stdout") == "team-b-secret"


def test_rgw_keeps_each_storage_class_in_its_pool_and_the_tenant_has_its_user_and_quota(host):
    zone = json.loads(host.check_output("radosgw-admin zone get --rgw-zone=default"))
    (placement,) = [p for p in zone["placement_pools"] if p["key"] == "default-placement"]
    classes = {k: v["data_pool"] for k, v in placement["val"]["storage_classes"].items()}
    assert classes == {"STANDARD": "rgw-hot", "STANDARD_IA": "rgw-ec"}
    user = json.loads(host.check_output("radosgw-admin user info --tenant=tenant_team_a --uid=tenant-team-a"))
    assert user["user_quota"]["enabled"] is True and user["user_quota"]["max_size"] == 1000000512  # 10^9 in whole KiB
    assert user["keys"], "RGW made the user's keys"


# Run inside the node with botocore (the role installs it there): the tenant's keys stay in that process.
S3_PROBE = r"""
import hashlib, json, os, subprocess, sys, time
import botocore.session
from botocore.config import Config
def client(tenant, uid):
    user = json.loads(subprocess.check_output(["radosgw-admin", "user", "info", "--tenant=" + tenant, "--uid=" + uid]))
    key = user["keys"][0]
    return botocore.session.get_session().create_client(
        "s3", region_name="default", endpoint_url="http://127.0.0.1:7480",
        aws_access_key_id=key["access_key"], aws_secret_access_key=key["secret_key"],
        config=Config(s3={"addressing_style": "path"}))
s3 = client("tenant_team_a", "tenant-team-a")
other = client("tenant_team_b", "tenant-team-b")
body = os.urandom(1 << 20)
out = {"owner": s3.list_buckets()["Owner"]["ID"], "buckets": [b["Name"] for b in s3.list_buckets()["Buckets"]],
       "rules": s3.get_bucket_lifecycle_configuration(Bucket="tenant-team-a")["Rules"]}
for name in ("cold/probe", "hot/probe"):
    s3.put_object(Bucket="tenant-team-a", Key=name, Body=body)
start, classes = time.monotonic(), {}
while time.monotonic() - start < 240:
    classes = {n: s3.head_object(Bucket="tenant-team-a", Key=n).get("StorageClass", "STANDARD")
               for n in ("cold/probe", "hot/probe")}
    if classes["cold/probe"] != "STANDARD":
        break
    time.sleep(5)
out["classes"], out["seconds"] = classes, round(time.monotonic() - start)
got = s3.get_object(Bucket="tenant-team-a", Key="cold/probe")["Body"].read()
out["same"] = hashlib.sha256(got).digest() == hashlib.sha256(body).digest()
# team-b makes a bucket of team-a's bucket's name: it lands in team-b's RGW tenant, team-a's is untouched.
other.create_bucket(Bucket="tenant-team-a")
out["b_sees"] = [o["Key"] for o in other.list_objects_v2(Bucket="tenant-team-a").get("Contents", [])]
out["a_owner"] = json.loads(subprocess.check_output(
    ["radosgw-admin", "bucket", "stats", "--bucket=tenant_team_a/tenant-team-a"]))["owner"]
out["b_owner"] = json.loads(subprocess.check_output(
    ["radosgw-admin", "bucket", "stats", "--bucket=tenant_team_b/tenant-team-a"]))["owner"]
print(json.dumps(out))
"""


def test_the_tenants_bucket_moves_objects_to_the_ec_class_by_its_lifecycle_rule(host):
    # A lifecycle day is 10 s here (ceph_rgw_lc_debug_interval_s): cold/ moves to STANDARD_IA (the EC pool) a day
    # after it was written, hot/ stays; the object reads back the same from its new pool.
    script = base64.b64encode(S3_PROBE.encode()).decode()
    r = host.run(f"echo {script} | base64 -d > /tmp/s3_probe.py && python3 /tmp/s3_probe.py")
    assert r.rc == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["owner"] == "tenant_team_a$tenant-team-a" and out["buckets"] == ["tenant-team-a"], out
    assert [(x["ID"], x["Filter"]["Prefix"], x["Transitions"]) for x in out["rules"]] == [
        ("aisite-0", "cold/", [{"Days": 1, "StorageClass": "STANDARD_IA"}])
    ], out["rules"]
    assert out["classes"] == {"cold/probe": "STANDARD_IA", "hot/probe": "STANDARD"}, out
    assert out["same"], "the moved object reads back as written"
    # Issue 64: bucket names were one global namespace, so a tenant could pre-create another's bucket.
    assert out["b_sees"] == [] and out["a_owner"] == "tenant_team_a$tenant-team-a", out
    assert out["b_owner"] == "tenant_team_b$tenant-team-b", out
    print(f"lifecycle moved cold/probe to STANDARD_IA in {out['seconds']} s")
    assert "rgw-ec" in host.check_output("ceph df -f json") and host.check_output("rados -p rgw-ec ls").strip()
