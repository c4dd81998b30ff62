"""The lab's topology is the plan's: a container per node and fabric switch, a veth per rail and fabric cable."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from aisite.lab import lab as lablab
from aisite.lab import mirror
from aisite.lab.podman import LabError
from aisite.lab.topology import lab_topology
from aisite.loader import load_site, parse_site
from aisite.paths import mirror_dir
from aisite.plan import FABRIC_ROLES, build_plan
from aisite.provision import image
from aisite.render.inventory import inventory
from tests.conftest import STACKS, commit_file, git


@pytest.mark.parametrize("stack", STACKS)
def test_topology_follows_the_plan(stack: str) -> None:
    plan = build_plan(load_site(stack))
    topo = lab_topology(plan)
    fabric = [s for s in plan.switches if s.role in FABRIC_ROLES]
    # A node to install runs as a VM (its container is its BMC too); the boot server is a container of its own.
    vms = {t.node for t in plan.provisioning.targets} if plan.provisioning else set()
    boot = ["boot-server"] if plan.provisioning else []
    nodes = [n.name for n in plan.nodes if n.name not in vms]
    assert [c.host for c in topo.containers] == boot + nodes + [s.name for s in fabric]
    assert [v.node for v in topo.vms] == [n.name for n in plan.nodes if n.name in vms]
    assert [b.node for b in topo.bmcs] == nodes
    for v in topo.vms:
        node = next(n for n in plan.nodes if n.name == v.node)
        assert v.bmc.protocol == "ipmi" and v.bmc.address == node.bmc.address
        assert v.nics[0] == node.management.mac and v.ports[0].address == node.management.address
    cables = [c for c in plan.cables if c.kind in ("rail", "fabric")]
    assert len(topo.links) == len(cables)
    for link, cable in zip(topo.links, cables, strict=True):
        assert (link.a_port, link.b_port) == (cable.a_port, cable.b_port)
        assert link.b_mtu == plan.roce.switch_mtu
        assert link.a_mtu == (plan.roce.host_mtu if cable.kind == "rail" else plan.roce.switch_mtu)
    ends = [(lk.a, lk.a_port) for lk in topo.links] + [(lk.b, lk.b_port) for lk in topo.links]
    assert len(ends) == len(set(ends))


def test_containers_are_where_the_inventory_looks() -> None:
    plan = build_plan(load_site("lab"))
    topo = lab_topology(plan)
    hosts = {h: v for g in inventory(plan)["all"]["children"].values() for h, v in g["hosts"].items() if v}
    for c in topo.containers:
        # The address Ansible connects to, which `lab up` writes into known_hosts.
        assert hosts[c.host]["ansible_host"] == c.address
    gpu01 = topo.container("gpu01")
    assert [(a.interface, a.address) for a in gpu01.attachments] == [("mgmt0", "10.250.1.3"), ("stor0", "10.250.2.2")]
    leaf = topo.container("leaf01")
    assert leaf.image == "frr" and leaf.attachments[0].interface == "eth0"
    assert {n.purpose: n.subnet for n in topo.networks} == {
        "management": "10.250.1.0/24",
        "storage": "10.250.2.0/24",
        "oob": "10.250.0.0/24",
    }


@pytest.mark.parametrize("stack", STACKS)
def test_every_lab_interface_has_its_own_fixed_mac(stack: str) -> None:
    """Fixed MACs: a container recreated at an address keeps the MAC the host's neighbour entry holds (a new one
    left a recreated BMC emulator unreachable for up to ~45 s)."""
    site = load_site(stack)
    topo = lab_topology(build_plan(site))
    macs = [a.mac for c in topo.containers for a in c.attachments] + [b.mac for b in topo.bmcs]
    macs += [m for v in topo.vms for m in (v.bmc.mac, *v.nics, *(p.mac for p in v.ports))]
    assert len(macs) == len(set(macs))
    assert all(int(m[:2], 16) & 0b11 == 0b10 for m in macs), "locally administered unicast"
    assert lab_topology(build_plan(load_site(stack))) == topo
    for b in topo.bmcs:  # the emulator reports the NIC the node's container has
        assert b.node_mac == topo.container(b.node).attachments[0].mac


def test_declared_macs_are_the_lab_containers(lab: dict[str, Any]) -> None:
    node = lab["gpu_nodes"][0]["nodes"][0]
    node["management"] = {"mac": "aa:bb:cc:00:00:01"}
    node.setdefault("bmc", {})["mac"] = "aa:bb:cc:00:00:02"
    topo = lab_topology(build_plan(parse_site(lab, "test")))
    gpu = next(b for b in topo.bmcs if b.mac == "aa:bb:cc:00:00:02")
    assert gpu.node_mac == "aa:bb:cc:00:00:01" == topo.container(gpu.node).attachments[0].mac


def test_ceph_fuse_mounts_get_dev_fuse_and_nothing_else_does(lab: dict[str, Any]) -> None:
    """/dev/fuse goes to the containers that mount CephFS (the first monitor lays it out, the GPU nodes read the
    data sets), and a lab without Ceph passes no device at all."""
    plan = build_plan(parse_site(lab, "lab"))
    assert plan.ceph is not None and plan.ceph.gpu_client is not None
    topo = lab_topology(plan)
    with_fuse = {c.host for c in topo.containers if c.devices}
    vms = {v.node for v in topo.vms}
    assert with_fuse == {plan.ceph.monitors[0]} | ({n.name for n in plan.by_role("gpu")} - vms)
    assert all(c.devices == ("/dev/fuse",) for c in topo.containers if c.devices)
    del lab["storage_nodes"]["ceph"]
    assert not any(c.devices for c in lab_topology(build_plan(parse_site(lab, "lab"))).containers)


def test_lab_ranges_stay_on_the_lab() -> None:
    """The lab stack's ranges are its own (10.250.0.0/15): never a real site's, and never this machine's."""
    from ipaddress import IPv4Network

    lab_net = IPv4Network("10.250.0.0/15")
    plan = build_plan(load_site("lab"))
    nets = plan.networks
    for net in (
        nets.oob,
        nets.management,
        nets.storage,
        nets.loopbacks,
        nets.p2p,
        nets.pods,
        nets.services,
        *nets.rails,
    ):
        assert IPv4Network(net).subnet_of(lab_net), net
    for other in ("dc1", "h100pod"):
        o = build_plan(load_site(other)).networks
        for net in (o.oob, o.management, o.storage, *o.rails):
            assert not IPv4Network(net).overlaps(lab_net)


