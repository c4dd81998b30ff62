"""The BMCs: a changed lab password, a container gone behind podman's back, the out-of-band layer (power,
inventory, one-time and virtual-media boot, errors per node), the Pulumi provider against the emulators, a BIOS
change by hand rolled back, and discovery of declared, missing and undeclared BMCs."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from aisite import oob
from aisite.components.bmc import BmcStateProvider
from aisite.lab import firmware as lab_firmware
from aisite.lab import images, lab
from aisite.lab.bmc import system_uuid
from aisite.lab.topology import lab_mac, lab_topology, vm_nodes
from aisite.paths import members_file, provision_dir
from aisite.plan import Plan
from tests.conftest import ROOT, run_cli
from tests.lab.common import (
    BMC_ENV,
    BMC_PASSWORD,
    OPS_PASSWORD,
    SITE,
    containers,
    ipmitool,
    podman,
    redfish,
    redfish_power,
    rotating,
    vm_answers,
    vm_ssh,
    wait_for,
)


@rotating("restarts")
def test_a_changed_bmc_password_reconfigures_the_emulators(
    up: subprocess.CompletedProcess[str], stack_file: Path, plan: Plan
) -> None:
    """`make lab` replaces a password the BMCs would refuse: the next `lab up` configures the emulators with the
    new one (they carry a bcrypt digest of their credentials, never the password)."""
    other = "other-bmc-pw-4Kd"
    rf = next(n for n in plan.nodes if n.bmc.protocol == "redfish")
    ipmi = next(n for n in plan.nodes if n.bmc.protocol == "ipmi")
    every = sorted(f"aisite-{SITE}-{n.name}-bmc" for n in containers(plan))
    # A VM's container is its BMC too: made again, with its disk (a volume of its own) and its power state kept.
    vms = sorted(f"aisite-{SITE}-{name}" for name in vm_nodes(plan))
    r = run_cli("lab", "up", str(stack_file), "--json", env=BMC_ENV | {"AISITE_LAB_BMC_PASSWORD": other})
    try:
        assert r.returncode == 0, r.stderr
        assert sorted(json.loads(r.stdout)["bmcs_started"]) == every
        assert sorted(json.loads(r.stdout)["vms_started"]) == vms
        assert redfish(rf.bmc.address, "/redfish/v1/Systems", password=other)[0] == 200
        assert redfish(rf.bmc.address, "/redfish/v1/Systems")[0] == 401
        assert ipmitool(ipmi.bmc.address, "power", "status", password=other).returncode == 0
        assert ipmitool(ipmi.bmc.address, "power", "status").returncode != 0
        ids = podman("ps", "-aq", "--filter", f"label=io.aisite.lab={SITE}", "--filter", "label=io.aisite.role=bmc")
        assert other not in podman("inspect", *ids.split())
    finally:
        back = run_cli("lab", "up", str(stack_file), "--json", env=BMC_ENV)
    assert back.returncode == 0, back.stderr
    assert sorted(json.loads(back.stdout)["bmcs_started"]) == every
    assert redfish(rf.bmc.address, "/redfish/v1/Systems")[0] == 200
    for vm in vm_nodes(plan):  # powered on again from its own disk, at the version it was installed at
        wait_for(f"{vm} back on SSH", lambda vm=vm: vm_answers(plan, vm), 300)
        marker = json.loads(vm_ssh(plan, vm, "cat /etc/aisite/installed.json"))
        assert marker["version"] == json.loads((provision_dir(SITE) / f"{vm}.json").read_text())["installed"]["version"]


def test_a_container_gone_behind_podmans_back_is_started_again(
    up: subprocess.CompletedProcess[str], stack_file: Path, plan: Plan
) -> None:
    """Its monitor and init killed outright, podman 4 still reads a container as running (it learns of an exit
    from conmon alone), as CI found a whole lab restored from a disk image: status says `gone`, `up` starts it."""
    node = next(n for n in plan.nodes if n.bmc.protocol == "redfish")
    name = f"aisite-{SITE}-{node.name}-bmc"
    conmon, init = podman("inspect", "--format", "{{.State.ConmonPid}} {{.State.Pid}}", name).split()
    os.kill(int(conmon), signal.SIGKILL)
    os.kill(int(init), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{init}/ns/net").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert podman("inspect", "--format", "{{.State.Status}}", name).strip() == "running"
    rows = json.loads(run_cli("lab", "status", str(stack_file), "--json").stdout)["members"]
    assert next(r for r in rows if r["container"] == name)["state"] == "gone"
    again = run_cli("lab", "up", str(stack_file), "--json", env=BMC_ENV)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["bmcs_started"] == [name]
    assert redfish(node.bmc.address, "/redfish/v1/Systems")[0] == 200
    rows = json.loads(run_cli("lab", "status", str(stack_file), "--json").stdout)["members"]
    assert next(r for r in rows if r["container"] == name)["state"] == "running"


def power_of(plan: Plan, node_name: str) -> str:
    """on | off as the node's BMC reports it, over its own protocol."""
    node = next(n for n in plan.nodes if n.name == node_name)
    if node.bmc.protocol == "redfish":
        system = redfish(node.bmc.address, f"/redfish/v1/Systems/{system_uuid(SITE, node.name)}")[1]
        return str(system["PowerState"]).lower()
    return ipmitool(node.bmc.address, "power", "status").stdout.split()[-1]


