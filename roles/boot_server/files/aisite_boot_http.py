#!/usr/bin/python3
"""aisite's boot HTTP service: per-node iPXE scripts, the install files behind one-time tokens, and the installs'
reports. Standard library only: it runs on the boot server's own Python.

- GET /boot.ipxe: the first script of every node (DHCP names it): chain to /boot/<its MAC>.
- GET /boot/<mac>: an armed node (a file armed/<mac>.json, written by `aisite provision` for as long as the node
  may be installed) gets an iPXE script that boots the installer with a fresh token, once per arming; any other
  MAC, or a second request for the same arming, gets `exit` (boot from the next device: the disk). The token is
  bound to the address that asked and expires with the arming; minting one revokes the node's previous one.
- GET /n/<token>/<file>: the node's install files (kernel, installer, image, partition table, file systems, its
  own files as a tar, with the SSH host key `aisite provision` made for this install), while its token is live and
  presented from the address it was handed to.
- POST /n/<token>/report: `status started|installed|failed`, `step NAME`, `hostkey TYPE KEY` lines. installed and
  failed spend the token and disarm the node: a reused token is refused (403), a finished node boots from disk.
- GET /versions/<node>: the version the node would be installed at now (its image and its own files' digest).
- GET /reports/<node>: what the node reported, with the time of each event, as JSON (for `aisite provision`).
  Both only for the controller: `Authorization: Bearer <token>` whose SHA-256 the configuration holds (they name
  nodes and the MAC of a node being installed); anyone else gets 401.

Tokens are kept as their SHA-256 only. Nothing a request carries is used as a path: MACs, node names and file
names are matched against fixed patterns and sets before they touch the file system.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import json
import os
import re
import secrets
import shutil
import socket
import sys
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MAC = re.compile(r"[0-9a-f]{2}(-[0-9a-f]{2}){5}")
TOKEN = re.compile(r"[A-Za-z0-9_-]{32,64}")
NODE = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
HOSTKEY = re.compile(r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]{16,2048}")
STEP = re.compile(r"[a-z-]{1,32}")
# The image's files, shared by every node of the image (URL name -> file in images/<image>/).
IMAGE_FILES = {"vmlinuz": "vmlinuz", "installer.img": "installer.img", "image.tar.zst": "rootfs.tar.zst"}
SUITES = {"debian-12": "bookworm"}
SUDOERS = "%aisite-admins ALL=(ALL:ALL) NOPASSWD: ALL\n"  # as the common role keeps it
MAX_REPORT = 64 * 1024


class State:
    """The service's files: the boot root (images/, nodes/<node>/) and the state folder (armed/, tokens/,
    reports/). One lock: requests are few (a handful per node install) and each holds it briefly."""

    def __init__(self, root: Path, state: Path, url: str, controller_sha256: str = "") -> None:
        self.root = root
        self.state = state
        self.url = url
        self.controller_sha256 = controller_sha256
        self.lock = threading.Lock()
        for sub in ("armed", "tokens", "reports", "hostkeys"):
            (state / sub).mkdir(parents=True, exist_ok=True)

    # -- reports: one JSON file per node, rewritten whole
    def report(self, node: str) -> dict[str, Any]:
        try:
            return dict(json.loads((self.state / "reports" / f"{node}.json").read_text()))
        except (OSError, ValueError):
            return {"node": node, "events": []}

    def event(self, node: str, name: str, **extra: Any) -> None:
        doc = self.report(node)
        doc["events"].append({"event": name, "time": round(time.time(), 3), **extra})
        doc.update(extra)
        tmp = self.state / "reports" / f".{node}.json"
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        tmp.replace(self.state / "reports" / f"{node}.json")

    # -- arming and tokens
    def armed(self, mac: str) -> dict[str, Any] | None:
        try:
            doc = dict(json.loads((self.state / "armed" / f"{mac}.json").read_text()))
        except (OSError, ValueError):
            return None
        if not NODE.fullmatch(str(doc.get("node", ""))) or float(doc.get("expires", 0)) < time.time():
            return None
        return doc

    def mint(self, mac: str, node: str, armed: dict[str, Any], source: str) -> str | None:
        """A token for the node's install, once per arming (a second request for the same arming, from the node
        or from anyone who learnt its MAC, gets none), bound to the address that asked and expiring with the
        arming. None: this arming has had its token."""
        if armed.get("minted"):
            return None
        armed_file = self.state / "armed" / f"{mac}.json"
        tmp = armed_file.with_name(f".{armed_file.name}")
        tmp.write_text(json.dumps(armed | {"minted": True}))
        tmp.replace(armed_file)
        token = secrets.token_urlsafe(32)
        for old in (self.state / "tokens").glob("*.json"):
            try:
                if json.loads(old.read_text()).get("node") == node:
                    old.unlink()
            except (OSError, ValueError):
                continue
        digest = hashlib.sha256(token.encode()).hexdigest()
        doc = {"node": node, "mac": mac, "source": source, "expires": float(armed["expires"])}
        (self.state / "tokens" / f"{digest}.json").write_text(json.dumps(doc))
        # A new install of the node starts a new report.
        (self.state / "reports" / f"{node}.json").unlink(missing_ok=True)
        return token

    def holder(self, token: str, source: str) -> dict[str, Any] | None:
        """Whose token this is, if it is live and presented from the address it was handed to."""
        if not TOKEN.fullmatch(token):
            return None
        digest = hashlib.sha256(token.encode()).hexdigest()
        try:
            doc = dict(json.loads((self.state / "tokens" / f"{digest}.json").read_text()))
        except (OSError, ValueError):
            return None
        if doc.get("source") != source or float(doc.get("expires", 0)) < time.time():
            return None
        return doc

    def spend(self, token: str, mac: str, node: str) -> None:
        digest = hashlib.sha256(token.encode()).hexdigest()
        (self.state / "tokens" / f"{digest}.json").unlink(missing_ok=True)
        (self.state / "armed" / f"{mac}.json").unlink(missing_ok=True)
        # The node has its host key (or failed with it): no copy stays here.
        (self.state / "hostkeys" / node).unlink(missing_ok=True)

    def host_key(self, node: str) -> dict[str, tuple[int, str]]:
        """The SSH host key the controller made for this install (armed with it), as the node's files; none when
        provision armed the node without one (the installer then makes its own)."""
        try:
            private = (self.state / "hostkeys" / node).read_text()
        except OSError:
            return {}
        if not private.startswith("-----BEGIN OPENSSH PRIVATE KEY-----"):
            return {}
        return {"etc/ssh/ssh_host_ed25519_key": (0o600, private if private.endswith("\n") else private + "\n")}

    def site(self) -> dict[str, Any]:
        """site.json (the role writes it from the plan), read again when it changed."""
        path = self.root / "site.json"
        mtime = path.stat().st_mtime_ns
        if getattr(self, "_site_mtime", None) != mtime:
            self._site = dict(json.loads(path.read_text()))
            self._site_mtime = mtime
        return self._site

    def target(self, node: str) -> dict[str, Any]:
        return next(t for t in self.site()["provisioning"]["targets"] if t["node"] == node)


def _profile(site: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in site["provisioning"]["profiles"] if p["name"] == target["profile"])


def _image(site: dict[str, Any], profile: dict[str, Any]) -> dict[str, Any]:
    return next(i for i in site["images"] if i["os"] == profile["os"])


def partitions_sfdisk(profile: dict[str, Any]) -> str:
    lines = ["label: gpt"]
    for p in profile["partitions"]:
        size = f"size={p['size_mib']}MiB, " if p["size_mib"] is not None else ""
        lines.append(f"{size}type={p['type_guid']}")
    return "\n".join(lines) + "\n"


def filesystems(profile: dict[str, Any]) -> str:
    """`number fs mount` lines in mount order (a parent before what is mounted under it); swap and the BIOS boot
    partition have no mount ("-")."""
    parts = sorted(profile["partitions"], key=lambda p: (p["mount"] is None, p["mount"] or ""))
    return "".join(f"{p['number']} {p['fs']} {p['mount'] or '-'}\n" for p in parts)


def _network_files(iface: dict[str, Any], gateway: str | None, site: dict[str, Any]) -> dict[str, tuple[int, str]]:
    """systemd-networkd's files for one NIC: named by its MAC (.link), addressed as the plan says (.network)."""
    name = iface["name"]
    network = [
        "[Match]",
        f"Name={name}",
        "",
        "[Link]",
        f"MTUBytes={iface['mtu']}",
        "",
        "[Network]",
        f"Address={iface['address']}/{iface['prefix']}",
    ]
    if gateway:
        network += [f"Gateway={gateway}", *(f"DNS={d}" for d in site["dns_servers"])]
        network += [f"Domains={site['domain']}"] if site["domain"] else []
    return {
        f"etc/systemd/network/10-aisite-{name}.link": (
            0o644,
            f"[Match]\nMACAddress={iface['mac']}\n\n[Link]\nName={name}\nMTUBytes={iface['mtu']}\n",
        ),
        f"etc/systemd/network/20-aisite-{name}.network": (0o644, "\n".join(network) + "\n"),
    }


