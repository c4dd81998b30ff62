"""The lab's site mirror: `git daemon` on this machine's address on the lab's management bridge (the network's
gateway), serving one repository read-only to the lab's nodes, which pull their layers from it
(gitops.pull_repository: `url(plan)`). git:// authenticates nothing, as a site's plain mirror may not: what a node
applies is only what aisite-verify-commit accepts on the node (a signature by an allowed signer, a descendant of
what it applied), whoever served it. Started and stopped by whoever needs it (the lab tests, `make bench-scale`);
its pid file lets `lab down` stop one left behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aisite.lab.podman import LabError
from aisite.paths import mirror_dir
from aisite.plan import Plan

PORT = 9418  # git's own


def url(plan: Plan) -> str:
    return f"git://{plan.networks.gateway('management')}/{plan.site}.git"


@contextmanager
def serving(plan: Plan, repo: Path) -> Iterator[str]:
    """Serve `repo` (a work tree's .git, or a bare repository) as `url(plan)` while the block runs."""
    base = mirror_dir(plan.site)
    stop(plan.site)
    base.mkdir(parents=True, exist_ok=True)
    link = base / f"{plan.site}.git"
    link.unlink(missing_ok=True)
    link.symlink_to((repo / ".git") if (repo / ".git").is_dir() else repo, target_is_directory=True)
    address = plan.networks.gateway("management")
    daemon = subprocess.Popen(
        [
            # git-daemon itself, not `git daemon`: one process to stop, the one its pid file names.
            str(
                Path(subprocess.run(["git", "--exec-path"], capture_output=True, text=True, check=True).stdout.strip())
                / "git-daemon"
            ),
            "--reuseaddr",
            "--export-all",
            f"--base-path={base}",
            f"--listen={address}",
            f"--port={PORT}",
            f"--pid-file={base / 'pid'}",
            str(base),  # the one directory it may serve from
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        _wait_listening(address, daemon)
        yield url(plan)
    finally:
        daemon.terminate()
        try:
            daemon.wait(10)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        (base / "pid").unlink(missing_ok=True)


def _wait_listening(address: str, daemon: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            said = daemon.stderr.read().decode(errors="replace") if daemon.stderr else ""
            raise LabError(f"git daemon on {address}:{PORT} exited: {said.strip()[-400:]}")
        try:
            with socket.create_connection((address, PORT), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    daemon.kill()
    raise LabError(f"git daemon did not listen on {address}:{PORT} within 10 s")


def stop(site: str) -> bool:
    """Stop a mirror of this site left running (its pid file names it, and it must still be a git daemon)."""
    pid_file = mirror_dir(site) / "pid"
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        pid_file.unlink(missing_ok=True)
        return False
    if not cmdline[0].endswith(b"git-daemon"):
        pid_file.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    pid_file.unlink(missing_ok=True)
    return True
