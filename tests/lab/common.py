"""What the lab's tests share: the site they run on, its secrets, and the helpers that reach its containers, VM,
BMCs, switches and Ceph.

By default the tests run a copy of the lab stack named `itest` on 10.252.0.0/15, so a developer's running `lab` is
never touched. CI first runs the README's `make lab` as a newcomer does and then sets AISITE_ITEST_REUSE_LAB=1: the
tests build on that lab (its generated password, its containers, and its whole-site deploy as the first of the two
the deploy test needs) instead of a lab and a deploy of their own; they end with `lab down` all the same.
Needs root (podman networks and veth between namespaces); `lab up` installs podman, runc and debootstrap itself.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from aisite.lab.ceph import with_admin_mount
from aisite.lab.podman import CONF
from aisite.lab.topology import vm_nodes
from aisite.paths import lab_ssh_dir, provision_dir
from aisite.plan import FABRIC_ROLES, Node, Plan, Switch
from aisite.plan.ceph_types import CephPlan
from tests.conftest import ROOT, run_cli

LAB_DIR = Path(__file__).resolve().parent
REUSE = os.environ.get("AISITE_ITEST_REUSE_LAB") == "1"
SITE = "lab" if REUSE else "itest"
LAB_SECRET_FILE = ROOT / ".aisite" / "lab" / "bmc-password"  # what `make lab` generated

if REUSE and os.geteuid() == 0 and not LAB_SECRET_FILE.is_file():
    raise pytest.UsageError(
        f"AISITE_ITEST_REUSE_LAB=1 builds on `make lab`, but {LAB_SECRET_FILE} is missing: run make lab first"
    )

BMC_PASSWORD = LAB_SECRET_FILE.read_text().strip() if REUSE and LAB_SECRET_FILE.is_file() else "itest-bmc-pw-7Qx"
OPS_PASSWORD = "itest-ops-pw-3Rk"
BMC_ENV = {"AISITE_LAB_BMC_PASSWORD": BMC_PASSWORD, "AISITE_ITEST_OPS_PASSWORD": OPS_PASSWORD}

# CI's budget (90 minutes, on a machine at times twice as slow as this one's usual): the groups of scenarios that
# cost the most and share nothing with the rest take turns, one a day (tests/conftest.py: rotation_skip), where
# .ci/run sets AISITE_ITEST_ROTATE=1; a developer's run, and any run without it, runs every group.
rotating = pytest.mark.rotating


def _write_stack(directory: Path, text: str) -> Path:
    path = directory / f"Pulumi.{SITE}.yaml"
    path.write_text(text)
    return path


def containers(plan: Plan) -> list[Node]:
    """The nodes the lab runs as containers; the others are VMs `aisite provision` installs."""
    vms = vm_nodes(plan)
    return [n for n in plan.nodes if n.name not in vms]


def podman(*args: str) -> str:
    env = os.environ | {"CONTAINERS_CONF": str(CONF)}
    return subprocess.run(["podman", *args], env=env, capture_output=True, text=True, check=True).stdout


def addresses(container: str) -> dict[str, dict[str, object]]:
    links = json.loads(podman("exec", container, "ip", "-j", "addr"))
    return {
        link["ifname"]: {
            "mtu": link["mtu"],
            "up": "UP" in link["flags"],
            "v4": [a["local"] for a in link.get("addr_info", []) if a["family"] == "inet"],
        }
        for link in links
    }


def redfish(
    address: str, path: str, password: str = BMC_PASSWORD, body: dict[str, Any] | None = None, method: str = ""
) -> tuple[int, Any]:
    """A Redfish request to a lab BMC emulator (its own container address on the lab's bridge)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # a BMC's self-signed certificate, as out of the box
    token = base64.b64encode(f"admin:{password}".encode()).decode()
    req = urllib.request.Request(
        f"https://{address}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"},
        method=method or ("POST" if body is not None else "GET"),
    )
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        return exc.code, None