def node_files(site: dict[str, Any], target: dict[str, Any]) -> dict[str, tuple[int, str]]:
    """The node's own files, path -> (mode, text): what makes the shared image this node. Its storage NIC is set
    up too when the plan knows its MAC."""
    prov, profile = site["provisioning"], _profile(site, target)
    mgmt, node = target["management"], target["node"]
    suite = SUITES[profile["os"]]
    users = list(site["admin_users"])
    deploy = site["deploy_user"]
    files: dict[str, tuple[int, str]] = {
        "etc/hostname": (0o644, f"{node}\n"),
        "etc/hosts": (0o644, f"127.0.0.1 localhost\n{mgmt['address']} {target['fqdn']} {node}\n"),
        **_network_files(mgmt, prov["gateway"], site),
        **(_network_files(target["storage"], None, site) if (target.get("storage") or {}).get("mac") else {}),
        "etc/default/grub.d/aisite.cfg": (0o644, f'GRUB_CMDLINE_LINUX="{" ".join(profile["kernel_args"])}"\n'),
        "etc/apt/sources.list": (
            0o644,
            f"deb {prov['mirror']} {suite} main\ndeb {prov['mirror']} {suite}-updates main\n",
        ),
        "etc/sudoers.d/90-aisite-admins": (0o440, SUDOERS),
    }
    accounts = [(u["name"], "sudo" if u["sudo"] else "-", u["ssh_keys"]) for u in users]
    keys = list(site["deploy_keys"])
    if deploy == "root":
        files["root/.ssh/authorized_keys"] = (0o600, "".join(f"{k}\n" for k in keys))
    else:
        accounts.append((deploy, "sudo", keys))
    for name, _, user_keys in accounts:
        files[f"home/{name}/.ssh/authorized_keys"] = (0o600, "".join(f"{k}\n" for k in user_keys))
    files["etc/aisite/users"] = (0o600, "".join(f"{name} {sudo}\n" for name, sudo, _ in accounts))
    return files


