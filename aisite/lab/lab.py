"""Bringing a lab up, reporting it, and taking it down: podman networks, containers and veth links.

Everything carries the label io.aisite.lab=<site>; `down` removes what carries it and nothing else. `up` is
idempotent: what already runs as planned is left alone, so a second `up` only checks.
"""

from __future__ import annotations

import hashlib
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aisite.lab import bmc, images, mirror, vm
from aisite.lab.podman import LabError, ensure_tools, netns_links, podman, podman_json, run
from aisite.lab.serving import stop_all as serving_stop_all
from aisite.lab.topology import HOST_LABEL, LABEL, ROLE_LABEL, SPEC_LABEL, LabBmc, LabContainer, LabTopology, LabVm
from aisite.paths import lab_ssh_dir, pull_wheels_dir

Say = Callable[[str], None]
# A bcrypt digest of the credentials an emulator was configured with: a changed password reconfigures it.
CREDENTIALS_LABEL = "io.aisite.bmc-credentials"
Credentials = dict[str, tuple[str, str]]


@dataclass
class UpReport:
    installed: list[str] = field(default_factory=list)
    networks_created: list[str] = field(default_factory=list)
    containers_started: list[str] = field(default_factory=list)
    links_created: int = 0
    bmcs_started: list[str] = field(default_factory=list)
    vms_started: list[str] = field(default_factory=list)
    # What ran beside the lab's own steps (`beside`), or why it did not finish: "" when nothing did.
    beside: str = ""
    seconds: float = 0.0


def _label_filter(site: str) -> str:
    return f"label={LABEL}={site}"


def _existing_networks(site: str) -> set[str]:
    return {n["name"] for n in podman_json("network", "ls", "--filter", _label_filter(site), "--format", "json")}


def _volumes(site: str) -> list[str]:
    return podman("volume", "ls", "-q", "--filter", _label_filter(site), what="listing lab volumes").split()


def _containers(site: str) -> dict[str, dict[str, Any]]:
    return {c["Names"][0]: c for c in podman_json("ps", "-a", "--filter", _label_filter(site), "--format", "json")}


def _live(state: dict[str, Any]) -> bool:
    """Running, and its init still there. Podman 4 learns of an exit only from conmon's exit file, so containers
    whose processes went without it (a machine restored from a disk image taken with the lab up, conmon killed)
    still read as running, at a pid that is gone: CI once found a whole lab so."""
    pid = int(state.get("Pid") or 0)
    return state.get("State") == "running" and pid > 0 and Path(f"/proc/{pid}/ns/net").exists()


def _state(state: dict[str, Any] | None) -> str:
    """What `lab status` shows: podman's state, but `gone` for a container running at a pid that is gone."""
    if state is None:
        return "absent"
    return "gone" if state.get("State") == "running" and not _live(state) else str(state.get("State"))


def _remove(*names: str, what: str) -> None:
    """Remove containers and their anonymous volumes. Once more when the first try fails: podman cannot kill a
    container whose processes went behind its back (`container state improper: stopped`), but records it stopped
    then, and the second removal succeeds."""
    try:
        podman("rm", "-f", "-v", "-t", "0", *names, what=what)
    except LabError:
        podman("rm", "-f", "-v", "-t", "0", *names, what=what)


def _ensure_networks(topo: LabTopology, report: UpReport, say: Say) -> None:
    have = _existing_networks(topo.site)
    for net in topo.networks:
        if net.name in have:
            continue
        say(f"network {net.name} ({net.subnet})")
        podman(
            "network",
            "create",
            "--label",
            f"{LABEL}={topo.site}",
            "--subnet",
            net.subnet,
            "--gateway",
            net.gateway,
            "--opt",
            f"mtu={net.mtu}",
            net.name,
            what=f"creating network {net.name}",
        )
        report.networks_created.append(net.name)