def redfish_power(address: str, uuid: str, reset: str, want: str) -> None:
    system = f"/redfish/v1/Systems/{uuid}"
    status, _ = redfish(address, f"{system}/Actions/ComputerSystem.Reset", body={"ResetType": reset})
    assert status in (200, 202, 204), status
    # The fake driver applies power changes after a delay, as BMCs do.
    wait_for(f"{uuid} {want}", lambda: redfish(address, system)[1]["PowerState"] == want, 30)


def ipmitool(address: str, *args: str, password: str = BMC_PASSWORD) -> subprocess.CompletedProcess[str]:
    """ipmitool from this machine (setup installs it) to a lab BMC on the lab's OOB bridge."""
    # Cipher suite 3 (what ipmi_sim offers); ipmitool's default 17 costs ~10 s of timeouts before falling back.
    cmd = ["ipmitool", "-I", "lanplus", "-C", "3", "-R", "2", "-N", "2", "-H", address, "-U", "admin", "-E", *args]
    env = os.environ | {"IPMI_PASSWORD": password}
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)


def wait_established(plan: Plan, site: str, timeout: float = 60) -> list[Switch]:
    """Every fabric switch with exactly its planned sessions, all Established; returns the fabric switches."""
    fabric = [s for s in plan.switches if s.role in FABRIC_ROLES]
    deadline = time.monotonic() + timeout
    for sw in fabric:
        expected = {nb.interface for nb in sw.neighbors}
        while True:
            peers = bgp_peers(f"aisite-{site}-{sw.name}")
            if set(peers) == expected and set(peers.values()) == {"Established"}:
                break
            assert time.monotonic() < deadline, f"{sw.name}: sessions {peers}, expected {sorted(expected)} Established"
            time.sleep(1)
    return fabric


def bgp_peers(container: str) -> dict[str, str]:
    doc = json.loads(podman("exec", container, "vtysh", "-c", "show bgp summary json"))
    return {name: peer["state"] for name, peer in doc.get("ipv4Unicast", {}).get("peers", {}).items()}


# ------------------------------------------------------------------ reconcile: a git repository drives the lab
# Rotating groups under CI: `second-run` (the whole-site second run, the VM's tasks most of it) and `reconcile` (the
# passes of commits, drift and locks, on a site whose first pass runs nothing). Figures: docs/development.md, CI.
def reconcile(repo: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    args = ("reconcile", "--repo", str(repo), "--stack", SITE, "--once", "--json", *extra)
    r = run_cli(*args, env=BMC_ENV | (env or {}))
    assert BMC_PASSWORD not in r.stdout + r.stderr
    assert r.stdout.strip().startswith("{"), r.stdout + r.stderr
    return r.returncode, dict(json.loads(r.stdout))


def kubeadm_labels(node: str) -> str:
    return podman("exec", f"aisite-{SITE}-{node}", "grep", "node-labels", "/etc/kubernetes/aisite/kubeadm.yaml")


def vm_ssh(plan: Plan, node: str, command: str) -> str:
    """A command on a lab VM, reached as Ansible reaches it: the lab's key, the host keys its install recorded."""
    address = next(n.management.address for n in plan.nodes if n.name == node)
    opts = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=10"]
    opts += ["-o", f"UserKnownHostsFile={provision_dir(SITE) / 'known_hosts'}"]
    cmd = ["ssh", *opts, "-i", str(lab_ssh_dir(SITE) / "id_ed25519"), f"root@{address}", command]
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60).stdout


def vm_answers(plan: Plan, node: str) -> bool:
    try:
        vm_ssh(plan, node, "true")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return False
    return True