def test_the_lab_mirror_serves_one_repository_and_stops(tmp_path: Path) -> None:
    """The git mirror nodes pull from: serves the repository at url(plan) while the block runs, on the address it
    is given (here loopback, in the lab the management bridge's); afterwards nothing of it runs. A pid file that
    names another program is dropped, never acted on."""
    plan = SimpleNamespace(site="mirrortest", networks=SimpleNamespace(gateway=lambda purpose: "127.0.0.1"))
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit = commit_file(repo, "a.txt", "a\n", "one")
    try:
        with mirror.serving(plan, repo) as url:  # type: ignore[arg-type]
            assert url == "git://127.0.0.1/mirrortest.git"
            out = subprocess.run(["git", "ls-remote", url, "main"], capture_output=True, text=True, check=True)
            assert out.stdout.split() == [commit, "refs/heads/main"]
            pid = int((mirror_dir("mirrortest") / "pid").read_text())
            assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"git-daemon")
        assert not (mirror_dir("mirrortest") / "pid").exists()
        assert not Path(f"/proc/{pid}").exists()
        (mirror_dir("mirrortest") / "pid").write_text(f"{os.getpid()}\n")
        assert mirror.stop("mirrortest") is False  # this test's own process: not a git daemon, left alone
        assert not (mirror_dir("mirrortest") / "pid").exists()
    finally:
        shutil.rmtree(mirror_dir("mirrortest").parent, ignore_errors=True)


def test_a_lab_too_big_for_the_machines_inotify_limit_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lab: dict[str, Any]
) -> None:
    """Past fs.inotify.max_user_instances, the next containers' systemd exits at once: `lab up` says what to raise
    instead of starting a lab that half runs."""
    limit = tmp_path / "max_user_instances"
    limit.write_text("128\n")
    monkeypatch.setattr(lablab, "INOTIFY_LIMIT", limit)
    small = lab_topology(build_plan(parse_site(lab, "lab")))
    lablab._check_inotify(small)  # the lab stack: well inside Debian's default
    lab["gpu_nodes"][0] |= {"count": 32, "nodes": []}
    lab["fabric"]["scalable_unit"] = 32
    lab["switches"]["leaves"]["ports"] = 64
    lab["fabric"]["oversubscription"] = {"leaves": 16}  # 32 nodes' rails on two uplinks
    big = lab_topology(build_plan(parse_site(lab, "lab")))
    with pytest.raises(LabError, match=r"41 systemd containers need about 278 inotify instances.*is 128"):
        lablab._check_inotify(big)
    limit.write_text("278\n")
    lablab._check_inotify(big)


