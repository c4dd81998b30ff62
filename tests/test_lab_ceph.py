"""The shell the lab's tests and storage bench wrap their Ceph chores in, run with stand-ins for ceph-fuse and
umount (no Ceph here): mounted first, unmounted last from outside the mount, whether the command passes or fails."""

from __future__ import annotations

import subprocess
from pathlib import Path

from aisite.lab.ceph import with_admin_mount


def run(tmp_path: Path, command: str) -> tuple[int, list[str]]:
    bin_dir, log = tmp_path / "bin", tmp_path / "log"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("ceph-fuse", "umount"):  # each records its arguments and the directory it runs in
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $* in $(pwd)" >> {log}\n')
        (bin_dir / tool).chmod(0o755)
    mount = tmp_path / "mnt"
    script = with_admin_mount("data", str(mount), f"cd {mount}; echo command >> {log}; {command}")
    r = subprocess.run(["sh", "-c", script], env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, check=False)
    return r.returncode, log.read_text().splitlines()


def test_the_command_runs_between_mount_and_unmount_and_an_error_still_unmounts(tmp_path: Path) -> None:
    mount = tmp_path / "mnt"
    for command, rc in (("true", 0), ("false", 1)):
        (tmp_path / "log").unlink(missing_ok=True)
        assert run(tmp_path, command) == (
            rc,
            [f"ceph-fuse --client_fs=data {mount} in {Path.cwd()}", "command", f"umount {mount} in /"],
        )
