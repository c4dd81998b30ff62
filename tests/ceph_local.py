"""A real Ceph 16.2 monitor (and manager) on loopback for tests: Debian's ceph-mon and ceph-mgr, in a temporary
directory, on free ports, no OSDs (pools exist without them); stopped and left nowhere when the block ends."""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _run(*cmd: str) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=60)
    assert r.returncode == 0, (cmd, r.stderr[-2000:])
    return r.stdout


@dataclass(frozen=True)
class LocalCeph:
    cmd: list[str]  # the ceph CLI with this cluster's configuration and admin key
    prometheus_port: int  # the manager's prometheus module (0: no manager)


@contextmanager
def ceph_cluster(tmp_path: Path, mgr: bool = False) -> Iterator[LocalCeph]:
    port, fsid = _free_port(), str(uuid.uuid4())
    conf, keyring = tmp_path / "ceph.conf", tmp_path / "keyring"
    conf.write_text(
        # public_addr: every daemon binds loopback only (a manager binds every address otherwise).
        f"[global]\nfsid = {fsid}\nmon_host = v1:127.0.0.1:{port}\npublic_addr = 127.0.0.1\nrun_dir = {tmp_path}\n"
        f"admin_socket = {tmp_path}/$name.asok\nlog_file = {tmp_path}/$name.log\n"
        # Healthy however long it runs: a new monitor warns, once its first health pass has run (a minute or so on
        # a loaded machine), of insecure global_id reclaim allowed, of msgr2 not bound (loopback v1 only here)
        # and of a low disk on this machine.
        f"[mon]\nmon_data = {tmp_path}/mon\nauth_allow_insecure_global_id_reclaim = false\n"
        "mon_warn_on_msgr2_not_enabled = false\nmon_data_avail_warn = 1\n"
        f"[mgr]\nmgr_data = {tmp_path}/mgr\n"
    )
    _run("ceph-authtool", "--create-keyring", str(keyring), "--gen-key", "-n", "mon.", "--cap", "mon", "allow *")
    caps = ["--cap", "mon", "allow *", "--cap", "osd", "allow *", "--cap", "mgr", "allow *"]
    _run("ceph-authtool", str(keyring), "--gen-key", "-n", "client.admin", *caps)
    mgr_caps = ["--cap", "mon", "allow profile mgr", "--cap", "osd", "allow *", "--cap", "mds", "allow *"]
    _run("ceph-authtool", str(keyring), "--gen-key", "-n", "mgr.x", *mgr_caps)
    _run("monmaptool", "--create", "--addv", "a", f"[v1:127.0.0.1:{port}]", "--fsid", fsid, str(tmp_path / "monmap"))
    _run(
        "ceph-mon",
        "-c",
        str(conf),
        "--mkfs",
        "-i",
        "a",
        "--monmap",
        str(tmp_path / "monmap"),
        "--keyring",
        str(keyring),
    )
    procs = [subprocess.Popen(["ceph-mon", "-f", "-c", str(conf), "-i", "a", "--keyring", str(keyring)])]
    ceph = ["ceph", "-c", str(conf), "-k", str(keyring), "--connect-timeout", "30"]
    prometheus = 0
    try:
        if mgr:
            prometheus = _free_port()
            (tmp_path / "mgr").mkdir()
            # Loopback only, on a free port (the module's default is every address, port 9283); --force: the
            # monitor knows a module's options only once a manager has reported them.
            _run(*ceph, "config", "set", "mgr", "mgr/prometheus/server_addr", "127.0.0.1", "--force")
            _run(*ceph, "config", "set", "mgr", "mgr/prometheus/server_port", str(prometheus), "--force")
            _run(*ceph, "mgr", "module", "enable", "prometheus", "--force")
            procs.append(subprocess.Popen(["ceph-mgr", "-f", "-c", str(conf), "-i", "x", "--keyring", str(keyring)]))
            time.sleep(1)
        yield LocalCeph(ceph, prometheus)
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=30)
