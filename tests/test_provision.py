"""Provisioning: the model's checks, the plan's profiles and targets, the boot server's HTTP service (run for real
on loopback: tokens, files, reports), the installer's scripts, and `aisite provision`'s sequencing (waves, retries,
the failure paths, what is recorded) driven through a scripted World. The lab's VM installs for real in
tests/lab/."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import io
import json
import re
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from aisite.errors import SiteError
from aisite.loader import parse_site
from aisite.plan import ProvisioningPlan, ProvisionTarget, build_plan, plain
from aisite.plan.provisioning import missing_boot_macs
from aisite.playbooks import ROLES
from aisite.provision import image, run
from aisite.render.inventory import BOOT_SERVER, inventory
from tests.conftest import ROOT

LAB = ROOT / "stacks" / "Pulumi.lab.yaml"
V1 = "0123456789abcdef"  # a version as the boot server gives it (a digest's first 16 hex digits)
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIF7V9ITCcLwZIDrBJdhvD/Yx38T197ysAO8J3IguOvhK"


def lab_config() -> dict[str, Any]:
    return dict(yaml.safe_load(LAB.read_text())["config"]["aisite:site"])


def problems(config: dict[str, Any]) -> list[str]:
    try:
        parse_site(config)
    except SiteError as exc:
        return [str(p) for p in exc.problems]
    return []


# ------------------------------------------------------------------------------------------ model and checks
def test_the_lab_installs_its_vm_node_from_its_boot_server() -> None:
    p = build_plan(parse_site(lab_config()))
    assert p.provisioning is not None
    prov = p.provisioning
    assert prov.boot_server == "10.250.1.250" and prov.url == "http://10.250.1.250:8080"
    assert [t.node for t in prov.targets] == ["infer01"]
    t = prov.targets[0]
    assert (t.mac, t.address, t.profile) == ("02:a1:5e:00:01:f0", "10.250.1.240", "infer")
    assert t.storage is not None and t.storage.mac == "02:a1:5e:00:02:f0"
    profile = prov.profile("infer")
    assert [(q.number, q.fs, q.mount, q.size_mib) for q in profile.partitions] == [
        (1, "bios", None, 1),
        (2, "ext4", "/", None),
    ]
    # The boot server is in the inventory as a group of its own, with the provisioning plan its role reads.
    boot = inventory(p)["all"]["children"]["boot_server"]
    assert boot["hosts"] == {BOOT_SERVER: {"ansible_host": "10.250.1.250"}}
    assert boot["vars"]["aisite_provisioning"] == plain(prov)


def test_uefi_puts_an_efi_system_partition_first() -> None:
    config = lab_config()
    config["gpu_nodes"][1]["install"] = {
        "disk": "/dev/disk/by-id/nvme-SAMSUNG_1",
        "partitions": [
            {"mount": "/", "size_gb": 100},
            {"fs": "swap", "size_gb": 8},
            {"mount": "/var/lib/containerd", "fs": "xfs"},
        ],
    }
    prov = build_plan(parse_site(config)).provisioning
    assert prov is not None
    parts = prov.profile("infer").partitions
    assert [(q.fs, q.mount, q.size_mib) for q in parts] == [
        ("vfat", "/boot/efi", 512),
        ("ext4", "/", 102400),
        ("swap", None, 8192),
        ("xfs", "/var/lib/containerd", None),
    ]
    assert prov.profile("infer").boot_mode == "uefi"


def test_the_boot_server_address_is_reserved_from_the_pools() -> None:
    config = lab_config()
    config["provisioning"]["boot_server"] = "10.250.1.3"  # gpu01's address from the pool otherwise
    p = build_plan(parse_site(config))
    assert "10.250.1.3" not in {n.management.address for n in p.nodes}
    assert not problems(config)


def test_every_provisioning_problem_is_reported_at_once() -> None:
    config = lab_config()
    del config["provisioning"]
    config["gpu_nodes"][1]["nodes"][0]["management"].pop("mac")
    config["gpu_nodes"][1]["install"]["partitions"] = [
        {"mount": "/var", "size_gb": None},
        {"mount": "/var"},
        {"fs": "swap", "mount": "/swap"},
    ]
    config["gpu_nodes"][0]["install"] = {"boot_mode": "uefi", "partitions": [{"mount": "/boot/efi"}, {"mount": "/"}]}
    found = problems(config)
    assert "site.gpu_nodes[1].install: needs site.provisioning: the boot server that installs the nodes" in found
    assert "site.gpu_nodes[0].install: needs site.provisioning: the boot server that installs the nodes" in found
    assert not [f for f in found if "boot MAC" in f]  # a site may be declared before its MACs are known
    assert (
        "site.gpu_nodes[1].install.partitions[0].size_gb: only the last partition may take the rest of the disk"
        in found
    )
    assert "site.gpu_nodes[1].install.partitions[1].mount: /var is already partitions[0]" in found
    assert "site.gpu_nodes[1].install.partitions[2].mount: swap is not mounted: leave mount out" in found
    assert "site.gpu_nodes[1].install.partitions: no partition is mounted at /" in found
    assert (
        "site.gpu_nodes[0].install.partitions[0].mount: /boot/efi is the EFI system partition aisite adds in uefi mode"
        in found
    )


def test_the_boot_server_must_be_a_free_host_address_of_the_management_network() -> None:
    for address, message in (
        ("10.250.2.9", "10.250.2.9 is outside site.networks.management (10.250.1.0/24)"),
        ("10.250.1.1", "10.250.1.1 is the gateway address of site.networks.management"),
        ("10.250.1.5", "10.250.1.5 is already used by site.control_plane"),
        # A node's declared address taken by the boot server: said where the node declares it.
        (
            "10.250.1.240",
            "site.gpu_nodes[1].nodes[0].management.address: 10.250.1.240 is already used by site.provisioning",
        ),
    ):
        config = lab_config()
        config["provisioning"]["boot_server"] = address
        found = problems(config)
        assert any(message in f for f in found), (address, found)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("disk", "/dev/sda; reboot"),
        ("disk", "/dev/../etc/passwd"),
        ("kernel_args", ["console=ttyS0 $(reboot)"]),
        ("kernel_args", ['quiet"']),
        ("os", "ubuntu-24.04"),
        ("partitions", [{"mount": "/proc"}]),
        ("partitions", [{"mount": "/a b"}]),
    ],
)
def test_install_fields_take_only_what_reaches_the_installer_safely(key: str, value: Any) -> None:
    config = lab_config()
    config["gpu_nodes"][1]["install"][key] = value
    with pytest.raises(SiteError, match=r"site\.gpu_nodes\[1\]\.install"):
        parse_site(config)


# ------------------------------------------------------------------------------------------ the HTTP service
def _service_module() -> ModuleType:
    path = ROLES / "boot_server" / "files" / "aisite_boot_http.py"
    spec = importlib.util.spec_from_file_location("aisite_boot_http", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


svc = _service_module()


def _site_json(prov: ProvisioningPlan) -> dict[str, Any]:
    """What the role writes (templates/site.json.j2) for the lab's plan."""
    return {
        "provisioning": plain(prov),
        "images": [{"name": "debian-12-test", "os": "debian-12", "digest": "0123"}],
        "admin_users": [{"name": "alice", "ssh_keys": [KEY], "sudo": True}],
        "deploy_user": "root",
        "deploy_keys": [KEY],
        "dns_servers": ["10.250.1.250"],
        "domain": "lab.aisite.internal",
        "installer_args": ["console=ttyS0,115200n8"],
    }