def _run_container(topo: LabTopology, c: LabContainer, tags: dict[str, str]) -> None:
    args = [
        "run",
        "-d",
        "--name",
        c.name,
        "--hostname",
        c.host,
        "--systemd=always",
        "--label",
        f"{LABEL}={topo.site}",
        "--label",
        f"{ROLE_LABEL}={c.role}",
        "--label",
        f"{HOST_LABEL}={c.host}",
        "--label",
        f"{SPEC_LABEL}={_spec(c)}",
    ]
    for cap in c.caps:
        args += ["--cap-add", cap]
    for sysctl in c.sysctls:
        args += ["--sysctl", sysctl]
    for path in c.volumes:
        args += ["--volume", path]  # one path: an anonymous volume
    for device in c.devices:
        args += ["--device", device]
    if c.attachments:
        for a in c.attachments:
            args += ["--network", f"{a.network}:ip={a.address},mac={a.mac},interface_name={a.interface}"]
    else:
        args += ["--network", "none"]
    podman(*args, tags[c.image], "/sbin/init", what=f"starting container {c.name}")


def _spec(c: LabContainer) -> str:
    """A digest of how a container is started (networks, addresses, capabilities, sysctls, volumes, devices): a
    change recreates it."""
    # Devices only where there are some: a running lab's other containers keep their digest (and are not recreated).
    spec = (c.attachments, c.caps, c.sysctls, c.volumes) + ((c.devices,) if c.devices else ())
    return hashlib.sha256(repr(spec).encode()).hexdigest()[:12]


# A systemd container holds inotify instances of root's (systemd, journald, logind...): past the kernel's limit the
# next containers' systemd exits at once (seen with 38 of them: every one after the 26th, exit 255).
INOTIFY_PER_CONTAINER = 6
INOTIFY_LIMIT = Path("/proc/sys/fs/inotify/max_user_instances")


def inotify_needed(topo: LabTopology) -> int:
    return INOTIFY_PER_CONTAINER * len(topo.containers) + 32  # and the rest of the machine's


def _check_inotify(topo: LabTopology) -> None:
    try:
        limit = int(INOTIFY_LIMIT.read_text())
    except (OSError, ValueError):
        return
    need = inotify_needed(topo)
    if limit < need:
        raise LabError(
            f"{len(topo.containers)} systemd containers need about {need} inotify instances, and "
            f"fs.inotify.max_user_instances is {limit}: raise it first (sysctl -w fs.inotify.max_user_instances={need})"
        )


def _bmc_spec(b: LabBmc) -> str:
    """The same for a BMC emulator: where it answers and as what."""
    return hashlib.sha256(repr((b.network, b.address, b.mac, b.protocol, b.port)).encode()).hexdigest()[:12]


def _current(c: LabContainer, state: dict[str, Any] | None, tags: dict[str, str]) -> bool:
    return (
        state is not None
        and _live(state)
        and state.get("Image") == tags[c.image]
        and (state.get("Labels") or {}).get(SPEC_LABEL) == _spec(c)
    )


def _bmc_current(b: LabBmc, state: dict[str, Any] | None, tag: str, credentials: Credentials) -> bool:
    labels = (state or {}).get("Labels") or {}
    return (
        state is not None
        and _live(state)
        and state.get("Image") == tag
        and labels.get(SPEC_LABEL) == _bmc_spec(b)
        and bmc.credentials_match(labels.get(CREDENTIALS_LABEL, ""), *credentials[b.credentials])
    )


def _vm_spec(v: LabVm) -> str:
    """How a VM's container is started: its BMC, its ports and NICs, its size and accelerator."""
    return hashlib.sha256(
        repr((_bmc_spec(v.bmc), v.ports, v.nics, v.memory_mb, v.disk_gb, vm.accel())).encode()
    ).hexdigest()[:12]


def _vm_current(v: LabVm, state: dict[str, Any] | None, tag: str, credentials: Credentials) -> bool:
    labels = (state or {}).get("Labels") or {}
    return (
        state is not None
        and _live(state)
        and state.get("Image") == tag
        and labels.get(SPEC_LABEL) == _vm_spec(v)
        and bmc.credentials_match(labels.get(CREDENTIALS_LABEL, ""), *credentials[v.bmc.credentials])
    )


