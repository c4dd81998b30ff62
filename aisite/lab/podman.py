"""Running podman (with the lab's containers.conf), ip and nsenter, with errors that say what failed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

CONF = Path(__file__).with_name("containers.conf")
# Debian packages the lab needs on this machine, and the command each provides.
TOOLS = {"podman": "podman", "runc": "runc", "debootstrap": "debootstrap", "nsenter": "util-linux", "ip": "iproute2"}


class LabError(Exception):
    """A lab step failed; the message names the step and what the command said."""


def missing_tools() -> list[str]:
    return sorted({pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None})


def ensure_tools() -> list[str]:
    """Install what is missing when root with apt; otherwise a clear error naming the packages. Returns installed."""
    missing = missing_tools()
    if not missing:
        return []
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise LabError(
            f"the lab needs the Debian packages {', '.join(missing)}: install them (apt-get install -y "
            f"{' '.join(missing)}) or run as root so aisite installs them"
        )
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    for args in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
        r = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
        if r.returncode:
            raise LabError(f"{' '.join(args)} failed: {r.stderr.strip()[-500:]}")
    still = missing_tools()
    if still:
        raise LabError(f"installed {', '.join(missing)} but still missing: {', '.join(still)}")
    return missing


def run(args: list[str], *, check: bool = True, stdin: bytes | None = None, what: str = "") -> str:
    env = os.environ | {"CONTAINERS_CONF": str(CONF)}
    r = subprocess.run(args, capture_output=True, input=stdin, env=env, check=False)
    if check and r.returncode:
        err = r.stderr.decode(errors="replace").strip()
        raise LabError(f"{what or ' '.join(args[:3])}: {err[-800:] or f'exit {r.returncode}'}")
    return r.stdout.decode(errors="replace")


def podman(*args: str, check: bool = True, what: str = "") -> str:
    return run(["podman", *args], check=check, what=what or f"podman {args[0]}")


def podman_json(*args: str) -> Any:
    text = podman(*args)
    return json.loads(text) if text.strip() else []


def netns_links(pid: int) -> set[str]:
    """Interface names in a container's network namespace."""
    out = run(["nsenter", "-t", str(pid), "-n", "ip", "-o", "link", "show"], what=f"list links of pid {pid}")
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line}
