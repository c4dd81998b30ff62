"""The lab's VM node, installed over the network from power-off through its BMC (`make lab`'s `aisite provision`):
its install recorded and converged by the deploy; a wrong boot MAC fails at DHCP and the node keeps its install."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from aisite.lab.topology import vm_nodes
from aisite.paths import provision_dir
from aisite.plan import Plan
from tests.conftest import run_cli
from tests.lab.common import BMC_ENV, SITE, _write_stack, ipmitool, rotating, vm_answers, vm_ssh, wait_for


def test_the_vm_node_was_installed_from_power_off(
    up: subprocess.CompletedProcess[str], stack_file: Path, plan: Plan
) -> None:
    """The lab's VM was network-booted through its BMC, installed from the boot server and reached over SSH with the
    host keys its install reported; the site deploy converged it with a real kernel (NFS mounts, modules, sysctls
    applied, which containers only write). A second provision leaves it alone."""
    assert up.returncode == 0, up.stderr
    (vm,) = vm_nodes(plan)
    node = next(n for n in plan.nodes if n.name == vm)
    rec = json.loads((provision_dir(SITE) / f"{vm}.json").read_text())
    installed = rec["installed"]
    assert installed and installed["host_keys"], rec
    known = (provision_dir(SITE) / "known_hosts").read_text().splitlines()
    assert sorted(known) == sorted(f"{node.management.address} {k}" for k in installed["host_keys"])
    marker = json.loads(vm_ssh(plan, vm, "cat /etc/aisite/installed.json"))
    assert marker == {"node": vm, "profile": node.group, "os": "debian-12", "version": installed["version"]}
    links = {i["ifname"]: i for i in json.loads(vm_ssh(plan, vm, "ip -j addr"))}
    for iface in (node.management, node.storage):
        assert iface is not None
        got = links[iface.name]
        assert got["address"] == iface.mac and iface.address in [a["local"] for a in got["addr_info"]], got
    mounts = json.loads(vm_ssh(plan, vm, "findmnt -J -t nfs4 -o TARGET,SOURCE"))["filesystems"]
    assert sorted(m["source"] for m in mounts) == sorted(f"{e.address}:{e.path}" for e in plan.exports)
    assert "br_netfilter" in vm_ssh(plan, vm, "cat /proc/modules")
    assert vm_ssh(plan, vm, "sysctl -n net.ipv4.ip_forward").strip() == "1"
    again = run_cli("provision", str(stack_file), "--json", env=BMC_ENV)
    assert again.returncode == 0, again.stdout + again.stderr
    (row,) = json.loads(again.stdout)["nodes"]
    assert row["node"] == vm and row["status"] == "unchanged" and row["version"] == installed["version"]


@rotating("restarts")
def test_a_wrong_boot_mac_fails_at_dhcp_and_the_node_keeps_its_install(
    up: subprocess.CompletedProcess[str], stack_file: Path, plan: Plan, tmp_path: Path
) -> None:
    """The VM's boot MAC mistyped in the stack: provision arms that MAC and boots the VM through its BMC, but no
    network boot reaches the boot server (its DHCP has no lease for the VM's real MAC): the node fails at `dhcp`
    within the timeout, naming the MAC it waited for, and, failed before its installer ran, keeps its install on
    record. Then the VM is back on its disk and the right stack finds it unchanged."""
    assert up.returncode == 0, up.stderr
    (vm,) = vm_nodes(plan)
    node = next(n for n in plan.nodes if n.name == vm)
    record = provision_dir(SITE) / f"{vm}.json"
    before = json.loads(record.read_text())["installed"]
    data = yaml.safe_load(stack_file.read_text())
    site = data["config"]["aisite:site"]
    group = next(g for g in site["gpu_nodes"] if "install" in g)
    group["nodes"][0]["management"]["mac"] = "02:a1:5e:00:01:ee"
    site["provisioning"] |= {"install_timeout_s": 60, "retries": 0}
    wrong = _write_stack(tmp_path, yaml.safe_dump(data, sort_keys=False))
    try:
        r = run_cli("provision", str(wrong), "--reinstall", "--json", env=BMC_ENV)
        assert r.returncode == 1, r.stdout + r.stderr
        (row,) = json.loads(r.stdout)["nodes"]
        assert (row["status"], row["step"], row["attempts"], row["disk_touched"]) == ("failed", "dhcp", 1, False)
        assert "no network boot from 02:a1:5e:00:01:ee" in row["error"], row
        assert json.loads(record.read_text())["installed"] == before
        # Held out of service by provisioning while it failed (one state per member), with why.
        status = json.loads(run_cli("status", str(stack_file), "--json").stdout)
        held = next(m for m in status["members"] if m["name"] == vm)
        assert (held["state"], held["pending"]) == ("provision-failed", "provision"), held
        assert "no network boot from 02:a1:5e:00:01:ee" in held["message"]
    finally:
        # The one-time network boot found no DHCP offer and the VM's firmware went on to its disk (it is usually
        # back on SSH as provision gives up: no second boot spent); if not, power it off and on.
        try:
            wait_for(f"{vm} back on SSH from its disk", lambda: vm_answers(plan, vm), 120)
        except AssertionError:
            ipmitool(node.bmc.address, "power", "off")
            ipmitool(node.bmc.address, "power", "on")
            wait_for(f"{vm} back on SSH after a power cycle", lambda: vm_answers(plan, vm), 300)
        again = run_cli("provision", str(stack_file), "--json", env=BMC_ENV)
    assert again.returncode == 0, again.stdout + again.stderr
    (row,) = json.loads(again.stdout)["nodes"]
    assert row["status"] == "unchanged" and row["version"] == before["version"]
    status = json.loads(run_cli("status", str(stack_file), "--json").stdout)
    assert next(m for m in status["members"] if m["name"] == vm)["state"] == "in-service"