def _remove_stale(topo: LabTopology, tags: dict[str, str], credentials: Credentials, say: Say) -> None:
    """Before anything is started: remove the site's containers the plan no longer has, or would start otherwise.
    Addresses move when a plan grows (a storage node numbered after the GPU nodes): a new container must not find
    its address still held by the old one."""
    nodes = {c.name: c for c in topo.containers}
    bmcs = {b.name: b for b in topo.bmcs}
    vms = {v.name: v for v in topo.vms}
    have = _containers(topo.site)
    stale = sorted(
        name
        for name, state in have.items()
        if not (
            (name in nodes and _current(nodes[name], state, tags))
            or (name in bmcs and _bmc_current(bmcs[name], state, tags["bmc"], credentials))
            or (name in vms and _vm_current(vms[name], state, tags["vm"], credentials))
        )
    )
    if stale:
        say(f"removing {len(stale)} containers the plan no longer has or starts otherwise: {', '.join(stale)}")
        _remove(*stale, what="removing stale lab containers")
        _wait_for_monitors([have[n]["Id"] for n in stale])


def _ensure_containers(topo: LabTopology, tags: dict[str, str], report: UpReport, say: Say) -> None:
    have = _containers(topo.site)
    for c in topo.containers:
        state = have.get(c.name)
        if _current(c, state, tags):
            continue
        if state:
            # Stopped, built from an older image or started differently: start it afresh so it matches the plan.
            _remove(c.name, what=f"removing stale container {c.name}")
        say(f"container {c.name} ({c.role})")
        _run_container(topo, c, tags)
        report.containers_started.append(c.name)


def _restart_stopped(topo: LabTopology, tags: dict[str, str], say: Say) -> None:
    """Start once more a container that stopped right after its start (seen once in CI, cause not found): what it
    logged is shown; one that stops again fails `up` with its logs (`_pids`)."""
    try:
        _pids(topo, timeout=10.0)
        return
    except LabError as err:
        have = _containers(topo.site)
        stopped = [c for c in topo.containers if not _live(have.get(c.name, {}))]
        if not stopped:
            raise
        for c in stopped:
            say(f"container {c.name} stopped after its start; starting it again ({err})")
            _remove(c.name, what=f"removing stopped container {c.name}")
            _run_container(topo, c, tags)


def _pids(topo: LabTopology, timeout: float = 20.0) -> dict[str, int]:
    """Each container's init pid, once every one runs; a container that stopped is named with its last log lines."""
    names = [c.name for c in topo.containers]
    deadline = time.monotonic() + timeout
    while True:
        out = podman(
            "inspect",
            "--format",
            "{{.Name}} {{.State.Status}} {{.State.Pid}} {{.State.ExitCode}}",
            *names,
            what="podman inspect",
        )
        rows = [line.split() for line in out.splitlines() if line.strip()]
        pids = {name: int(pid) for name, status, pid, _ in rows if status == "running" and pid != "0"}
        if all(Path(f"/proc/{pid}/ns/net").exists() for pid in pids.values()) and len(pids) == len(names):
            return pids
        if time.monotonic() > deadline:
            down = [(name, status, code) for name, status, pid, code in rows if name not in pids]
            details = "; ".join(
                f"{name} is {status} (exit {code}): {podman('logs', '--tail', '5', name, check=False).strip()[-400:]}"
                for name, status, code in down
            )
            raise LabError(f"containers not running after {timeout:.0f} s: {details or 'their namespaces vanished'}")
        time.sleep(0.3)


def _address(pid: int, name: str, port: str, cidr: str | None) -> None:
    """Give a node's rail its plan address, as the NIC of a provisioned host has (`replace` keeps it idempotent).

    With its broadcast address, as networkd sets it: systemd 252's networkd retries an address that differs only in
    broadcast without end (the kernel keeps the old one), until its netlink queue overflows and the rail fails."""
    if cidr:
        run(
            ["nsenter", "-t", str(pid), "-n", "ip", "addr", "replace", cidr, "brd", "+", "dev", port],
            what=f"{name}: {port} {cidr}",
        )


