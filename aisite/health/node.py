"""The node's health check, run by its systemd timer (roles/node_health) or the DaemonSet: read the tools, judge
against the plan's expectations for this node (expected.json, rendered by the role), write status.json and the
metrics node exporter's textfile collector serves. Standard library only; what a tool the node lacks would have
told is reported skipped.

    python3 node.py --expected /etc/aisite/health/expected.json --out /var/lib/aisite/health \\
        --textfile /var/lib/node_exporter/textfile_collector --window 600
"""

from __future__ import annotations

import argparse
import base64
import calendar
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, fields
from pathlib import Path

try:  # inside the package (the controller, tests) or as plain scripts side by side (the nodes)
    from aisite.health import parse
    from aisite.health.judge import Clock, Expected, Facts, FileSystem, NodeHealth, gpu_counters_key, judge
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import parse  # type: ignore[import-not-found,no-redef]
    from judge import (  # type: ignore[import-not-found,no-redef]
        Clock,
        Expected,
        Facts,
        FileSystem,
        NodeHealth,
        gpu_counters_key,
        judge,
    )


def _tool(*cmd: str, timeout: float = 60.0) -> tuple[str | None, str | None]:
    """A tool's stdout, or None and why it failed (its first words and exit status); (None, None): not on the
    node."""
    if shutil.which(cmd[0]) is None:
        return None, None
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, errors="replace")
    except subprocess.TimeoutExpired:
        return None, f"no answer in {timeout:g} s"
    except OSError as exc:
        return None, exc.strerror or "could not be run"
    if r.returncode == 0:
        return r.stdout, None
    said = " ".join(line.strip() for line in (r.stdout + "\n" + r.stderr).splitlines() if line.strip())
    return None, f"{said[:200] or 'no output'} (exit {r.returncode})"


def _run(*cmd: str, timeout: float = 60.0) -> str | None:
    """A tool's stdout, or None when the tool is not on the node or fails."""
    return _tool(*cmd, timeout=timeout)[0]


def _kernel_log(window: int) -> str | None:
    # A container has no kernel log of its own (no /dev/kmsg): nothing to read, said as skipped.
    if not os.path.exists("/dev/kmsg"):
        return None
    return _run("journalctl", "-k", "--no-pager", "-o", "short", "--since", f"-{window}s") or _run("dmesg")


def _filesystems(mounts: list[str]) -> list[FileSystem]:
    out = []
    for m in mounts:
        try:
            st = os.statvfs(m)
        except OSError:
            continue
        used = 1 - st.f_bavail / st.f_blocks if st.f_blocks else 0.0
        out.append(FileSystem(m, bool(st.f_flag & os.ST_RDONLY), round(used, 4)))
    return out


def _clock() -> Clock | None:
    text = _run("chronyc", "-c", "tracking", timeout=10)
    if not text:
        return None
    fields = text.strip().split(",")
    # chronyc -c tracking: ..., [4] system time offset (s), ..., [13] leap status.
    if len(fields) < 14:
        return None
    return Clock(fields[13] != "Not synchronised", float(fields[4]))


KUBERNETES = Path("/etc/kubernetes")
# The kubeconfigs whose client certificate kubeadm writes in them (and `kubeadm certs renew` renews); the kubelet's
# own points at a file it rotates itself.
KUBECONFIGS = ("admin.conf", "super-admin.conf", "controller-manager.conf", "scheduler.conf")
_CLIENT_CERT = re.compile(r"^\s*client-certificate-data:\s*([A-Za-z0-9+/=]+)\s*$", re.MULTILINE)


def _days_left(pem: bytes, now: float) -> float | None:
    """Days until a PEM certificate's notAfter, read by openssl (`notAfter=Nov 26 14:00:00 2027 GMT`)."""
    if shutil.which("openssl") is None:
        return None
    try:
        r = subprocess.run(
            ["openssl", "x509", "-noout", "-enddate"], input=pem, capture_output=True, timeout=10, check=False
        )
        text = r.stdout.decode("ascii", "replace").strip()
        end = calendar.timegm(time.strptime(text.removeprefix("notAfter="), "%b %d %H:%M:%S %Y %Z"))
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    return round((end - now) / 86400, 1)


def certificates(root: Path = KUBERNETES, now: float | None = None) -> dict[str, float | None] | None:
    """Days left of each kubeadm certificate under `root` (pki/**/*.crt and the kubeconfigs' client certificates),
    by its path under `root`; None where kubeadm put none (no `pki` there)."""
    pki = root / "pki"
    if not pki.is_dir():
        return None
    at = time.time() if now is None else now
    found: dict[str, float | None] = {}
    for crt in sorted(pki.rglob("*.crt")):
        found[str(crt.relative_to(root))] = _days_left(crt.read_bytes(), at)
    for name in KUBECONFIGS:
        conf = root / name
        match = _CLIENT_CERT.search(conf.read_text(errors="replace")) if conf.is_file() else None
        if match:
            try:
                found[name] = _days_left(base64.b64decode(match.group(1), validate=True), at)
            except ValueError:
                found[name] = None
    return found


def _counters(facts: Facts) -> dict[str, dict[str, int]]:
    """What the next check compares with: each RDMA port's error counters and each GPU's clock event counters."""
    out = {f"{p.device}/{p.port}": p.counters for p in facts.rdma or []}
    return out | {gpu_counters_key(g.bus_id): g.clock_event_us for g in facts.memory or [] if g.clock_event_us}