class Boot:
    """The service on loopback, with a boot root and state of its own."""

    def __init__(self, tmp: Path) -> None:
        prov = build_plan(parse_site(lab_config())).provisioning
        assert prov is not None
        self.prov = prov
        self.root, self.state = tmp / "srv", tmp / "state"
        (self.root / "images" / "debian-12-test").mkdir(parents=True)
        for name in ("vmlinuz", "installer.img", "rootfs.tar.zst"):
            (self.root / "images" / "debian-12-test" / name).write_text(f"{name}\n")
        self.site = _site_json(prov)
        (self.root / "site.json").write_text(json.dumps(self.site))
        self.server = svc.Server(("127.0.0.1", 0), svc.Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.token = "controller-token-of-the-tests-0123456789"
        state = svc.State(self.root, self.state, self.url, hashlib.sha256(self.token.encode()).hexdigest())
        self.server.RequestHandlerClass = type("Bound", (svc.Handler,), {"state": state})
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def arm(self, mac: str, node: str, seconds: float = 600) -> None:
        (self.state / "armed" / f"{mac.replace(':', '-')}.json").write_text(
            json.dumps({"node": node, "expires": time.time() + seconds})
        )

    def get(self, path: str, controller: bool = True) -> tuple[int, bytes]:
        request = urllib.request.Request(f"{self.url}/{path}")
        if controller:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def post(self, path: str, body: str) -> int:
        req = urllib.request.Request(f"{self.url}/{path}", data=body.encode(), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return int(r.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)


@pytest.fixture
def boot(tmp_path: Path) -> Iterator[Boot]:
    b = Boot(tmp_path)
    yield b
    b.server.shutdown()
    b.server.server_close()


MAC = "02-a1-5e-00-01-f0"


def _token(script: bytes) -> str:
    m = re.search(rb"/n/([A-Za-z0-9_-]+)/vmlinuz", script)
    assert m, script
    return m.group(1).decode()


def test_an_unarmed_or_expired_node_is_sent_to_its_disk(boot: Boot) -> None:
    assert boot.get(f"boot/{MAC}")[1].endswith(b"exit\n")
    boot.arm(MAC, "infer01", seconds=-1)
    assert boot.get(f"boot/{MAC}")[1].endswith(b"exit\n")
    for path in ("boot/..%2f..%2fetc", "reports/../site", "n/short/vmlinuz", "versions/Nope"):
        assert boot.get(path)[0] in (403, 404), path


def test_an_armed_node_gets_the_installer_and_its_files_behind_a_one_time_token(boot: Boot) -> None:
    boot.arm(MAC, "infer01")
    code, script = boot.get(f"boot/{MAC}")
    assert code == 200
    text = script.decode()
    token = _token(script)
    assert f"aisite.url={boot.url}/n/{token}" in text
    assert "boot=aisite-install" in text and "aisite.disk=/dev/vda" in text and "aisite.mode=legacy" in text
    assert f"BOOTIF=01-{MAC}" in text and "console=ttyS0,115200n8" in text
    assert boot.get(f"n/{token}/vmlinuz") == (200, b"vmlinuz\n")
    assert boot.get(f"n/{token}/partitions.sfdisk")[1] == (
        b"label: gpt\nsize=1MiB, type=21686148-6449-6E6F-744E-656564454649\ntype=0FC63DAF-8483-4772-8E79-3D69D8477DE4\n"
    )
    assert boot.get(f"n/{token}/filesystems")[1] == b"2 ext4 /\n1 bios -\n"
    code, data = boot.get(f"n/{token}/node.tar")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        read = lambda name: tar.extractfile(members[name]).read().decode()  # noqa: E731
        assert read("etc/hostname") == "infer01\n"
        assert read("etc/systemd/network/10-aisite-mgmt0.link") == (
            "[Match]\nMACAddress=02:a1:5e:00:01:f0\n\n[Link]\nName=mgmt0\nMTUBytes=1500\n"
        )
        mgmt = read("etc/systemd/network/20-aisite-mgmt0.network")
        assert "Address=10.250.1.240/24\nGateway=10.250.1.1\nDNS=10.250.1.250\nDomains=lab.aisite.internal" in mgmt
        stor = read("etc/systemd/network/20-aisite-stor0.network")
        assert "Address=10.250.2.240/24" in stor and "Gateway" not in stor and "MTUBytes=9000" in stor
        assert read("root/.ssh/authorized_keys") == f"{KEY}\n" and members["root/.ssh/authorized_keys"].mode == 0o600
        assert members["root/.ssh"].mode == 0o700 and members["etc/sudoers.d/90-aisite-admins"].mode == 0o440
        assert read("etc/aisite/users") == "alice sudo\n"
        assert read("etc/default/grub.d/aisite.cfg") == 'GRUB_CMDLINE_LINUX="console=tty0 console=ttyS0,115200n8"\n'
        marker = json.loads(read("etc/aisite/installed.json"))
        assert (
            marker["node"] == "infer01" and marker["version"] == json.loads(boot.get("versions/infer01")[1])["version"]
        )
        assert all(m.uid == 0 and m.gid == 0 for m in members.values())
    # The same bytes every time (the version hashes them).
    assert boot.get(f"n/{token}/node.tar")[1] == data


def test_a_report_spends_the_token_and_a_reused_token_is_refused(boot: Boot) -> None:
    boot.arm(MAC, "infer01")
    first = _token(boot.get(f"boot/{MAC}")[1])
    # One token per arming: a second request (the node again, or anyone who learnt its MAC) gets none.
    assert boot.get(f"boot/{MAC}")[1].endswith(b"exit\n")
    # Arming again (provision's retry) mints a new token and revokes the first.
    boot.arm(MAC, "infer01")
    token = _token(boot.get(f"boot/{MAC}")[1])
    assert token != first and boot.get(f"n/{first}/vmlinuz")[0] == 403
    assert boot.post(f"n/{token}/report", "status started\nstep network\n") == 200
    assert boot.post(f"n/{token}/report", f"status installed\nstep done\nhostkey {KEY}\nhostkey bad key\n") == 200
    report = json.loads(boot.get("reports/infer01")[1])
    assert report["status"] == "installed" and report["host_keys"] == [KEY]
    assert [e["event"] for e in report["events"]] == ["ipxe", "started", "installed"]
    # Spent: refused, for files and reports alike; the node is disarmed and boots from its disk.
    assert boot.get(f"n/{token}/image.tar.zst")[0] == 403
    assert boot.post(f"n/{token}/report", "status installed\n") == 403
    assert boot.get(f"boot/{MAC}")[1].endswith(b"exit\n")
    # Only the tokens' digests are kept.
    assert token not in "".join(p.read_text() for p in (boot.state).rglob("*.json"))


def _raw(boot: Boot, request: bytes, source: str = "127.0.0.1") -> bytes:
    with socket.create_connection(boot.server.server_address[:2], timeout=5, source_address=(source, 0)) as conn:
        conn.sendall(request)
        out = b""
        while chunk := conn.recv(65536):
            out += chunk
        return out


def test_the_host_key_the_controller_made_goes_only_to_the_tokens_holder_and_then_is_gone(boot: Boot) -> None:
    """known_hosts is written from the controller's key before the install: the boot server hands the private key
    to the token's holder inside node.tar (not in the version: a new key each install), and forgets it when the
    node reports; a report naming another key changes nothing the controller trusts (the sequencing tests)."""
    key = run.new_host_key()
    (boot.state / "hostkeys").mkdir(exist_ok=True)
    (boot.state / "hostkeys" / "infer01").write_text(key.private)
    version = json.loads(boot.get("versions/infer01")[1])["version"]
    boot.arm(MAC, "infer01")
    token = _token(boot.get(f"boot/{MAC}")[1])
    with tarfile.open(fileobj=io.BytesIO(boot.get(f"n/{token}/node.tar")[1])) as tar:
        member = tar.getmember("etc/ssh/ssh_host_ed25519_key")
        assert member.mode == 0o600 and tar.extractfile(member).read().decode() == key.private  # type: ignore[union-attr]
        marker = json.loads(tar.extractfile("etc/aisite/installed.json").read())  # type: ignore[union-attr]
    assert marker["version"] == version
    derived = subprocess.run(
        ["ssh-keygen", "-y", "-f", "/dev/stdin"], input=key.private, capture_output=True, text=True, check=True
    )
    assert derived.stdout.split()[:2] == key.public.split()[:2]
    assert boot.post(f"n/{token}/report", f"status installed\nstep done\nhostkey {KEY}\n") == 200
    assert not (boot.state / "hostkeys" / "infer01").exists()


def test_a_token_serves_only_the_address_it_was_handed_to_and_only_while_armed(boot: Boot) -> None:
    boot.arm(MAC, "infer01")
    token = _token(boot.get(f"boot/{MAC}")[1])
    stolen = f"GET /n/{token}/node.tar HTTP/1.0\r\n\r\n".encode()
    assert _raw(boot, stolen, "127.0.0.2").startswith(b"HTTP/1.0 403")
    report = f"POST /n/{token}/report HTTP/1.0\r\nContent-Length: 17\r\n\r\nstatus installed\n".encode()
    assert _raw(boot, report, "127.0.0.2").startswith(b"HTTP/1.0 403")
    assert _raw(boot, stolen).startswith(b"HTTP/1.0 200")
    # The arming expires: its token with it, though it was never spent.
    (tok,) = (boot.state / "tokens").glob("*.json")
    tok.write_text(json.dumps(json.loads(tok.read_text()) | {"expires": time.time() - 1}))
    assert _raw(boot, stolen).startswith(b"HTTP/1.0 403")


def test_the_service_bounds_what_a_client_can_make_it_hold(boot: Boot) -> None:
    """The issue's reproducers: a negative or non-numeric Content-Length, a request line over 64 KiB, idle
    connections; each is refused or dropped, and the service keeps answering."""
    boot.arm(MAC, "infer01")
    token = _token(boot.get(f"boot/{MAC}")[1])
    for length in (b"-1", b"abc", b"+5", b"99999999999999999999"):
        answer = _raw(
            boot, b"POST /n/" + token.encode() + b"/report HTTP/1.0\r\nContent-Length: " + length + b"\r\n\r\n"
        )
        assert answer.split(b" ")[1] in (b"400", b"413"), (length, answer[:60])
    assert _raw(boot, b"GET /" + b"a" * 70_000 + b" HTTP/1.0\r\n\r\n").split(b" ")[1] == b"414"
    boot.server.RequestHandlerClass.timeout = 1  # type: ignore[attr-defined]
    idle = [socket.create_connection(boot.server.server_address[:2], timeout=5) for _ in range(50)]
    try:
        assert boot.get("boot.ipxe")[0] in (200, 404)  # still answering
        idle[0].settimeout(5)
        assert idle[0].recv(10) == b""  # the server dropped the silent client
    finally:
        for conn in idle:
            conn.close()


def test_under_pressure_the_longest_idle_connection_makes_room(boot: Boot) -> None:
    """Issue 64: the 64 connection slots could be held by clients that connect and send nothing, for 30 s at a
    time (Handler.timeout), so a node's install waited or failed. Every slot taken by silent clients, a node's
    request is still served at once: the connection idle longest is shed for it, and only that one."""
    server = boot.server
    assert server.RequestHandlerClass.timeout == 30  # type: ignore[attr-defined]
    held = []
    try:
        for _ in range(server.MAX_CONNECTIONS):  # type: ignore[attr-defined]
            held.append(socket.create_connection(server.server_address[:2], timeout=5))
            time.sleep(0.005)  # each idle a little longer than the next
        deadline = time.monotonic() + 5
        while len([s for s in server.waiting.values() if s is not None]) < len(held):  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, "the server did not take every connection"
            time.sleep(0.05)
        start = time.monotonic()
        assert boot.get("boot.ipxe")[0] in (200, 404)
        assert time.monotonic() - start < 3, "served at once, not after an idle client's 30 s"
        held[0].settimeout(5)
        assert held[0].recv(10) == b"", "the longest idle was shed"
        held[-1].settimeout(0.2)
        with pytest.raises(TimeoutError):
            held[-1].recv(10)  # the newest silent client is still connected
        assert server.shed >= 1  # type: ignore[attr-defined]
    finally:
        for conn in held:
            conn.close()


def test_reports_and_versions_answer_the_controller_only(boot: Boot) -> None:
    """They name nodes, their versions and the MAC of a node being installed: a machine on the provisioning network
    that asks without the controller's token (or with another) learns nothing, not even whether a node exists."""
    for path in ("reports/infer01", "versions/infer01", "reports/nope", "versions/nope"):
        assert boot.get(path, controller=False)[0] == 401, path
        forged = _raw(boot, f"GET /{path} HTTP/1.0\r\nAuthorization: Bearer {'x' * 40}\r\n\r\n".encode())
        assert forged.startswith(b"HTTP/1.0 401"), path
    assert boot.get("versions/infer01")[0] == 200 and boot.get("versions/nope")[0] == 404


def test_the_version_follows_what_the_install_writes(boot: Boot) -> None:
    before = json.loads(boot.get("versions/infer01")[1])["version"]
    site = copy.deepcopy(boot.site)
    site["provisioning"]["profiles"][0]["kernel_args"] = ["console=tty0"]
    (boot.root / "site.json").write_text(json.dumps(site))
    time.sleep(0.01)
    (boot.root / "site.json").touch()
    after = json.loads(boot.get("versions/infer01")[1])["version"]
    assert before != after
    (boot.root / "site.json").write_text(json.dumps(boot.site))
    assert json.loads(boot.get("versions/infer01")[1])["version"] == before


# ------------------------------------------------------------------------------------------ the installer
def test_the_installer_scripts_parse_and_the_image_recipe_names_them() -> None:
    for script in ("scripts/aisite-install", "hooks/aisite-installer"):
        r = subprocess.run(["sh", "-n", str(image.INSTALLER / script)], capture_output=True, text=True, check=False)
        assert r.returncode == 0, r.stderr
    recipe = json.loads(image.recipe("debian-12", "http://deb.debian.org/debian"))
    assert "linux-image-amd64" in recipe["packages"] and "grub-efi-amd64-bin" in recipe["packages"]
    assert any(name == "scripts/aisite-install" for name, _ in recipe["installer"])
    # A different mirror or installer is a different image.
    assert image.digest("debian-12", "http://mirror.example/debian") != image.digest(
        "debian-12", "http://deb.debian.org/debian"
    )


def test_an_incomplete_image_folder_is_not_taken_as_built(tmp_path: Path) -> None:
    folder = tmp_path / "debian-12-x"
    folder.mkdir()
    (folder / "image.json").write_text(json.dumps({"os": "debian-12", "kernel_version": "6.1", "digest": "x"}))
    assert image.load(folder) is None
    for name in ("vmlinuz", "installer.img", "rootfs.tar.zst"):
        (folder / name).write_text("x")
    loaded = image.load(folder)
    assert loaded is not None and loaded.digest == "x"


# ------------------------------------------------------------------------------------------ sequencing
class ScriptedWorld:
    """Nodes that behave as scripted: `behaviour[node]` is a list, one entry per attempt: "ok" (installs),
    "no-dhcp" (never reaches the boot server: a wrong boot MAC), "fail:<step>" (the installer reports a failure),
    "no-ssh" (installs but never answers SSH)."""

    def __init__(self, behaviour: dict[str, list[str]]) -> None:
        self.behaviour = behaviour
        self.attempt: dict[str, int] = {}
        self.armed: list[list[str]] = []
        self.disarmed: list[list[str]] = []
        self.booted: list[str] = []
        self.cycles: list[str] = []
        self.reports: dict[str, dict[str, Any]] = {}
        self.installed: dict[str, str] = {}
        self.keys: dict[str, str] = {}
        self.lock = threading.Lock()

    def arm(self, targets: Sequence[ProvisionTarget], host_keys: Mapping[str, run.HostKey]) -> None:
        self.armed.append([t.node for t in targets])
        for t in targets:
            self.reports[t.node] = {"events": []}
            # The node answers SSH with the key it was handed (its installer's report names another: KEY).
            self.keys[t.node] = host_keys[t.node].public

    def disarm(self, targets: Sequence[ProvisionTarget]) -> None:
        self.disarmed.append([t.node for t in targets])

    def boot_from_network(self, t: ProvisionTarget) -> None:
        with self.lock:
            self.booted.append(t.node)
            n = self.attempt[t.node] = self.attempt.get(t.node, 0) + 1
        what = self.behaviour[t.node][n - 1]
        now = time.time()
        if what == "no-dhcp":
            return
        events = [{"event": "ipxe", "time": now}, {"event": "started", "time": now + 0.1}]
        if what.startswith("fail:"):
            self.reports[t.node] = {"events": [*events, {"event": "failed", "time": now}], "step": what[5:]}
            return
        self.reports[t.node] = {
            "events": [*events, {"event": "installed", "time": now + 0.2}],
            "host_keys": [KEY],
            "version": V1,
        }
        if what == "ok":
            self.installed[t.node] = V1

    def power_cycle(self, t: ProvisionTarget) -> None:
        self.cycles.append(t.node)

    def report(self, node: str) -> dict[str, Any]:
        return self.reports.get(node, {})

    def version(self, node: str) -> str:
        return V1

    def installed_version(self, t: ProvisionTarget, host_keys: Sequence[str]) -> str | None:
        return self.installed.get(t.node) if list(host_keys) == [self.keys.get(t.node)] else None


def _plan(nodes: int, **over: Any) -> tuple[ProvisioningPlan, list[ProvisionTarget]]:
    prov = build_plan(parse_site(lab_config())).provisioning
    assert prov is not None
    base = prov.targets[0]
    targets = [ProvisionTarget(f"n{i}", f"n{i}.lab", base.profile, base.management, None) for i in range(1, nodes + 1)]
    fields = {"install_timeout_s": 60, "boot_timeout_s": 30, "retries": 1, "wave_size": 2} | over
    return ProvisioningPlan(**(plain_fields(prov) | fields | {"targets": tuple(targets)})), targets


def plain_fields(prov: ProvisioningPlan) -> dict[str, Any]:
    return {f: getattr(prov, f) for f in prov.__dataclass_fields__}


@pytest.fixture(autouse=False)
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "POLL_S", 0.01)


def _provision(world: ScriptedWorld, prov: ProvisioningPlan, targets: list[ProvisionTarget], **kw: Any) -> list[Any]:
    finished: list[str] = []
    out = run.provision(
        world,  # type: ignore[arg-type]
        prov,
        targets,
        kw.get("records", {}),
        reinstall=kw.get("reinstall", False),
        say=lambda node, what: None,
        done=lambda o: finished.append(o.node),
    )
    assert sorted(finished) == sorted(t.node for t in targets)
    return out


def test_a_wrong_boot_mac_times_out_with_its_own_error_while_the_wave_goes_on(
    fast: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    prov, targets = _plan(2, install_timeout_s=1, retries=0)
    world = ScriptedWorld({"n1": ["no-dhcp"], "n2": ["ok"]})
    start = time.monotonic()
    n1, n2 = _provision(world, prov, targets)
    # Trusted: the key the controller made and armed the node with, not the one its report names.
    assert n2.status == "installed" and n2.attempts == 1 and n2.host_keys == [world.keys["n2"]] != [KEY]
    assert n2.host_keys[0].startswith("ssh-ed25519 ")
    assert n1.status == "failed" and n1.step == "dhcp" and not n1.disk_touched
    assert "no network boot from 02:a1:5e:00:01:f0" in (n1.error or "")
    assert world.armed == [["n1", "n2"]]  # one wave, armed once
    assert world.disarmed == [["n1"]]  # no report disarmed it: provision does
    assert time.monotonic() - start < 10


def test_a_failed_install_is_retried_then_reported(fast: None) -> None:
    prov, targets = _plan(2, retries=1)
    world = ScriptedWorld({"n1": ["fail:layout", "fail:partition"], "n2": ["fail:image", "ok"]})
    n1, n2 = _provision(world, prov, targets)
    assert (n1.status, n1.step, n1.attempts, n1.disk_touched) == ("failed", "install", 2, True)
    assert "failed at step partition" in (n1.error or "")
    assert (n2.status, n2.attempts) == ("installed", 2)
    assert world.armed == [["n1", "n2"], ["n1", "n2"]]  # the retry arms them again
    assert world.disarmed == []  # the installer's failure report disarmed them


def test_waves_hold_at_most_wave_size_nodes(fast: None) -> None:
    prov, targets = _plan(5, wave_size=2)
    world = ScriptedWorld({t.node: ["ok"] for t in targets})
    assert all(o.status == "installed" for o in _provision(world, prov, targets))
    assert world.armed == [["n1", "n2"], ["n3", "n4"], ["n5"]]


def test_a_node_silent_after_install_is_power_cycled_once_then_failed(fast: None) -> None:
    prov, targets = _plan(1, boot_timeout_s=1, retries=0)
    world = ScriptedWorld({"n1": ["no-ssh"]})
    (n1,) = _provision(world, prov, targets)
    assert (n1.status, n1.step) == ("failed", "first-boot") and world.cycles == ["n1"]


def test_an_installed_node_is_left_alone_unless_reinstalled_and_records_keep_what_stands(fast: None) -> None:
    prov, targets = _plan(1)
    world = ScriptedWorld({"n1": ["ok", "no-dhcp", "fail:layout", "fail:image"]})
    (first,) = _provision(world, prov, targets)
    rec = run.record(None, first, "t1")
    key = world.keys["n1"]
    assert rec["installed"] == {"version": V1, "host_keys": [key], "at": "t1"}
    (again,) = _provision(world, prov, targets, records={"n1": rec})
    assert again.status == "unchanged" and world.booted == ["n1"]
    assert run.record(rec, again, "t2")["last"]["checked"] == "t2"
    # --reinstall boots it again; a failure before the disk keeps the install on record, one after drops it.
    prov0 = ProvisioningPlan(**(plain_fields(prov) | {"retries": 0, "install_timeout_s": 1}))
    (early,) = _provision(world, prov0, targets, records={"n1": rec}, reinstall=True)
    assert early.step == "dhcp" and run.record(rec, early, "t3")["installed"] == rec["installed"]
    (layout,) = _provision(world, prov0, targets, records={"n1": rec}, reinstall=True)
    assert layout.step == "install" and run.record(rec, layout, "t4")["installed"] == rec["installed"]
    (late,) = _provision(world, prov0, targets, records={"n1": rec}, reinstall=True)
    assert late.step == "install" and run.record(rec, late, "t5")["installed"] is None
    assert run.known_hosts_lines({"n1": "10.0.0.1"}, {"n1": rec}) == [f"10.0.0.1 {key}"]


def test_a_node_without_a_boot_mac_is_refused_by_provision_and_proposed_by_discovery() -> None:
    config = lab_config()
    config["gpu_nodes"][1]["nodes"][0]["management"].pop("mac")
    p = build_plan(parse_site(config))  # valid: the MAC may come later
    assert p.provisioning is not None
    (problem,) = missing_boot_macs(p)
    assert str(problem).startswith("site.gpu_nodes[1].nodes[0].management.mac: infer01 has no boot MAC")
    assert missing_boot_macs(p, {"gpu01"}) == []
    paths = {n.name: n.path for n in p.nodes}
    macs = {"infer01": ["aa:bb:cc:00:00:02", "aa:bb:cc:00:00:01"], "gpu01": ["aa:bb:cc:00:00:09"]}
    assert run.boot_mac_proposals(p.provisioning.targets, paths, macs) == [
        {
            "node": "infer01",
            "path": "site.gpu_nodes[1].nodes[0].management.mac",
            "mac": "aa:bb:cc:00:00:02",
            "nics": ["aa:bb:cc:00:00:02", "aa:bb:cc:00:00:01"],
        }
    ]
    # A BMC's "MAC" with a newline (extra YAML in the proposed change) or that is no MAC is not proposed.
    hostile = {"infer01": ["aa:bb:cc:00:00:02\n  rogue: true", "[/x]", "AA-BB-CC-00-00-03"]}
    proposed = run.boot_mac_proposals(p.provisioning.targets, paths, hostile)
    assert [x["nics"] for x in proposed] == [["aa:bb:cc:00:00:03"]]
    # A node whose MAC is declared, or that is not installed by provision, gets no proposal.
    declared = build_plan(parse_site(lab_config())).provisioning
    assert declared is not None and run.boot_mac_proposals(declared.targets, paths, macs) == []


def test_provision_refuses_a_site_without_provisioning_and_an_unknown_limit() -> None:
    env = {"PATH": "/usr/bin:/bin", "AISITE_LAB_BMC_PASSWORD": "x"}
    r = subprocess.run(
        [sys.executable, "-m", "aisite", "provision", "dc1"], capture_output=True, text=True, check=False, env=env
    )
    assert r.returncode == 2 and "site.provisioning: not set" in r.stderr, r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "aisite", "provision", "lab", "--limit", "gpu01,nope"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert r.returncode == 2 and "--limit: gpu01, nope: not a node to install" in r.stderr, r.stderr


@pytest.mark.parametrize(
    "report",
    [
        {"events": [{"event": "installed", "time": "x"}]},
        {"events": ["installed"]},
        {"events": [{"event": "installed", "time": 10**400}]},
        {"events": [{"event": "installed", "time": 1.0}], "host_keys": [KEY + "\n@cert-authority * " + KEY]},
        {"events": [{"event": "installed", "time": 1.0}], "host_keys": "not a list"},
        {"events": [{"event": "installed", "time": 1.0}], "version": "[/x]"},
        "a string",
    ],
)
def test_a_report_that_does_not_parse_is_no_report(report: object) -> None:
    """What the issue sent `aisite provision` through the boot server: a bad time or event crashed it; a "key"
    with a newline reached known_hosts as a line of its own. Each is now no report at all."""
    assert run.read_report(report) == {}


def test_a_report_that_parses_keeps_its_keys_and_times() -> None:
    doc = {"events": [{"event": "ipxe", "time": 1}, {"event": "installed", "time": 2.5}], "host_keys": [KEY]}
    got = run.read_report(doc | {"step": "grub", "version": V1, "extra": "ignored"})
    assert got["host_keys"] == [KEY] and [e["time"] for e in got["events"]] == [1.0, 2.5] and got["version"] == V1


def test_a_node_is_held_out_of_service_from_its_first_attempt_until_its_outcome(fast: None) -> None:
    """Provisioning's part of the one state per member (aisite.members.store): held `provisioning` before its wave is
    armed, given back once installed, held `provision-failed` (pending a new provision) when it failed; a node
    already installed is never held."""
    from aisite.members import store

    prov, targets = _plan(3, wave_size=2, retries=0, install_timeout_s=1)
    world = ScriptedWorld({"n1": ["ok"], "n2": ["no-dhcp"], "n3": ["ok"]})
    members: dict[str, store.Member] = {}
    seen: list[tuple[str, list[str]]] = []  # (what, members held out then)
    arm = world.arm

    def arming(ts: Sequence[ProvisionTarget], keys: Mapping[str, run.HostKey]) -> None:
        seen.append((f"arm {','.join(t.node for t in ts)}", store.out_of_service(members)))
        arm(ts, keys)

    world.arm = arming  # type: ignore[method-assign]
    outcomes = run.provision(
        world,  # type: ignore[arg-type]
        prov,
        targets,
        {},
        reinstall=False,
        say=lambda node, what: None,
        done=lambda o: run.member_outcome(members, o, "t1"),
        begin=lambda node: run.member_installing(members, node, "t0"),
    )
    assert [o.status for o in outcomes] == ["installed", "failed", "installed"]
    # Each wave's nodes are held before it is armed; the first wave's outcomes came before the second's arming.
    assert seen == [("arm n1,n2", ["n1", "n2"]), ("arm n3", ["n2", "n3"])]
    assert store.out_of_service(members) == ["n2"]
    h = members["n2"].holds["provision"]
    assert (h.state, h.pending) == ("provision-failed", "provision") and "failed at dhcp" in h.message
    assert members["n1"].history == [
        "t0 provision: provisioning (install pending)",
        f"t1 provision: released -> in-service: installed {V1}",
    ]


def test_a_wave_that_cannot_be_armed_leaves_its_nodes_held_failed_not_installing() -> None:
    from aisite.members import store

    members: dict[str, store.Member] = {}
    run.member_installing(members, "n1", "t0")
    store.hold(members, "n2", "health", state="quarantined", pending="", at="t0")
    run.members_not_started(members, "the boot server is down", "t1")
    h = members["n1"].holds["provision"]
    assert (h.state, h.pending, h.message) == ("provision-failed", "provision", "not started: the boot server is down")
    assert "provision" not in members["n2"].holds


def test_nodes_in_service_go_out_only_as_the_sites_budget_allows(fast: None) -> None:
    """Reinstalling installed nodes asks the one disruption budget before each wave, beside what is already out
    (aisite.members.store): one 8-GPU node at a time here, so three installed nodes take three waves while a node not
    yet installed (serving nothing) joins the first; a node that fits no wave (a quarantine holds the budget) is
    refused untouched, its install and its state as they were."""
    from aisite.members import store
    from aisite.members.budget import Budget, Member

    prov, targets = _plan(4, wave_size=3, retries=0)
    world = ScriptedWorld({t.node: ["ok", "ok"] for t in targets})
    installed = {"installed": {"version": V1, "host_keys": [KEY], "at": "t0"}}
    records = {n: installed for n in ("n1", "n2", "n3")}
    site = Budget(8, False, {n: Member(n, "gpu", 8, None) for n in ("n1", "n2", "n3", "n4", "n9")})
    members: dict[str, store.Member] = {}

    def provision(targets: list[ProvisionTarget]) -> list[Any]:
        return run.provision(
            world,  # type: ignore[arg-type]
            prov,
            targets,
            records,
            reinstall=True,
            say=lambda node, what: None,
            done=lambda o: run.member_outcome(members, o, "t1"),
            begin=lambda node: run.member_installing(members, node, "t0"),
            budget=lambda nodes: site.problem([*store.out_of_service(members), *nodes]),
        )

    outcomes = provision(targets)
    assert [o.status for o in outcomes] == ["installed"] * 4
    assert world.armed == [["n1", "n4"], ["n2"], ["n3"]]
    assert store.out_of_service(members) == []
    # n9 quarantined: no installed node fits beside it; the one not installed still goes.
    store.hold(members, "n9", "health", state="quarantined", pending="", at="t2")
    world.armed.clear()
    n1, n4 = provision([targets[0], targets[3]])
    assert (n4.status, world.armed) == ("installed", [["n4"]])
    assert (n1.status, n1.step, n1.attempts) == ("refused", "budget", 0)
    assert n1.error == "in service; 16 GPUs out of service, over the site's budget of 8"
    assert store.out_of_service(members) == ["n9"]  # n1 was never taken out
    assert run.record(records["n1"], n1, "t3")["installed"] == installed["installed"]


def test_a_node_to_install_gets_its_firmware_baseline_while_off_before_its_network_boot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Provisioning takes the node out anyway: its firmware baseline (aisite.firmware.apply: BIOS settings pending,
    the release requested) is set while it is off, so the power-on that boots the installer takes it; an IPMI BMC
    has neither, and says so. aisite.firmware's Redfish requests run for real against the lab's emulators
    (tests/lab/test_70_bmcs.py's BIOS rollout); here, only the order and what is said."""
    from aisite import firmware, oob
    from aisite.provision.world import SiteWorld

    data = lab_config()
    group = next(g for g in data["gpu_nodes"] if "install" in g)
    group["firmware"] = {"bios": {"ProcTurboMode": "Enabled"}}
    calls: list[str] = []
    monkeypatch.setattr(oob, "set_power", lambda t, state: calls.append(f"{t.protocol} power {state}"))
    monkeypatch.setattr(oob, "wait_for_power", lambda t, state, timeout: calls.append(f"wait {state}"))
    monkeypatch.setattr(oob, "set_one_time_boot", lambda t, device: calls.append(f"boot {device}"))

    def apply(t: oob.Target, baseline: Any) -> list[str]:
        calls.append(f"firmware {dict(baseline.bios)}")
        return ["BIOS settings pending: ProcTurboMode=Enabled"]

    monkeypatch.setattr(firmware, "apply", apply)
    for protocol, said in [
        ("redfish", ["BIOS settings pending: ProcTurboMode=Enabled"]),
        ("ipmi", ["IPMI BMC: no BIOS settings or firmware update; the baseline was not set"]),
    ]:
        group["bmc"] = dict(group.get("bmc") or {}) | {"protocol": protocol}
        plan = build_plan(parse_site(data))
        assert plan.provisioning is not None
        (target,) = plan.provisioning.targets  # the lab's VM node, of that group
        world = SiteWorld(plan, "", {})
        calls.clear()
        world.boot_from_network(target)
        ordered = [f"{protocol} power off", "wait off", "boot pxe", f"{protocol} power on"]
        if protocol == "redfish":
            ordered.insert(2, "firmware {'ProcTurboMode': 'Enabled'}")
        assert calls == ordered and world.firmware == {target.node: said}
        # A retried attempt of the same run does not ask the BMC again (a staged release may be refused twice).
        calls.clear()
        world.boot_from_network(target)
        assert calls == [f"{protocol} power off", "wait off", "boot pxe", f"{protocol} power on"]


def test_an_install_image_that_cannot_be_built_fails_provision_with_its_reason_and_no_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from aisite.cli import app
    from aisite.cli import provision as cli_provision

    keys = tmp_path / "ssh"
    keys.mkdir()
    (keys / "id_ed25519").write_text("not read: the image comes first\n")
    monkeypatch.setattr(cli_provision, "lab_ssh_dir", lambda site: keys)

    def broken(*a: Any) -> None:
        raise image.ImageError("debootstrap bookworm from http://deb.debian.org/debian failed (exit 1): no route")

    monkeypatch.setattr(cli_provision.images, "ensure_site_images", broken)
    r = CliRunner().invoke(app, ["provision", "lab"], env={"AISITE_LAB_BMC_PASSWORD": "Lab-Bmc-Secret-1"})
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), (r.exit_code, r.output, r.exception)
    assert "error: the install image: debootstrap bookworm from http://deb.debian.org/debian failed" in r.output


def test_a_build_tool_missing_is_an_image_error_naming_it_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no debootstrap on it
    with pytest.raises(image.ImageError, match=r"debootstrap not found \(it runs debootstrap, chroot, tar and zstd"):
        image.ensure_image("debian-12", "http://deb.debian.org/debian", tmp_path / "images", print)
    assert [p.name for p in (tmp_path / "images").iterdir()] == []  # its work folder removed


def test_a_dry_run_says_what_provision_would_do_and_touches_nothing(fast: None) -> None:
    """`aisite provision --dry-run`'s decisions, as provision takes them: the node at the plan's version left
    alone, the rest in waves within wave_size and the budget, a node no wave can take refused with why; nothing
    armed, booted or power-cycled."""
    from aisite.members.budget import Budget, Member

    prov, targets = _plan(5, wave_size=2)
    world = ScriptedWorld({t.node: ["ok"] for t in targets})
    (first,) = _provision(world, prov, targets[:1])
    records = {"n1": run.record(None, first, "t1")}
    world.armed.clear()
    world.booted.clear()
    intent = run.would_provision(world, prov, targets, records, reinstall=False)  # type: ignore[arg-type]
    assert (intent.unchanged, intent.waves, intent.refused) == (["n1"], [["n2", "n3"], ["n4", "n5"]], {})
    again = run.would_provision(world, prov, targets, records, reinstall=True)  # type: ignore[arg-type]
    assert again.unchanged == [] and again.waves == [["n1", "n2"], ["n3", "n4"], ["n5"]]
    # n1 serves (installed); a quarantine elsewhere holds the whole budget: n1 fits no wave and is refused.
    site = Budget(8, False, {n: Member(n, "gpu", 8, None) for n in ("n1", "n9")})
    held = run.would_provision(
        world,  # type: ignore[arg-type]
        prov,
        targets[:2],
        records,
        reinstall=True,
        budget=lambda nodes: site.problem(["n9", *nodes]),
    )
    assert held.waves == [["n2"]] and held.refused == {"n1": "16 GPUs out of service, over the site's budget of 8"}
    assert world.armed == [] and world.booted == [] and world.cycles == []