def _ensure_links(topo: LabTopology, report: UpReport, say: Say) -> None:
    pids = _pids(topo)
    present = {name: netns_links(pid) for name, pid in pids.items()}
    for link in topo.links:
        a_ok, b_ok = link.a_port in present[link.a], link.b_port in present[link.b]
        if a_ok and b_ok:
            _address(pids[link.a], link.a, link.a_port, link.a_address)
            continue
        for ok, name, port in ((a_ok, link.a, link.a_port), (b_ok, link.b, link.b_port)):
            if ok:  # half a pair: its peer is gone, so remove it and cable afresh
                run(["nsenter", "-t", str(pids[name]), "-n", "ip", "link", "del", port], what=f"{name}: del {port}")
        say(f"cable {link.a}:{link.a_port} <-> {link.b}:{link.b_port}")
        run(
            [
                "ip",
                "link",
                "add",
                link.a_port,
                "netns",
                str(pids[link.a]),
                "mtu",
                str(link.a_mtu),
                "type",
                "veth",
                "peer",
                "name",
                link.b_port,
                "netns",
                str(pids[link.b]),
                "mtu",
                str(link.b_mtu),
            ],
            what=f"cabling {link.a}:{link.a_port} to {link.b}:{link.b_port}",
        )
        for name, port in ((link.a, link.a_port), (link.b, link.b_port)):
            run(["nsenter", "-t", str(pids[name]), "-n", "ip", "link", "set", port, "up"], what=f"{name}: up {port}")
        _address(pids[link.a], link.a, link.a_port, link.a_address)
        report.links_created += 1


# Run in each node and switch container by every `up`: its own host keys (the image's are shared by every
# container made from it), the lab's key for root, sshd running; prints the host key for known_hosts.
_SSH_ACCESS = """set -e
if [ ! -e /etc/ssh/.aisite-host-keys ]; then
  rm -f /etc/ssh/ssh_host_*
  ssh-keygen -A >/dev/null
  touch /etc/ssh/.aisite-host-keys
  systemctl enable -q ssh
  systemctl restart ssh
fi
mkdir -p -m 0700 /root/.ssh
grep -qxF "$1" /root/.ssh/authorized_keys 2>/dev/null || echo "$1" >> /root/.ssh/authorized_keys
chmod 0600 /root/.ssh/authorized_keys
cat /etc/ssh/ssh_host_ed25519_key.pub
"""


def _ensure_ssh(topo: LabTopology, say: Say) -> None:
    """Ansible reaches the lab as it reaches a site: over SSH, with a key made for the lab and the host keys of
    the containers checked (known_hosts is written anew from them each time)."""
    ssh = lab_ssh_dir(topo.site)
    ssh.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = ssh / "id_ed25519"
    if not key.exists():
        say(f"SSH key for the lab in {key}")
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"aisite-lab-{topo.site}", "-f", str(key)])
    public = key.with_suffix(".pub").read_text().strip()

    def access(c: LabContainer) -> str:
        host_key = podman("exec", c.name, "sh", "-c", _SSH_ACCESS, "sh", public, what=f"SSH access to {c.name}")
        return f"{c.address} {' '.join(host_key.split()[:2])}"

    with ThreadPoolExecutor(max_workers=8) as pool:
        lines = list(pool.map(access, topo.containers))
    tmp = ssh / "known_hosts.new"
    tmp.write_text("".join(f"{line}\n" for line in lines))
    tmp.replace(ssh / "known_hosts")