def version(site: dict[str, Any], target: dict[str, Any]) -> str:
    """What the node is installed at: its image and everything the install writes for it."""
    profile = _profile(site, target)
    doc = {
        "image": _image(site, profile)["digest"],
        "partitions": partitions_sfdisk(profile),
        "filesystems": filesystems(profile),
        "disk": profile["disk"],
        "boot_mode": profile["boot_mode"],
        "files": sorted(node_files(site, target).items()),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def install_marker(site: dict[str, Any], target: dict[str, Any]) -> str:
    profile = _profile(site, target)
    doc = {"node": target["node"], "profile": profile["name"], "os": profile["os"], "version": version(site, target)}
    return json.dumps(doc, indent=2) + "\n"


def ipxe_script(state: State, token: str, node: str, mac: str) -> str:
    site = state.site()
    cfg = _profile(site, state.target(node))
    base = f"{state.url}/n/{token}"
    args = " ".join(
        [
            "initrd=installer.img",
            "boot=aisite-install",
            "ip=dhcp",
            f"BOOTIF=01-{mac}",
            f"aisite.url={base}",
            f"aisite.disk={cfg['disk']}",
            f"aisite.mode={cfg['boot_mode']}",
            *site["installer_args"],
        ]
    )
    return f"#!ipxe\nkernel {base}/vmlinuz {args}\ninitrd {base}/installer.img\nboot\n"


def node_tar(files: dict[str, tuple[int, str]]) -> bytes:
    """The node's files as a tar the installer unpacks over /: owned by root (the installer gives the users their
    homes), folders 0755 but .ssh 0700, the same bytes every time."""
    buf = io.BytesIO()
    dirs: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path, (mode, text) in sorted(files.items()):
            parts = path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o700 if d.endswith(".ssh") else 0o755
                    info.uname = info.gname = "root"
                    tar.addfile(info)
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), mode
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class Handler(BaseHTTPRequestHandler):
    server_version = "aisite-boot"
    state: State
    server: Server
    # A client that sends nothing (or trickles) is dropped after this many seconds, whatever it holds.
    timeout = 30

    def setup(self) -> None:
        super().setup()
        self.server.idle(self.connection, True)

    def parse_request(self) -> bool:
        # A whole request arrived: this connection is no longer idle (it is served, then idle again).
        ok = super().parse_request()
        if ok:
            self.server.idle(self.connection, False)
        return ok

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        finally:
            self.server.idle(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.gone(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        # The path holds tokens: log the route, never the token; a request too long or garbled to parse has no
        # path yet, and whatever it sent is logged printable and short.
        path = re.sub(r"/n/[^/]+/", "/n/<token>/", str(getattr(self, "path", "") or ""))[:200]
        path = "".join(c if c.isprintable() else "?" for c in path)
        code = args[1] if len(args) > 1 and isinstance(args[1], (int, str)) else ""
        sys.stderr.write(f"{self.address_string()} {getattr(self, 'command', '-')} {path} {code}\n")

    def _controller(self) -> bool:
        """Whether the request carries the controller's token (compared by digest, in constant time)."""
        want = self.state.controller_sha256
        said = str(self.headers.get("Authorization") or "")
        if not want or not said.startswith("Bearer "):
            return False
        got = hashlib.sha256(said[len("Bearer ") :].strip().encode()).hexdigest()
        return hmac.compare_digest(got, want)

    def _source(self) -> str:
        return str(self.client_address[0])

    def _send(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _file(self, path: Path) -> None:
        try:
            f = path.open("rb")
        except OSError:
            self._send(404, b"not found\n")
            return
        with f:
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(os.fstat(f.fileno()).st_size))
            self.end_headers()
            shutil.copyfileobj(f, self.wfile, 1 << 20)

    def do_GET(self) -> None:
        parts = self.path.split("?", 1)[0].strip("/").split("/")
        st = self.state
        if parts == ["boot.ipxe"]:
            self._file(st.root / "boot.ipxe")
        elif len(parts) == 2 and parts[0] == "boot" and MAC.fullmatch(parts[1]):
            mac = parts[1]
            with st.lock:
                armed = st.armed(mac)
                if armed is None:
                    self._send(200, b"#!ipxe\necho aisite: not armed for install, booting from disk\nexit\n")
                    return
                node = str(armed["node"])
                token = st.mint(mac, node, armed, self._source())
                if token is None:
                    self._send(200, b"#!ipxe\necho aisite: this arming has had its token, booting from disk\nexit\n")
                    return
                st.event(node, "ipxe", mac=mac.replace("-", ":"), version=version(st.site(), st.target(node)))
                script = ipxe_script(st, token, node, mac)
            self._send(200, script.encode())
        elif len(parts) == 3 and parts[0] == "n":
            holder = st.holder(parts[1], self._source())
            if holder is None:
                self._send(403, b"token unknown, spent, expired or not yours\n")
                return
            node, name = str(holder["node"]), parts[2]
            site = st.site()
            target = st.target(node)
            profile = _profile(site, target)
            if name in IMAGE_FILES:
                with st.lock:
                    st.event(node, name)
                self._file(st.root / "images" / _image(site, profile)["name"] / IMAGE_FILES[name])
            elif name == "partitions.sfdisk":
                self._send(200, partitions_sfdisk(profile).encode())
            elif name == "filesystems":
                self._send(200, filesystems(profile).encode())
            elif name == "node.tar":
                files = node_files(site, target) | {"etc/aisite/installed.json": (0o644, install_marker(site, target))}
                files |= st.host_key(node)  # not part of the version: a new key each install
                self._send(200, node_tar(files), "application/x-tar")
            else:
                self._send(404, b"not found\n")
        elif len(parts) == 2 and parts[0] in ("reports", "versions") and not self._controller():
            self._send(401, b"for the controller only\n")
        elif len(parts) == 2 and parts[0] == "reports" and NODE.fullmatch(parts[1]):
            with st.lock:
                doc = st.report(parts[1])
            self._send(200, (json.dumps(doc, indent=2) + "\n").encode(), "application/json")
        elif len(parts) == 2 and parts[0] == "versions" and NODE.fullmatch(parts[1]):
            site = st.site()
            targets = [t for t in site["provisioning"]["targets"] if t["node"] == parts[1]]
            if not targets:
                self._send(404, b"not a node to install\n")
                return
            doc = {"node": parts[1], "version": version(site, targets[0])}
            self._send(200, (json.dumps(doc) + "\n").encode(), "application/json")
        else:
            self._send(404, b"not found\n")

    def do_POST(self) -> None:
        parts = self.path.strip("/").split("/")
        if not (len(parts) == 3 and parts[0] == "n" and parts[2] == "report"):
            self._send(404, b"not found\n")
            return
        st = self.state
        raw = self.headers.get("Content-Length") or "0"
        if not raw.isdigit():  # negative, signed or not a number: refused, never read as "until the end"
            self._send(400, b"bad Content-Length\n")
            return
        length = int(raw[:12])
        if length > MAX_REPORT:
            self._send(413, b"report too large\n")
            return
        body = self.rfile.read(length).decode("ascii", errors="replace")
        with st.lock:
            holder = st.holder(parts[1], self._source())
            if holder is None:
                self._send(403, b"token unknown, spent, expired or not yours\n")
                return
            node, mac = str(holder["node"]), str(holder["mac"])
            status, step, keys = "", "", []
            for line in body.splitlines():
                key, _, value = line.partition(" ")
                if key == "status" and value in ("started", "installed", "failed"):
                    status = value
                elif key == "step" and STEP.fullmatch(value):
                    step = value
                elif key == "hostkey" and HOSTKEY.fullmatch(value):
                    keys.append(value)
            if not status:
                self._send(400, b"no status\n")
                return
            extra: dict[str, Any] = {"status": status, "step": step}
            if keys:
                extra["host_keys"] = keys
            st.event(node, status, **extra)
            if status in ("installed", "failed"):
                st.spend(parts[1], mac, node)
        self._send(200, b"ok\n")


class Server(ThreadingHTTPServer):
    """At most MAX_CONNECTIONS connections at once. When all are taken, the one idle longest (connected, or between
    requests, with no whole request yet) is shed to make room: clients that connect and send nothing cannot hold
    the slots a node's install needs (each is dropped after Handler.timeout in any case). Only when none is idle
    is a new connection closed at once."""

    daemon_threads = True
    MAX_CONNECTIONS = 64
    SHED_WAIT_S = 2.0  # how long a new connection waits for the slot a shed one leaves

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.slots = threading.BoundedSemaphore(self.MAX_CONNECTIONS)
        self.lock = threading.Lock()
        self.waiting: dict[Any, float | None] = {}  # connection -> idle since (monotonic), None while served
        self.shed = 0

    def idle(self, conn: Any, idle: bool) -> None:
        with self.lock:
            self.waiting[conn] = time.monotonic() if idle else None

    def gone(self, conn: Any) -> None:
        with self.lock:
            self.waiting.pop(conn, None)

    def _shed_one(self) -> bool:
        """Shut the longest-idle connection down (its handler sees the end of the stream and returns its slot)."""
        with self.lock:
            idle = [(since, id(c), c) for c, since in self.waiting.items() if since is not None]
            if not idle:
                return False
            _, _, conn = min(idle)
            self.waiting.pop(conn, None)
            self.shed += 1
        with contextlib.suppress(OSError):  # it closed meanwhile
            conn.shutdown(socket.SHUT_RDWR)
        return True

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False) and not (
            self._shed_one() and self.slots.acquire(timeout=self.SHED_WAIT_S)
        ):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def main(argv: list[str]) -> int:
    config = json.loads(Path(argv[1] if len(argv) > 1 else "/etc/aisite-boot/http.json").read_text())
    state = State(Path(config["root"]), Path(config["state"]), config["url"], config.get("controller_token_sha256", ""))
    handler = type("BoundHandler", (Handler,), {"state": state})
    server = Server((config["listen"], int(config["port"])), handler)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
