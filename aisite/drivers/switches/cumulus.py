"""Cumulus Linux: NVUE rendered by the fabric_cumulus role (and the access switches' VLANs), BGP unnumbered.

NVUE's syntax changed in 5.15: the role renders 5.11-5.14 and 5.15 on, the releases
tests/test_switch_configs.py's NVUE path table documents."""

from __future__ import annotations

from aisite.drivers.switch_os import LINUX_SSH, SwitchOs, linux_port

DRIVER = SwitchOs(
    name="cumulus",
    title="Cumulus Linux",
    renders="NVUE",
    role="fabric_cumulus",
    port=linux_port,
    # Linux: its role runs nv over SSH as root.
    connection=LINUX_SSH,
    peering="unnumbered",
    access=True,
    releases=((5, 11), (5, 15)),
    releases_why="NVUE's syntax changed in 5.15",
)