def start_bmc(site: str, b: LabBmc, tag: str, credentials: Credentials) -> None:
    """Create, configure (a tar on stdin: the password is in no command or file here) and start one emulator."""
    username, password = credentials[b.credentials]
    files = (
        bmc.redfish_files(b, site, username, password)
        if b.protocol == "redfish"
        else (bmc.ipmi_files(b, username, password))
    )
    podman(
        "create",
        "--name",
        b.name,
        "--hostname",
        f"{b.node}-bmc",
        "--label",
        f"{CREDENTIALS_LABEL}={bmc.credentials_digest(username, password)}",
        "--label",
        f"{LABEL}={site}",
        "--label",
        f"{ROLE_LABEL}=bmc",
        "--label",
        f"{HOST_LABEL}={b.node}",
        "--label",
        f"{SPEC_LABEL}={_bmc_spec(b)}",
        "--network",
        f"{b.network}:ip={b.address},mac={b.mac},interface_name=bmc0",
        tag,
        f"{bmc.CONFIG_DIR}/start",
        b.address,
        what=f"creating BMC emulator {b.name}",
    )
    run(
        ["podman", "cp", "-", f"{b.name}:{bmc.CONFIG_DIR}"],
        stdin=bmc.tar_of(files),
        what=f"configuring BMC emulator {b.name}",
    )
    podman("start", b.name, what=f"starting BMC emulator {b.name}")


def start_vm(site: str, v: LabVm, tag: str, credentials: Credentials) -> None:
    """Create the VM's container (its BMC on the out-of-band network, its ports on the others), configure it (a
    tar on stdin, as a BMC emulator's) and start it: the BMC answers, the VM is off until powered on."""
    username, password = credentials[v.bmc.credentials]
    accel = vm.accel()
    args = [
        "create",
        "--name",
        v.name,
        "--hostname",
        f"{v.node}-vm",
        "--label",
        f"{CREDENTIALS_LABEL}={bmc.credentials_digest(username, password)}",
        "--label",
        f"{LABEL}={site}",
        "--label",
        f"{ROLE_LABEL}=vm",
        "--label",
        f"{HOST_LABEL}={v.node}",
        "--label",
        f"{SPEC_LABEL}={_vm_spec(v)}",
        "--cap-add",
        "NET_ADMIN",
        "--device",
        "/dev/net/tun",
        "--network",
        f"{v.bmc.network}:ip={v.bmc.address},mac={v.bmc.mac},interface_name=bmc0",
        "--volume",
        f"{vm.state_volume(v)}:{bmc.STATE_DIR}",
    ]
    volumes = podman("volume", "ls", "-q", "--filter", f"label={LABEL}={site}", what="listing lab volumes").split()
    if vm.state_volume(v) not in volumes:
        podman("volume", "create", "--label", f"{LABEL}={site}", vm.state_volume(v), what=f"a volume for {v.name}")
    for a in v.ports:
        args += ["--network", f"{a.network}:ip={a.address},mac={a.mac},interface_name={a.interface}"]
    if accel == "kvm":
        args += ["--device", "/dev/kvm"]
    podman(
        *args,
        tag,
        f"{bmc.CONFIG_DIR}/start",
        *(a.interface for a in v.ports),
        what=f"creating VM {v.name}",
    )
    run(
        ["podman", "cp", "-", f"{v.name}:{bmc.CONFIG_DIR}"],
        stdin=bmc.tar_of(vm.vm_files(v, username, password, accel)),
        what=f"configuring VM {v.name}",
    )
    podman("start", v.name, what=f"starting VM {v.name}")


def _ensure_vms(topo: LabTopology, tag: str, credentials: Credentials, report: UpReport, say: Say) -> None:
    have = _containers(topo.site)
    started: list[LabVm] = []
    for v in topo.vms:
        state = have.get(v.name)
        if _vm_current(v, state, tag, credentials):
            continue
        if state:
            _remove(v.name, what=f"removing VM {v.name} (stale)")
        say(f"VM {v.name} (powered off; its BMC: ipmi on {v.bmc.address}; `aisite provision` installs it)")
        start_vm(topo.site, v, tag, credentials)
        report.vms_started.append(v.name)
        started.append(v)
    for v in started:
        _wait_for_bmc(v.bmc)