def deploy_oob(stack_file: Path, *args: str, password: str = BMC_PASSWORD) -> tuple[int, dict[str, Any], str]:
    env = BMC_ENV | {"AISITE_LAB_BMC_PASSWORD": password}
    r = run_cli("deploy", str(stack_file), "--layer", "oob", "--json", *args, env=env)
    assert password not in r.stdout + r.stderr and OPS_PASSWORD not in r.stdout + r.stderr
    return r.returncode, json.loads(r.stdout), r.stderr


@rotating("bmcs")
def test_bmcs_power_every_node_and_save_its_inventory(
    up: subprocess.CompletedProcess[str], oob_stack_file: Path, plan: Plan
) -> None:
    rc, doc, err = deploy_oob(oob_stack_file)
    assert rc == 0, doc["failures"] or err
    for node in plan.nodes:
        assert power_of(plan, node.name) == "on", node.name
        inv = json.loads((ROOT / ".aisite" / SITE / "bmc" / f"{node.name}.json").read_text())
        assert inv["node"] == node.name and inv["protocol"] == node.bmc.protocol and inv["power"] == "on"
        if node.bmc.protocol == "redfish":
            # sushy-tools' fake driver: a manufacturer and a NIC MAC, no serial or firmware inventory.
            assert inv["manufacturer"] == "Sushy Emulator" and len(inv["macs"]) == 1, inv
            assert inv["uuid"] == system_uuid(SITE, node.name) and "firmware" in inv["not_reported"]
        else:
            assert inv["bmc_firmware"], inv  # ipmi_sim answers mc info; it has no FRU data
        # NTP (site.ntp_servers) and the declared account: neither emulator offers them, and each says so.
        if node.bmc.protocol == "redfish":
            assert [s.split(":")[0] for s in inv["skipped"]] == ["ntp", "accounts"], inv
            assert "no ManagerNetworkProtocol" in inv["skipped"][0] and "no AccountService" in inv["skipped"][1]
        else:
            assert inv["skipped"] == [
                "ntp: IPMI has no standard NTP setting (set it over Redfish or the vendor tool)",
                "accounts: kept over Redfish only",
            ]
        assert doc["skipped"][f"{node.name}-bmc"]["bmc"] == inv["skipped"]
    rc, doc, err = deploy_oob(oob_stack_file)
    assert rc == 0 and {h: r["changed"] for h, r in doc["recap"].items()} == {f"{n.name}-bmc": 0 for n in plan.nodes}