_UP_STEPS = (
    "_check_inotify",
    "_remove_stale",
    "_ensure_networks",
    "_ensure_containers",
    "_restart_stopped",
    "_ensure_links",
    "_ensure_ssh",
    "_ensure_bmcs",
    "_ensure_vms",
)


def _lab_up_steps_stubbed(monkeypatch: pytest.MonkeyPatch, images_built: Any, last_step: Any) -> None:
    """`lab.up` with podman's steps replaced: what it runs beside them and how it waits is what is tested."""
    monkeypatch.setattr(lablab, "ensure_tools", list)
    monkeypatch.setattr(lablab.images, "ensure_images", images_built)
    monkeypatch.setattr(lablab.images, "ensure_pull_wheels", lambda *a: None)
    for step in _UP_STEPS:
        monkeypatch.setattr(lablab, step, lambda *a: None)
    monkeypatch.setattr(lablab, "_ensure_vms", last_step)


def test_lab_up_runs_beside_while_its_images_build_and_returns_only_once_that_ended(
    monkeypatch: pytest.MonkeyPatch, lab: dict[str, Any]
) -> None:
    """The install image builds while the lab's own images do (`beside` starts before they end), and `up` waits for
    it: its line is in the report, and a step that fails still waits for it, so no build outlives the command."""
    topo = lab_topology(build_plan(parse_site(lab, "lab")))
    started, lab_done, ended = threading.Event(), threading.Event(), threading.Event()

    def images_built(cache: Path, say: Any) -> dict[str, str]:
        assert started.wait(10), "beside did not start while the lab's images were building"
        return {"bmc": "bmc-tag", "vm": "vm-tag"}

    def beside() -> str:
        started.set()
        assert lab_done.wait(10)
        time.sleep(0.2)  # still running when the lab's last step ends: `up` must wait
        ended.set()
        return "the install image is ready"

    said: list[str] = []
    _lab_up_steps_stubbed(monkeypatch, images_built, lambda *a: lab_done.set())
    report = lablab.up(topo, Path("/nonexistent"), said.append, {"lab-bmc": ("admin", "x")}, beside)
    assert ended.is_set() and report.beside == "the install image is ready"
    assert said == ["waiting for what runs beside the lab (the install image's build)"]

    def fails(*a: Any) -> None:
        lab_done.set()
        raise LabError("a container did not start")

    for event in (started, lab_done, ended):
        event.clear()
    _lab_up_steps_stubbed(monkeypatch, images_built, fails)
    with pytest.raises(LabError, match="did not start"):
        lablab.up(topo, Path("/nonexistent"), said.append, {"lab-bmc": ("admin", "x")}, beside)
    assert ended.is_set()


def test_the_install_image_prepared_ahead_says_what_it_did_and_a_failure_is_said_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lab: dict[str, Any]
) -> None:
    prov = build_plan(parse_site(lab, "lab")).provisioning
    assert prov is not None
    # A complete image folder of this recipe is taken as built: nothing runs.
    folder = tmp_path / f"debian-12-{image.digest('debian-12', prov.mirror, prov.image_packages)}"
    folder.mkdir()
    (folder / "image.json").write_text(json.dumps({"os": "debian-12", "kernel_version": "6.1", "digest": "d"}))
    for name in ("rootfs.tar.zst", "vmlinuz", "installer.img"):
        (folder / name).write_text("x")
    assert image.load(folder) is not None
    line = image.prepare_site_images(prov, tmp_path, print)
    assert line.startswith(f"the install image {folder.name} is ready for `aisite provision`"), line

    def broken(*a: Any) -> None:
        raise image.ImageError("debootstrap bookworm from http://deb.debian.org/debian failed (exit 1): no route")

    monkeypatch.setattr(image, "ensure_image", broken)
    line = image.prepare_site_images(prov, tmp_path / "empty", print)
    assert line == (
        "the install image was not built ahead (debootstrap bookworm from http://deb.debian.org/debian failed "
        "(exit 1): no route); `aisite provision` builds it"
    )
