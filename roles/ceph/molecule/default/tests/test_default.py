"""The Ceph cluster the role brought up, asked through the ceph CLI and its S3 port: every daemon up, the OSDs in
the plan's device class, the pools as planned, the file system served, RGW answering."""

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
    assert "fuse.ceph-fuse" not in host.file("/proc/mounts").content_string, "the role's mount is gone"
    host.run_expect([0], "mkdir -p /mnt/verify && ceph-fuse --client_fs=cephfs /mnt/verify")
    try:
        layout = host.check_output("getfattr --only-values -n ceph.dir.layout.pool /mnt/verify/datasets")
        quota = host.check_output("getfattr --only-values -n ceph.quota.max_bytes /mnt/verify/tenants/team-a")
        # A file written below the layout's directory lands in the EC pool (its object is there, not in the first).
        host.run_expect([0], "dd if=/dev/urandom of=/mnt/verify/datasets/probe bs=1M count=4 status=none && sync")
        ino = int(host.check_output("stat -c %i /mnt/verify/datasets/probe"))
        objects = host.check_output("rados -p datasets-ec ls")
    finally:
        host.run("umount /mnt/verify")
    assert layout == "datasets-ec" and quota == "5000000000"
    assert f"{ino:x}.00000000" in objects.split()


def test_rgw_keeps_each_storage_class_in_its_pool_and_the_tenant_has_its_user_and_quota(host):
    zone = json.loads(host.check_output("radosgw-admin zone get --rgw-zone=default"))
    (placement,) = [p for p in zone["placement_pools"] if p["key"] == "default-placement"]
    classes = {k: v["data_pool"] for k, v in placement["val"]["storage_classes"].items()}
    assert classes == {"STANDARD": "rgw-hot", "STANDARD_IA": "rgw-ec"}
    user = json.loads(host.check_output("radosgw-admin user info --uid=tenant-team-a"))
    assert user["user_quota"]["enabled"] is True and user["user_quota"]["max_size"] == 1000000512  # 10^9 in whole KiB
    assert user["keys"], "RGW made the user's keys"