@rotating("bmcs")
def test_a_node_powered_off_by_hand_is_powered_on_again(
    up: subprocess.CompletedProcess[str], oob_stack_file: Path, plan: Plan
) -> None:
    by_proto = {n.bmc.protocol: n for n in reversed(plan.nodes)}
    rf, ipmi = by_proto["redfish"], by_proto["ipmi"]
    path = f"/redfish/v1/Systems/{system_uuid(SITE, rf.name)}/Actions/ComputerSystem.Reset"
    assert redfish(rf.bmc.address, path, body={"ResetType": "ForceOff"})[0] in (200, 202, 204)
    assert ipmitool(ipmi.bmc.address, "power", "off").returncode == 0
    wait_for("both nodes off", lambda: power_of(plan, rf.name) == power_of(plan, ipmi.name) == "off", 30)
    rc, doc, err = deploy_oob(oob_stack_file)
    assert rc == 0, doc["failures"] or err
    changed = {h for h, r in doc["recap"].items() if r["changed"]}
    assert {f"{rf.name}-bmc", f"{ipmi.name}-bmc"} <= changed <= {f"{rf.name}-bmc", f"{ipmi.name}-bmc"}
    assert power_of(plan, rf.name) == power_of(plan, ipmi.name) == "on"


@rotating("bmcs")
def test_a_one_time_pxe_boot_is_set_for_the_nodes_asked(
    up: subprocess.CompletedProcess[str], oob_stack_file: Path, plan: Plan
) -> None:
    by_proto = {n.bmc.protocol: n for n in plan.nodes}
    rf, ipmi = by_proto["redfish"], by_proto["ipmi"]
    assert ipmitool(ipmi.bmc.address, "chassis", "bootdev", "disk").returncode == 0
    rc, doc, err = deploy_oob(oob_stack_file, "--one-time-boot", "pxe", "--limit", f"{rf.name}-bmc,{ipmi.name}-bmc")
    assert rc == 0, doc["failures"] or err
    assert set(doc["recap"]) == {f"{rf.name}-bmc", f"{ipmi.name}-bmc"}
    boot = redfish(rf.bmc.address, f"/redfish/v1/Systems/{system_uuid(SITE, rf.name)}")[1]["Boot"]
    assert boot["BootSourceOverrideTarget"] == "Pxe"
    flags = ipmitool(ipmi.bmc.address, "chassis", "bootparam", "get", "5").stdout
    assert "Force PXE" in flags and "only next boot" in flags
    wait_for("nodes on after the restart", lambda: power_of(plan, rf.name) == power_of(plan, ipmi.name) == "on", 60)


@rotating("bmcs")
def test_a_virtual_media_boot_inserts_the_image_and_boots_from_it(
    up: subprocess.CompletedProcess[str], oob_stack_file: Path, plan: Plan
) -> None:
    by_proto = {n.bmc.protocol: n for n in plan.nodes}
    rf, ipmi = by_proto["redfish"], by_proto["ipmi"]
    # The image server: inside the Redfish BMC's own container, on its loopback (nothing leaves the lab).
    bmc = f"aisite-{SITE}-{rf.name}-bmc"
    podman("exec", bmc, "sh", "-c", "mkdir -p /tmp/media && head -c 65536 /dev/urandom > /tmp/media/install.iso")
    podman("exec", "-d", bmc, "/opt/sushy/bin/python", "-m", "http.server", "8088", "--bind", "127.0.0.1",
           "--directory", "/tmp/media")  # fmt: skip
    url = "http://127.0.0.1:8088/install.iso"
    wait_for("the image server", lambda: "install.iso" in podman("exec", bmc, "sh", "-c", "ls /tmp/media"), 10)
    time.sleep(1)
    args = ("--one-time-boot", "cd", "--boot-media", url, "--limit", f"{rf.name}-bmc,{ipmi.name}-bmc")
    rc, doc, err = deploy_oob(oob_stack_file, *args)
    assert rc == 1, err
    # IPMI cannot attach an image: that node fails with the reason, the Redfish one goes on.
    assert [f.split(":")[0] for f in doc["failures"]] == [f"{ipmi.name}-bmc"], doc["failures"]
    assert "cannot insert virtual media" in doc["failures"][0]
    system = f"/redfish/v1/Systems/{system_uuid(SITE, rf.name)}"
    cd = redfish(rf.bmc.address, f"{system}/VirtualMedia/Cd")[1]
    assert cd["Image"] == url and cd["Inserted"] is True, cd
    assert redfish(rf.bmc.address, system)[1]["Boot"]["BootSourceOverrideTarget"] == "Cd"
    wait_for("the node on after the restart", lambda: power_of(plan, rf.name) == "on", 60)
    bad = run_cli("deploy", str(oob_stack_file), "--layer", "oob", "--one-time-boot", "pxe", "--boot-media", url)
    assert bad.returncode == 2 and "--boot-media" in bad.stderr