def _ensure_bmcs(topo: LabTopology, tag: str, credentials: Credentials, report: UpReport, say: Say) -> None:
    have = _containers(topo.site)
    started: list[LabBmc] = []
    for b in topo.bmcs:
        state = have.get(b.name)
        digest = (state or {}).get("Labels", {}).get(CREDENTIALS_LABEL, "")
        same_credentials = bmc.credentials_match(digest, *credentials[b.credentials])
        if _bmc_current(b, state, tag, credentials):
            continue
        if state:
            why = "its credentials changed" if not same_credentials else "stale"
            _remove(b.name, what=f"removing BMC emulator {b.name} ({why})")
        say(f"BMC emulator {b.name} ({b.protocol} on {b.address})")
        start_bmc(topo.site, b, tag, credentials)
        report.bmcs_started.append(b.name)
        started.append(b)
    # Wait until each answers (a TLS key to make and Python to load: seconds, more on a loaded machine).
    for b in started:
        _wait_for_bmc(b)


def _answers(b: LabBmc) -> bool:
    """Whether the emulator answers on its own address on the lab's bridge: a TCP connect (Redfish) or an RMCP
    presence ping (IPMI over UDP)."""
    try:
        if b.protocol == "redfish":
            with socket.create_connection((b.address, b.port), timeout=1):
                return True
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(1)
            s.sendto(bmc.RMCP_PRESENCE_PING, (b.address, b.port))
            return bmc.is_presence_pong(s.recv(64))
    except OSError:
        return False


def _wait_for_bmc(b: LabBmc, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not _answers(b):
        if time.monotonic() > deadline:
            logs = podman("logs", "--tail", "5", b.name, check=False)
            raise LabError(f"{b.name} did not answer on {b.address}:{b.port} within {timeout:.0f} s: {logs}")
        time.sleep(0.3)


def up(
    topo: LabTopology, cache: Path, say: Say, credentials: Credentials, beside: Callable[[], str] | None = None
) -> UpReport:
    """Build the lab; `credentials` maps each secret the BMCs reference to (username, password).

    `beside` runs in a thread of its own once the tools are installed, while the lab's images build and its
    containers start (the CLI builds the install image `aisite provision` serves there: both mostly wait on the
    mirror and on disk). It returns what it did, in `report.beside`, and says so when it failed: it prepares a later
    step, which does the work again. `up` returns or raises only once it has ended: nothing it started outlives it."""
    missing = sorted({b.credentials for b in (*topo.bmcs, *(v.bmc for v in topo.vms))} - set(credentials))
    if missing:
        raise LabError(f"no credentials for the BMC secret(s) {', '.join(missing)}")
    start = time.monotonic()
    _check_inotify(topo)
    report = UpReport(installed=ensure_tools())
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="lab-beside") as pool:
        job = pool.submit(beside) if beside else None
        try:
            tags = images.ensure_images(cache, say)
            _remove_stale(topo, tags, credentials, say)
            _ensure_networks(topo, report, say)
            _ensure_containers(topo, tags, report, say)
            _restart_stopped(topo, tags, say)
            _ensure_links(topo, report, say)
            _ensure_ssh(topo, say)
            _ensure_bmcs(topo, tags["bmc"], credentials, report, say)
            _ensure_vms(topo, tags["vm"], credentials, report, say)
            if topo.pulls:
                images.ensure_pull_wheels(pull_wheels_dir(topo.site), say)
        finally:
            if job is not None:
                if not job.done():
                    say("waiting for what runs beside the lab (the install image's build)")
                report.beside = job.result()
    report.seconds = round(time.monotonic() - start, 2)
    return report


def _addresses(names: list[str]) -> dict[str, dict[str, str]]:
    """container -> podman network -> IPv4 address, as podman reports them."""
    if not names:
        return {}
    out: dict[str, dict[str, str]] = {}
    for item in podman_json("inspect", *names):
        nets = item.get("NetworkSettings", {}).get("Networks") or {}
        out[item["Name"]] = {net: info.get("IPAddress", "") for net, info in nets.items()}
    return out