def check_hosts_baseline(plan: Plan) -> None:
    """The hosts layer's result, read inside the nodes (pushed by the controller, or pulled by the nodes)."""
    gpu, stor = plan.by_role("gpu")[0], plan.by_role("storage")[0]
    c = f"aisite-{SITE}-{gpu.name}"
    assert podman("exec", c, "hostname").strip() == gpu.name
    hosts = podman("exec", c, "cat", "/etc/hosts")
    assert all(f"{n.management.address} {n.fqdn} {n.name}" in hosts for n in plan.nodes)
    assert podman("exec", c, "systemctl", "is-active", "chrony").strip() == "active"
    assert "NCCL_IB_TC=106" in podman("exec", c, "cat", "/etc/nccl.conf")
    rules = podman("exec", c, "ip", "rule", "show")
    for r in gpu.rails:
        (link,) = json.loads(podman("exec", c, "ip", "-j", "addr", "show", "dev", r.interface))
        assert link["mtu"] == 9000 and r.address in [a["local"] for a in link["addr_info"]]
        # The lab cabled and addressed this rail before networkd took it over: networkd must have configured it.
        assert f"{1000 + r.index}:\tfrom {r.address} lookup {r.table}" in rules, rules
    # The storage node serves its exports; the GPU node reads them with libnfs (the lab kernel has no NFS client).
    for e in plan.exports:
        podman("exec", f"aisite-{SITE}-{e.server}", "sh", "-c", f"echo {e.name} > {e.path}/probe")
        got = podman("exec", c, "nfs-cat", f"nfs://{e.address}{e.path}/probe?version=4").strip()
        assert got == e.name, e
    assert stor.name in {e.server for e in plan.exports}


# ------------------------------------------------------------------ Ceph: a real cluster on the storage nodes
# The lab's three storage nodes run the plan's Ceph cluster (a monitor and an OSD each; the data sets on an EC 2+1
# pool); the GPU nodes mount the data sets read-only with ceph-fuse; RGW answers S3 on the storage network.
CEPH_ADMIN_MOUNT = "/mnt/aisite-itest"


def ceph_plan(plan: Plan) -> CephPlan:
    assert plan.ceph is not None, "the lab's stack declares storage_nodes.ceph"
    return plan.ceph


def node_sh(plan: Plan, node: str, command: str) -> str:
    """A shell command on a lab node: a container through podman, the VM over SSH."""
    if node in vm_nodes(plan):
        return vm_ssh(plan, node, command)
    return podman("exec", f"aisite-{SITE}-{node}", "sh", "-c", command)


def ceph_json(plan: Plan, *args: str) -> Any:
    """`ceph ARGS` as JSON, asked with the admin key on the first monitor (which the faults below leave up)."""
    return json.loads(node_sh(plan, ceph_plan(plan).monitors[0], f"ceph {' '.join(args)} --format json"))


def ceph_settled(plan: Plan) -> tuple[bool, str]:
    """Every monitor in quorum, every OSD up, every PG active+clean and no health check but the machine's own disk
    (a monitor warns below 30 % free, which says nothing of the cluster); and what it is otherwise."""
    c = ceph_plan(plan)
    status = ceph_json(plan, "status")
    checks = set(status["health"]["checks"]) - {"MON_DISK_LOW"}
    states = {s["state_name"]: s["count"] for s in status["pgmap"].get("pgs_by_state", [])}
    osds = status["osdmap"]
    ok = (
        sorted(status["quorum_names"]) == sorted(c.monitors)
        and osds["num_up_osds"] == osds["num_in_osds"] == len(c.osds)
        and not checks
        and set(states) == {"active+clean"}
    )
    return ok, f"checks {sorted(checks)}, quorum {status['quorum_names']}, PGs {states}"


def wait_ceph_settled(plan: Plan, timeout: float) -> float:
    start = time.monotonic()
    while True:
        ok, state = ceph_settled(plan)
        if ok:
            return time.monotonic() - start
        assert time.monotonic() - start < timeout, f"Ceph not settled within {timeout:.0f} s: {state}"
        time.sleep(2)


