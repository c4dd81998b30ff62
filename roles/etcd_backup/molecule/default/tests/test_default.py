"""etcd_backup against a real etcd (Debian's etcd-server, TLS with client certificates, keys written by prepare):
the timer, a verified private snapshot, pruning to the newest `keep`, the copy off the node, the metric, a failed
snapshot that leaves nothing, and a restore into a fresh member that serves the keys back."""

import time

SNAPSHOTS = "/var/backups/etcd"
TLS = (
    "--cacert /etc/kubernetes/pki/etcd/ca.crt --cert /etc/kubernetes/pki/etcd/healthcheck-client.crt "
    "--key /etc/kubernetes/pki/etcd/healthcheck-client.key"
)
ETCDCTL = f"ETCDCTL_API=3 etcdctl --endpoints https://127.0.0.1:2379 {TLS}"


def _snapshots(host, folder=SNAPSHOTS):
    out = host.check_output(f"find {folder} -maxdepth 1 -name 'etcd-*.db' -printf '%f\\n' | sort")
    return out.split()


def _backup(host):
    return host.run("systemctl start aisite-etcd-backup.service")


def test_the_timer_is_enabled_and_waiting(host):
    timer = host.service("aisite-etcd-backup.timer")
    assert timer.is_enabled and timer.is_running
    assert "OnCalendar=hourly" in host.file("/etc/systemd/system/aisite-etcd-backup.timer").content_string


def test_a_snapshot_is_verified_private_and_copied_off_the_node(host):
    assert _backup(host).rc == 0
    newest = _snapshots(host)[-1]
    f = host.file(f"{SNAPSHOTS}/{newest}")
    assert f.mode == 0o600 and f.user == "root" and f.size > 0
    assert host.file(SNAPSHOTS).mode == 0o700
    host.run_expect([0], f"ETCDCTL_API=3 etcdctl snapshot status {SNAPSHOTS}/{newest}")
    copy = host.file(f"/srv/offnode/etcd/{newest}")
    assert copy.exists and copy.mode == 0o600 and copy.size == f.size
    prom = host.file("/var/lib/node_exporter/textfile_collector/aisite_etcd_backup.prom").content_string
    samples = dict(line.split() for line in prom.splitlines() if not line.startswith("#"))
    stamp = int(samples["aisite_etcd_backup_last_success_timestamp_seconds"])
    assert abs(stamp - int(host.check_output("date +%s"))) < 120
    assert samples["aisite_etcd_backup_bytes"] == str(f.size)


def test_only_the_newest_are_kept(host):
    for _ in range(3):
        assert _backup(host).rc == 0
    kept = _snapshots(host)
    assert len(kept) == 2  # etcd_backup_keep
    assert kept == sorted(_snapshots(host, "/srv/offnode/etcd"))[-2:]


def test_a_failed_snapshot_fails_the_service_and_leaves_nothing(host):
    before = _snapshots(host)
    host.run_expect([0], "systemctl stop etcd")
    try:
        started = time.monotonic()
        assert _backup(host).rc != 0
        assert time.monotonic() - started < 120  # bounded: etcdctl alone would wait for ever
        assert host.service("aisite-etcd-backup.service").is_running is False
        assert host.check_output(f"ls -A {SNAPSHOTS} | grep -c -e part -e tmp || true") == "0"
        assert _snapshots(host) == before
    finally:
        host.run_expect([0], "systemctl start etcd")


def test_a_snapshot_restores_into_a_fresh_member_with_the_keys(host):
    assert _backup(host).rc == 0
    snapshot = f"{SNAPSHOTS}/{_snapshots(host)[-1]}"
    # Written after the snapshot: the restored member must not have it.
    host.run_expect([0], f"{ETCDCTL} put /registry/aisite/after snapshot")
    data = "/var/tmp/etcd-restored"
    host.run(f"systemctl stop aisite-etcd-restored; rm -rf {data}")
    host.run_expect([0], f"aisite-etcd-restore {snapshot} {data} restored http://127.0.0.1:22380")
    refused = host.run(f"aisite-etcd-restore {snapshot} {data}")
    assert refused.rc == 1 and "exists" in refused.stderr
    host.run_expect(
        [0],
        "systemd-run --unit aisite-etcd-restored /usr/bin/etcd --name restored --data-dir "
        + data
        + " --listen-client-urls http://127.0.0.1:22379 --advertise-client-urls http://127.0.0.1:22379"
        " --listen-peer-urls http://127.0.0.1:22380 --initial-advertise-peer-urls http://127.0.0.1:22380"
        " --initial-cluster restored=http://127.0.0.1:22380",
    )
    try:
        local = "ETCDCTL_API=3 etcdctl --endpoints http://127.0.0.1:22379"
        for _ in range(30):
            if host.run(f"{local} endpoint health").rc == 0:
                break
            time.sleep(1)
        got = host.check_output(f"{local} get /registry/aisite/ --prefix --print-value-only")
        assert got.splitlines() == ["value 1", "value 2", "value 3"]
        assert host.check_output(f"{local} get /registry/aisite/after --print-value-only") == ""
    finally:
        host.run("systemctl stop aisite-etcd-restored")