def status(topo: LabTopology) -> list[dict[str, Any]]:
    """Every planned container with its state, addresses and cabled ports (present / planned)."""
    have = _containers(topo.site)
    running = [c.name for c in topo.containers if _live(have.get(c.name, {}))]
    pids = (
        _pids(LabTopology(topo.site, (), tuple(c for c in topo.containers if c.name in running), ())) if running else {}
    )
    links = {name: netns_links(pid) for name, pid in pids.items()}
    actual = _addresses(running)
    rows = []
    for c in topo.containers:
        planned = sorted(
            {lk.a_port for lk in topo.links if lk.a == c.name} | {lk.b_port for lk in topo.links if lk.b == c.name}
        )
        rows.append(
            {
                "name": c.host,
                "kind": "switch" if c.image == "frr" else "node",
                "role": c.role,
                "container": c.name,
                "state": _state(have.get(c.name)),
                # What podman gave the container, per interface; `addresses_match` compares it with the plan.
                "addresses": {a.interface: actual.get(c.name, {}).get(a.network, "") for a in c.attachments},
                "addresses_match": all(actual.get(c.name, {}).get(a.network) == a.address for a in c.attachments),
                "ports_planned": len(planned),
                "ports_present": len([p for p in planned if p in links.get(c.name, set())]),
            }
        )
    bmc_running = [b.name for b in topo.bmcs if _live(have.get(b.name, {}))]
    bmc_actual = _addresses(bmc_running)
    for b in topo.bmcs:
        got = bmc_actual.get(b.name, {}).get(b.network, "")
        rows.append(
            {
                "name": f"{b.node}-bmc",
                "kind": "bmc",
                "role": f"{b.protocol}:{b.port}",
                "container": b.name,
                "state": _state(have.get(b.name)),
                "addresses": {"bmc0": got},
                "addresses_match": got == b.address,
                "ports_planned": 0,
                "ports_present": 0,
            }
        )
    vm_running = [v.name for v in topo.vms if _live(have.get(v.name, {}))]
    vm_actual = _addresses(vm_running)
    for v in topo.vms:
        got = vm_actual.get(v.name, {}).get(v.bmc.network, "")
        rows.append(
            {
                "name": v.node,
                "kind": "vm",
                "role": f"ipmi:{v.bmc.port}",
                "container": v.name,
                "state": _state(have.get(v.name)),
                # The VM's own addresses are its installed system's; the container answers as its BMC.
                "addresses": {"bmc0": got},
                "addresses_match": got == v.bmc.address,
                "ports_planned": 0,
                "ports_present": 0,
            }
        )
    return rows


def monitors(ids: list[str]) -> list[int]:
    """PIDs of conmon processes still watching any of these containers."""
    out = run(["ps", "-eo", "pid=,args="], what="ps")
    return [
        int(line.split(None, 1)[0]) for line in out.splitlines() if "conmon" in line and any(i in line for i in ids)
    ]


def _wait_for_monitors(ids: list[str], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while monitors(ids):
        if time.monotonic() > deadline:
            raise LabError(f"container monitors still running after {timeout:.0f} s: pids {monitors(ids)}")
        time.sleep(0.2)


def down(site: str, say: Say) -> dict[str, list[str]]:
    """Remove the containers and networks labelled with this site, and nothing else."""
    removed: dict[str, list[str]] = {"containers": [], "networks": []}
    if mirror.stop(site):  # a mirror its user left serving on the lab's bridge
        say("stopped the lab's git mirror left running")
    if stopped := serving_stop_all(site):  # model servers and proxies `aisite serve` or `promote` started
        say(f"stopped the lab's serving processes: {', '.join(stopped)}")
    have = _containers(site)
    names = sorted(have)
    if names:
        say(f"removing {len(names)} containers")
        _remove(*names, what="removing lab containers")
        removed["containers"] = names
        _wait_for_monitors([have[n]["Id"] for n in names])
    nets = sorted(_existing_networks(site))
    if nets:
        podman("network", "rm", *nets, what="removing lab networks")
        removed["networks"] = nets
    # The lab VMs' disks and power state.
    volumes = sorted(_volumes(site))
    if volumes:
        podman("volume", "rm", *volumes, what="removing lab volumes")
        removed["volumes"] = volumes
    leftover = sorted(_containers(site)) + sorted(_existing_networks(site)) + sorted(_volumes(site))
    if leftover:
        raise LabError(f"still present after down: {', '.join(leftover)}")
    return removed


__all__ = ["LabError", "UpReport", "down", "status", "up"]