def wait_ceph_reports(plan: Plan, want: set[str], timeout: float = 90) -> float:
    """Seconds until Ceph's health names every check in `want` (OSD_DOWN, PG_DEGRADED...)."""
    start = time.monotonic()
    while not want <= set(ceph_json(plan, "health")["checks"]):
        assert time.monotonic() - start < timeout, f"Ceph did not report {sorted(want)} within {timeout:.0f} s"
        time.sleep(1)
    return time.monotonic() - start


def write_data_set(plan: Plan, name: str, mib: int) -> str:
    """A file of `mib` MiB of random bytes in the first data set, written through an admin ceph-fuse mount on the
    first monitor (the GPU nodes' mounts are read-only); returns its sha256. It lands in the layout's pool."""
    c = ceph_plan(plan)
    (directory, pool), *_ = c.fs_layouts
    path = f"{CEPH_ADMIN_MOUNT}{directory}/{name}"
    out = node_sh(
        plan,
        c.monitors[0],
        with_admin_mount(
            c.filesystem,
            CEPH_ADMIN_MOUNT,
            f"head -c {mib}M /dev/urandom > {path};"
            f" getfattr --only-values -n ceph.file.layout.pool {path}; echo; sha256sum {path}",
        ),
    )
    got_pool, sha = out.split()[0], out.split()[1]
    assert got_pool == pool, out
    return sha


def wait_visible(plan: Plan, node: str, path: str) -> None:
    """A file another client just wrote shows on this node's mount once its cached view of the directory lapses."""
    wait_for(f"{path} on {node}", lambda: node_sh(plan, node, f"test -f {path} && echo yes || true").strip() == "yes")


def paced_read(plan: Plan, node: str, path: str, mib: int) -> subprocess.Popen[str]:
    """sha256 of a file read in 4 MiB pieces, 0.1 s apart: a read that lasts long enough for a fault to land in it."""
    pieces = mib // 4
    script = (
        f"for i in $(seq 0 {pieces - 1}); do dd if={path} bs=4M skip=$i count=1 status=none; sleep 0.1; done"
        " | sha256sum | cut -d' ' -f1"
    )
    env = os.environ | {"CONTAINERS_CONF": str(CONF)}
    cmd = ["podman", "exec", f"aisite-{SITE}-{node}", "sh", "-c", script]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def route_nexthops(switch: str, prefix: str, site: str = SITE) -> set[str]:
    """Interfaces of the routes zebra installed for a prefix."""
    doc = json.loads(podman("exec", f"aisite-{site}-{switch}", "vtysh", "-c", f"show ip route {prefix} json"))
    return {
        hop["interfaceName"]
        for route in doc.get(prefix, [])
        if route.get("installed")
        for hop in route.get("nexthops", [])
        if hop.get("active")
    }


def wait_for(what: str, check: Any, timeout: float = 60) -> float:
    """Poll check() until true; returns the seconds it took."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < timeout, f"not within {timeout:.0f} s: {what}"
        time.sleep(0.2)
    return time.monotonic() - start


def tx_packets(container: str, ports: list[str]) -> dict[str, int]:
    out = podman("exec", container, "cat", *(f"/sys/class/net/{p}/statistics/tx_packets" for p in ports))
    return dict(zip(ports, map(int, out.split()), strict=True))


class Pinger:
    """ping at 10/s from a node for the length of a failure; the lost replies bound the outage."""

    def __init__(self, node: str, src: str, dst: str, seconds: int, site: str = SITE) -> None:
        cmd = ["podman", "exec", f"aisite-{site}-{node}", "ping", "-i", "0.1", "-W", "1", "-w", str(seconds)]
        env = os.environ | {"CONTAINERS_CONF": str(CONF)}
        self.proc = subprocess.Popen([*cmd, "-I", src, dst], env=env, stdout=subprocess.PIPE, text=True)

    def outage_seconds(self) -> float:
        out, _ = self.proc.communicate(timeout=120)
        stats = next(line for line in out.splitlines() if "packets transmitted" in line)
        sent, received = (int(stats.split()[i]) for i in (0, 3))
        assert received > 0, out
        return (sent - received) * 0.1
