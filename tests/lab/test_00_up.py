"""`lab up` from the plan: every container, address, cable and BMC emulator checked from inside, Ansible and SSH
connected with checked host keys, no BMC password in plain text, and a second `up` that changes nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from aisite.lab import lab
from aisite.lab.bmc import system_uuid
from aisite.lab.podman import CONF
from aisite.lab.topology import lab_topology, vm_nodes
from aisite.paths import lab_ssh_dir
from aisite.plan import Plan
from aisite.render.inventory import inventory_yaml
from tests.conftest import ROOT, run_cli
from tests.lab.common import (
    BMC_ENV,
    BMC_PASSWORD,
    LAB_SECRET_FILE,
    REUSE,
    SITE,
    addresses,
    containers,
    ipmitool,
    podman,
    redfish,
    redfish_power,
)


def test_up_builds_every_container_and_cable(up: subprocess.CompletedProcess[str], plan: Plan) -> None:
    assert up.returncode == 0, up.stderr
    topo = lab_topology(plan)
    rows = {r["name"]: r for r in lab.status(topo)}
    assert set(rows) == (
        {c.host for c in topo.containers} | {f"{n.name}-bmc" for n in containers(plan)} | {v.node for v in topo.vms}
    )
    for r in rows.values():
        assert r["state"] == "running", r
        assert r["ports_present"] == r["ports_planned"], r
        assert r["addresses_match"], r
    assert rows[plan.nodes[0].name]["addresses"] == {plan.nodes[0].management.name: plan.nodes[0].management.address}


def test_interfaces_addresses_and_mtu_inside(up: subprocess.CompletedProcess[str], plan: Plan) -> None:
    assert up.returncode == 0, up.stderr
    for node in containers(plan):  # a VM's interfaces: test_the_vm_node_was_installed_from_power_off
        ifs = addresses(f"aisite-{SITE}-{node.name}")
        assert ifs[node.management.name]["v4"] == [node.management.address]
        if node.storage:
            assert ifs[node.storage.name]["v4"] == [node.storage.address]
            assert ifs[node.storage.name]["mtu"] == plan.roce.host_mtu
        for rail in node.rails:
            assert ifs[rail.interface]["up"] and ifs[rail.interface]["mtu"] == plan.roce.host_mtu
            assert ifs[rail.interface]["v4"] == [rail.address]
    for sw in plan.switches:
        if sw.role not in ("leaf", "spine"):
            continue
        ifs = addresses(f"aisite-{SITE}-{sw.name}")
        assert ifs["eth0"]["v4"] == [sw.management_address]
        ports = [nb.interface for nb in sw.neighbors] + [p for h in sw.host_subnets for p in h.ports]
        assert ports
        for port in ports:
            assert ifs[port]["up"] and ifs[port]["mtu"] == plan.roce.switch_mtu, (sw.name, port)


def test_nodes_reach_each_other_on_management_and_storage(up: subprocess.CompletedProcess[str], plan: Plan) -> None:
    assert up.returncode == 0, up.stderr
    src = plan.by_role("gpu")[0]
    for dst in plan.nodes:
        if dst is not src:
            podman("exec", f"aisite-{SITE}-{src.name}", "ping", "-c1", "-W2", dst.management.address)
    storage = plan.by_role("storage")[0]
    assert storage.storage is not None
    # A full jumbo frame with DF set crosses the storage network.
    podman("exec", f"aisite-{SITE}-{src.name}", "ping", "-c1", "-W2", "-M", "do", "-s", "8972", storage.storage.address)


def test_ansible_connects_to_every_node_and_switch(
    up: subprocess.CompletedProcess[str], plan: Plan, tmp_path: Path
) -> None:
    assert up.returncode == 0, up.stderr
    inv = tmp_path / "inventory.yml"
    inv.write_text(inventory_yaml(plan))
    env = os.environ | {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "CONTAINERS_CONF": str(CONF)}
    r = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible"),
            "-i",
            str(inv),
            "control_plane:gpu_nodes:storage_nodes:leaf:spine",
            "-m",
            "ansible.builtin.ping",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == len(plan.nodes) + len([s for s in plan.switches if s.role in ("leaf", "spine")])


def test_the_lab_is_reached_over_ssh_with_checked_host_keys(up: subprocess.CompletedProcess[str], plan: Plan) -> None:
    """As a site is reached: SSH with the lab's key; each container has host keys of its own, and a host whose key
    is not the one `lab up` recorded is refused."""
    assert up.returncode == 0, up.stderr
    ssh_dir = lab_ssh_dir(SITE)
    topo = lab_topology(plan)
    known = (ssh_dir / "known_hosts").read_text().splitlines()
    assert sorted(line.split()[0] for line in known) == sorted(c.address for c in topo.containers)
    assert len({line.split()[2] for line in known}) == len(known), "two containers share a host key"
    assert (ssh_dir / "id_ed25519").stat().st_mode & 0o077 == 0
    address = plan.by_role("gpu")[0].management.address

    def ssh(known_hosts: Path) -> subprocess.CompletedProcess[str]:
        opts = ["-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes"]
        cmd = ["ssh", *opts, "-i", str(ssh_dir / "id_ed25519"), f"root@{address}", "hostname"]
        return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=30)

    ok = ssh(ssh_dir / "known_hosts")
    assert ok.returncode == 0, ok.stderr
    # Another container's host key under this address: not the host `lab up` recorded there.
    wrong_key = next(line for line in known if not line.startswith(f"{address} ")).split(maxsplit=1)[1]
    other = ssh_dir / "known_hosts.other"
    other.write_text(f"{address} {wrong_key}\n")
    try:
        refused = ssh(other)
    finally:
        other.unlink()
    assert refused.returncode != 0 and "host key" in refused.stderr.lower(), refused.stderr


def test_redfish_bmcs_answer_with_tls_credentials_and_state(up: subprocess.CompletedProcess[str], plan: Plan) -> None:
    """Off when the lab is new, on after `make lab`'s deploy: either way the emulator keeps what it is told."""
    assert up.returncode == 0, up.stderr
    nodes = [n for n in plan.nodes if n.bmc.protocol == "redfish"]
    assert nodes, "the lab stack declares Redfish BMCs"
    for node in nodes:
        uuid = system_uuid(SITE, node.name)
        status, system = redfish(node.bmc.address, f"/redfish/v1/Systems/{uuid}")
        assert status == 200 and system["Name"] == node.name
        assert system["PowerState"] == ("On" if REUSE else "Off"), system
        assert redfish(node.bmc.address, "/redfish/v1/Systems", password="wrong")[0] == 401
    node = nodes[0]
    uuid = system_uuid(SITE, node.name)
    redfish_power(node.bmc.address, uuid, "ForceOff", "Off")
    redfish_power(node.bmc.address, uuid, "On", "On")


