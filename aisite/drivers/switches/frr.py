"""FRR on Linux switches (the lab's, and white boxes): frr.conf rendered by the fabric_frr role, BGP unnumbered,
graceful shutdown through a rollout, ports named as Cumulus names them."""

from __future__ import annotations

from aisite.drivers.switch_os import LINUX_SSH, SwitchOs, linux_port

DRIVER = SwitchOs(
    name="frr",
    title="FRR",
    renders="frr.conf",
    role="fabric_frr",
    port=linux_port,
    connection=LINUX_SSH,
    peering="unnumbered",
    graceful_shutdown=True,
)