@rotating("bmcs")
def test_bmc_errors_name_the_node_and_the_others_carry_on(
    up: subprocess.CompletedProcess[str], oob_stack_file: Path, plan: Plan
) -> None:
    ipmi = next(n for n in plan.nodes if n.bmc.protocol == "ipmi")
    podman("pause", f"aisite-{SITE}-{ipmi.name}-bmc")  # a BMC that does not answer
    try:
        rc, doc, _ = deploy_oob(oob_stack_file)
    finally:
        podman("unpause", f"aisite-{SITE}-{ipmi.name}-bmc")
    assert rc == 1 and doc["status"] == "failed"
    assert [f.split(":")[0] for f in doc["failures"]] == [f"{ipmi.name}-bmc"]
    assert "no IPMI session" in doc["failures"][0] and ipmi.bmc.address in doc["failures"][0]
    assert all(r["failed"] == 0 for h, r in doc["recap"].items() if h != f"{ipmi.name}-bmc")
    rc, doc, _ = deploy_oob(oob_stack_file, password="not-the-bmc-password")
    assert rc == 1
    assert sorted(f.split(":")[0] for f in doc["failures"]) == sorted(f"{n.name}-bmc" for n in plan.nodes)
    for n in plan.nodes:
        (msg,) = [f for f in doc["failures"] if f.startswith(f"{n.name}-bmc:")]
        assert n.bmc.address in msg and "lab-bmc" in msg
        assert ("refused the credentials" if n.bmc.protocol == "redfish" else "no IPMI session") in msg, msg


def provider_props(plan: Plan, node_name: str, **extra: Any) -> dict[str, Any]:
    node = next(n for n in plan.nodes if n.name == node_name)
    return {
        "node": node.name,
        "protocol": node.bmc.protocol,
        "address": node.bmc.address,
        "port": node.bmc.port,
        "username": "admin",
        "password": BMC_PASSWORD,
        "power": "on",
        "tls_verify": node.bmc.tls_verify,
        "one_time_boot": None,
        "timeout": 5,
    } | extra


@rotating("bmcs")
@pytest.mark.parametrize("protocol", ["redfish", "ipmi"])
def test_bmc_provider_reads_a_change_made_behind_its_back_and_puts_it_back(
    up: subprocess.CompletedProcess[str], plan: Plan, protocol: str
) -> None:
    """The Pulumi provider's methods, called as the engine would, against the lab's emulators."""
    node = next(n for n in plan.nodes if n.bmc.protocol == protocol)
    provider = BmcStateProvider()
    props = provider_props(plan, node.name)
    created = provider.create(props)
    assert created.id == f"{node.name}-bmc" and created.outs["power"] == "on"
    if protocol == "redfish":
        assert created.outs["macs"] and created.outs["uuid"] == system_uuid(SITE, node.name)
    oob.set_power(oob.Target(protocol, node.bmc.address, node.bmc.port, "admin", BMC_PASSWORD, False), "off")
    wait_for(f"{node.name} off", lambda: power_of(plan, node.name) == "off", 60)
    read = provider.read(created.id, created.outs)
    assert read.outs["power"] == "off"  # drift, as `pulumi refresh` shows it
    diff = provider.diff(created.id, read.outs, props)
    assert diff.changes and not diff.replaces
    updated = provider.update(created.id, read.outs, props)
    assert updated.outs["power"] == "on" and power_of(plan, node.name) == "on"
    assert not provider.diff(created.id, updated.outs, props).changes
    assert provider.diff(created.id, updated.outs, props | {"address": "10.252.0.99"}).replaces == ["address"]
    provider.delete(created.id, updated.outs)
    assert power_of(plan, node.name) == "on"  # forgetting a node does not power it off
    with pytest.raises(oob.BmcError, match=r"refused the credentials|no session"):
        provider.read(created.id, props | {"password": "not-the-bmc-password"})