def collect(expected: Expected, window: int, previous: dict[str, dict[str, int]] | None = None) -> Facts:
    # The whole query: the driver's GPU Recovery Action is in no -d section of ECC, ROW_REMAPPER or PAGE_RETIREMENT.
    smi, smi_error = _tool("nvidia-smi", "-q") if expected.gpus else (None, None)
    nvlink = _run("nvidia-smi", "nvlink", "--status") if expected.nvlink else None
    log = _kernel_log(window)
    links = _run("ip", "-j", "addr", "show")
    ib = Path("/sys/class/infiniband")
    rdma = parse.rdma_ports(ib) if ib.is_dir() and any(ib.iterdir()) else None
    rail_rdma = {}
    for name, *_ in expected.rails:
        behind = Path("/sys/class/net") / name / "device" / "infiniband"
        found = sorted(p.name for p in behind.iterdir()) if behind.is_dir() else []
        if found:
            rail_rdma[name] = found[0]
    imex, imex_error = None, None
    if expected.imex_address:
        text, why = _tool("nvidia-imex-ctl", "-N", timeout=30)
        imex = parse.imex_domain(text) if text is not None else None
        imex_error = None if text is not None else (why or "nvidia-imex-ctl is not installed")
    return Facts(
        xids=parse.xid_events(log) if log is not None else None,
        memory=parse.smi_query(smi) if smi is not None else None,
        driver=parse.smi_driver(smi) if smi is not None else None,
        smi_error=smi_error,
        nvlink=parse.nvlink_status(nvlink) if nvlink is not None else None,
        links=parse.ip_links(links) if links is not None else None,
        filesystems=_filesystems(["/"]),
        clock=_clock(),
        rdma=rdma,
        previous_counters=previous,
        rail_rdma=rail_rdma,
        certificates=certificates(),
        imex=imex,
        imex_error=imex_error,
    )


def esc(v: str) -> str:
    """A label value as the text format wants it."""
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def metrics(h: NodeHealth, now: float, certs: dict[str, float | None] | None = None) -> str:
    """Prometheus text: the node's verdict, one series per problem, what was skipped, its certificates' days left
    (an alert can fire long before the check's limit), when it ran."""
    lines = [
        "# HELP aisite_health_healthy 1 when the node's last health check found no problem",
        "# TYPE aisite_health_healthy gauge",
        f'aisite_health_healthy{{node="{esc(h.node)}"}} {int(h.healthy)}',
        "# HELP aisite_health_problem A problem the last check found (check, subject)",
        "# TYPE aisite_health_problem gauge",
        *(f'aisite_health_problem{{check="{esc(p.check)}",subject="{esc(p.subject)}"}} 1' for p in h.problems),
        "# HELP aisite_health_skipped A check the node could not run",
        "# TYPE aisite_health_skipped gauge",
        *(f'aisite_health_skipped{{check="{esc(s.split(":")[0])}"}} 1' for s in h.skipped),
        "# HELP aisite_certificate_expiry_days Days until a Kubernetes certificate of the node expires",
        "# TYPE aisite_certificate_expiry_days gauge",
        *(
            f'aisite_certificate_expiry_days{{certificate="{esc(name)}"}} {days}'
            for name, days in sorted((certs or {}).items())
            if days is not None
        ),
        "# HELP aisite_health_last_run_timestamp_seconds When the check last ran",
        "# TYPE aisite_health_last_run_timestamp_seconds gauge",
        f"aisite_health_last_run_timestamp_seconds {now:.0f}",
    ]
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> None:
    """Atomically, as aisite.render.bundle writes: kept here, as this file runs on nodes without the package."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--expected", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--textfile", type=Path, default=None)
    p.add_argument("--window", type=int, default=600, help="Seconds of kernel log read each pass.")
    a = p.parse_args(argv)
    doc = json.loads(a.expected.read_text())
    # What the controller leaves out, the judge's own defaults (one copy on the node; tests/test_facts.py holds
    # them to the model's).
    default = {f.name: f.default for f in fields(Expected)}
    expected = Expected(
        node=doc["node"],
        gpus=int(doc["gpus"]),
        nvlink=bool(doc["nvlink"]),
        rails=tuple((r["interface"], int(r["mtu"]), r["address"]) for r in doc["rails"]),
        max_fs_used=float(doc.get("max_fs_used", default["max_fs_used"])),
        max_clock_offset_s=float(doc.get("max_clock_offset_s", default["max_clock_offset_s"])),
        rail_gbps=int(doc.get("rail_gbps", 0)),
        rdma=tuple(str(r.get("rdma", "")) for r in doc["rails"]),
        min_certificate_days=int(doc.get("min_certificate_days", default["min_certificate_days"])),
        driver_branch=int(doc.get("driver_branch", 0)),
        rack=str(doc.get("rack", "")),
        imex_address=str(doc.get("imex_address", "")),
    )
    now = time.time()
    counters_file = a.out / "counters.json"  # the RDMA ports' and GPUs' counters at this check
    previous = json.loads(counters_file.read_text()) if counters_file.is_file() else None
    facts = collect(expected, a.window, previous)
    h = judge(facts, expected)
    counters = _counters(facts)
    if counters:
        _write(counters_file, json.dumps(counters) + "\n")
    status = {"node": h.node, "healthy": h.healthy, "reason": h.reason, "at": now} | {
        k: v for k, v in asdict(h).items() if k != "node"
    }
    _write(a.out / "status.json", json.dumps(status, indent=2) + "\n")
    if a.textfile:
        _write(a.textfile / "aisite_health.prom", metrics(h, now, facts.certificates))
    print(json.dumps({"node": h.node, "healthy": h.healthy, "problems": len(h.problems)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