def test_ipmi_bmcs_keep_power_and_boot_device(up: subprocess.CompletedProcess[str], plan: Plan) -> None:
    assert up.returncode == 0, up.stderr
    # (A VM's BMC powers a real machine off: provisioning drives it, test_the_vm_node_was_installed_from_power_off.)
    nodes = [n for n in containers(plan) if n.bmc.protocol == "ipmi"]
    assert nodes, "the lab stack declares IPMI BMCs"
    for node in nodes:
        addr = node.bmc.address
        assert f"Chassis Power is {'on' if REUSE else 'off'}" in ipmitool(addr, "power", "status").stdout
        assert ipmitool(addr, "power", "off").returncode == 0
        assert "Chassis Power is off" in ipmitool(addr, "power", "status").stdout
        assert ipmitool(addr, "power", "on").returncode == 0
        assert "Chassis Power is on" in ipmitool(addr, "power", "status").stdout
        assert ipmitool(addr, "chassis", "bootdev", "pxe").returncode == 0
        assert "Force PXE" in ipmitool(addr, "chassis", "bootparam", "get", "5").stdout
        assert ipmitool(addr, "power", "status", password="wrong").returncode != 0


def test_status_lists_the_bmc_emulators(up: subprocess.CompletedProcess[str], stack_file: Path, plan: Plan) -> None:
    assert up.returncode == 0, up.stderr
    doc = json.loads(run_cli("lab", "status", str(stack_file), "--json").stdout)
    bmcs = {m["name"]: m for m in doc["members"] if m["kind"] == "bmc"}
    assert set(bmcs) == {f"{n.name}-bmc" for n in containers(plan)}
    for n in containers(plan):
        row = bmcs[f"{n.name}-bmc"]
        assert row["state"] == "running" and row["addresses"] == {"bmc0": n.bmc.address}
        assert row["role"] == f"{n.bmc.protocol}:{n.bmc.port}"
    vms = {m["name"]: m for m in doc["members"] if m["kind"] == "vm"}
    assert set(vms) == vm_nodes(plan)
    for name, row in vms.items():
        node = next(n for n in plan.nodes if n.name == name)
        assert row["state"] == "running" and row["addresses"] == {"bmc0": node.bmc.address}, row


def test_no_bmc_password_in_plain_text_on_disk_or_in_podman(up: subprocess.CompletedProcess[str]) -> None:
    assert up.returncode == 0, up.stderr
    ids = podman("ps", "-aq", "--filter", f"label=io.aisite.lab={SITE}", "--filter", "label=io.aisite.role=bmc").split()
    ids += podman("ps", "-aq", "--filter", f"label=io.aisite.lab={SITE}", "--filter", "label=io.aisite.role=vm").split()
    assert BMC_PASSWORD not in podman("inspect", *ids)  # not in any container's command, env or labels
    for path in (ROOT / ".aisite").rglob("*"):
        if path == LAB_SECRET_FILE and REUSE:
            # The one place `make lab` keeps the generated password: git-ignored, readable by its owner alone.
            assert path.stat().st_mode & 0o077 == 0, oct(path.stat().st_mode)
        elif path.is_file() and path.stat().st_size < 1_000_000:
            assert BMC_PASSWORD.encode() not in path.read_bytes(), path


def test_second_up_changes_nothing(up: subprocess.CompletedProcess[str], stack_file: Path) -> None:
    assert up.returncode == 0, up.stderr
    again = run_cli("lab", "up", str(stack_file), "--json", env=BMC_ENV)
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["networks_created"] == [] and report["containers_started"] == [] and report["links_created"] == 0
    assert report["bmcs_started"] == [] and report["vms_started"] == []
    # The install image `lab up` built beside the lab is cached: this up found it, and `aisite provision` will.
    ready = re.fullmatch(
        r"the install image debian-12-\w+ is ready for `aisite provision` \((\d+) s\)",
        report["beside"],
    )
    assert ready and int(ready[1]) < 30, report["beside"]  # found, not built: a build takes minutes
