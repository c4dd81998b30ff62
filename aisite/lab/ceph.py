"""Shell for the lab's own Ceph chores (the lab tests and `make bench-storage` write data sets with it): a command
run with the file system mounted through ceph-fuse with the admin key, on the first monitor (the GPU nodes' mounts
are read-only)."""

from __future__ import annotations

import shlex


def with_admin_mount(filesystem: str, mount: str, command: str) -> str:
    """`command` (shell) between a ceph-fuse mount of `filesystem` at `mount` and its unmount, which runs whatever
    the command did; leaving the mount first, as umount says busy from inside it."""
    m = shlex.quote(mount)
    return (
        f"set -e; mkdir -p {m}; ceph-fuse --client_fs={shlex.quote(filesystem)} {m} >/dev/null 2>&1;"
        f" trap 'cd /; umount {m}' EXIT; {command}"
    )