@rotating("restarts")
def test_a_bios_change_by_hand_shows_in_diff_and_a_rollout_puts_it_back(
    up: subprocess.CompletedProcess[str], stack_file: Path, plan: Plan, tmp_path: Path
) -> None:
    """The lab's gpu group has a firmware baseline (BIOS settings and a release one ahead of a new emulator's).
    Turbo is turned off by hand at gpu01's Redfish BMC, pending until a reset as on a real BMC, and the node
    reset: `diff --firmware` shows gpu01 out of service for it (and its release) in a wave of its own, gpu02's IPMI
    BMC said unsupported. `maintenance start` rolls it: the settings set pending and the release requested
    through the BMC, the node reset through it (a container cannot reboot), read back; then nothing differs."""
    # Quarantines and rollouts earlier tests left (the health test quarantines gpu01) count against the budget,
    # which admits one GPU node here: without them gpu01 can go.
    for folder in ("health", "maintenance"):
        shutil.rmtree(ROOT / ".aisite" / SITE / folder, ignore_errors=True)
    members_file(SITE).unlink(missing_ok=True)
    node = next(n for n in plan.nodes if n.firmware and n.bmc.protocol == "redfish")
    ipmi = next(n for n in plan.nodes if n.firmware and n.bmc.protocol == "ipmi")
    assert node.firmware and ("ProcTurboMode", "Enabled") in node.firmware.bios
    addr, uuid = node.bmc.address, system_uuid(SITE, node.name)
    system = f"/redfish/v1/Systems/{uuid}"
    by_hand = {"Attributes": {"ProcTurboMode": "Disabled"}}
    assert redfish(addr, f"{system}/BIOS/Settings", body=by_hand, method="PATCH")[0] == 204
    assert redfish(addr, f"{system}/BIOS")[1]["Attributes"]["ProcTurboMode"] == "Enabled"  # pending
    assert redfish(addr, f"{system}/BIOS/Settings")[1]["Attributes"]["ProcTurboMode"] == "Disabled"
    assert redfish(addr, f"{system}/BIOS/Settings", body={"Attributes": {"NoSuch": "x"}}, method="PATCH")[0] == 400
    redfish_power(addr, uuid, "ForceRestart", "On")
    assert redfish(addr, f"{system}/BIOS")[1]["Attributes"]["ProcTurboMode"] == "Disabled"
    release = redfish(addr, system)[1]["BiosVersion"]
    # `maintenance start` compares the stack with its last commit: the stack in a repository of its own.
    repo = tmp_path / "site"
    repo.mkdir()
    stack = repo / stack_file.name
    shutil.copy(stack_file, stack)
    for args in (
        ("init", "-q"),
        ("add", stack.name),
        ("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "s"),
    ):
        subprocess.run(["git", *args], cwd=repo, check=True)

    r = run_cli("diff", str(stack), "--firmware", "--json", env=BMC_ENV)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    reasons = doc["maintenance"]["disruptions"][node.name]["reasons"]
    assert "firmware: BIOS ProcTurboMode 'Disabled' -> 'Enabled'" in reasons, reasons
    assert (f"firmware: BIOS release {release} -> {node.firmware.bios_version}" in reasons) == (
        release != node.firmware.bios_version
    )
    assert doc["maintenance"]["waves"] == [[node.name]] and ipmi.name in doc["firmware"]["unsupported"]
    assert doc["layers"] == {}

    started = time.monotonic()
    # The release's image, served by the lab's firmware mirror: aisite fetches it and checks its sha256 first.
    with lab_firmware.serving(plan):
        r = run_cli("maintenance", "start", str(stack), "--json", env=BMC_ENV)
    seconds = time.monotonic() - started
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads(r.stdout)
    member = doc["rollout"]["members"][node.name]
    assert doc["rollout"]["status"] == "done" and member["pending"] == "done", member
    assert [h.split()[1] for h in member["history"]] == [
        "cordon:",
        "drain:",
        "apply:",
        "reboot:",
        "verify:",
        "uncordon:",
    ]
    assert any("BIOS settings pending: ProcTurboMode='Enabled'" in s for s in doc["bmc_requests"]), doc
    pinned = f"(sha256 {node.firmware.bios_sha256})"
    assert any(s.endswith(pinned) for s in doc["bmc_requests"]) == (release != node.firmware.bios_version), doc
    assert member["installed"] == (
        f"BIOS release {node.firmware.bios_version} (BMC), image sha256 {node.firmware.bios_sha256}"
    ), member
    assert any("cannot reboot" in s for s in doc["skipped"]), doc["skipped"]
    assert [a.split(":")[0] for a in doc["accepted"]] == [node.name], doc["accepted"]  # its quick acceptance
    # Its one state went through the rollout's steps and is back in service.
    status = json.loads(run_cli("status", str(stack), "--json").stdout)
    row = next(m for m in status["members"] if m["name"] == node.name)
    assert row["state"] == "in-service" and status["gpus_out"] == 0, row
    said = [h.split(" ", 1)[1] for h in row["history"]]
    assert said[0].startswith("maintenance: maintenance (cordon pending): firmware: BIOS "), said
    assert any(x.startswith("maintenance: maintenance (verify pending): ") for x in said), said
    assert said[-1] == "maintenance: released -> in-service: done", said
    after = redfish(addr, system)[1]
    assert after["BiosVersion"] == node.firmware.bios_version and after["PowerState"] == "On"
    assert redfish(addr, f"{system}/BIOS")[1]["Attributes"]["ProcTurboMode"] == "Enabled"
    r = run_cli("oob", "firmware", str(stack), "--json", env=BMC_ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["matching"] == [node.name]
    print(f"firmware rollout of {node.name}: {seconds:.1f} s")


def test_discover_finds_declared_missing_and_undeclared_bmcs(
    up: subprocess.CompletedProcess[str], stack_file: Path, plan: Plan
) -> None:
    topo = lab_topology(plan)
    template = next(b for b in topo.bmcs if b.protocol == "redfish")
    extra = dataclasses.replace(
        template,
        name=f"aisite-{SITE}-extra01-bmc",
        node="extra01",
        node_mac=lab_mac(SITE, "extra01", "mgmt0"),
        mac=lab_mac(SITE, "extra01-bmc", "bmc0"),
        address=plan.networks.oob.replace(".0/24", ".200"),
    )
    lab.start_bmc(SITE, extra, images.image_tag("bmc"), {template.credentials: ("admin", BMC_PASSWORD)})
    gone = next(n for n in plan.nodes if n.bmc.protocol == "ipmi")
    try:
        wait_for("the new BMC answers", lambda: oob.answers("redfish", extra.address, 443), 60)
        podman("pause", f"aisite-{SITE}-{gone.name}-bmc")
        r = run_cli("oob", "discover", str(stack_file), "--json", env=BMC_ENV)
        # The new BMC is sent the site's credentials only when the operator names a range that holds it.
        named = run_cli(
            "oob", "discover", str(stack_file), "--json", "--probe-credentials", f"{extra.address}/32", env=BMC_ENV
        )
    finally:
        podman("unpause", f"aisite-{SITE}-{gone.name}-bmc")
        podman("rm", "-f", "-t", "0", extra.name)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert sorted(f["node"] for f in doc["declared"]) == sorted(n.name for n in plan.nodes if n is not gone)
    assert all(f["facts"]["power"] in ("on", "off") for f in doc["declared"])
    assert [(f["node"], f["address"]) for f in doc["missing"]] == [(gone.name, gone.bmc.address)]
    (new,) = doc["undeclared"]
    assert new["address"] == extra.address and new["protocol"] == "redfish"
    assert new["facts"] is None and new["error"] == oob.NO_CREDENTIALS, new
    assert named.returncode == 0, named.stderr
    (new,) = json.loads(named.stdout)["undeclared"]
    assert new["facts"]["name"] == "extra01" and new["facts"]["macs"], new
    assert BMC_PASSWORD not in r.stdout + r.stderr + named.stdout + named.stderr
