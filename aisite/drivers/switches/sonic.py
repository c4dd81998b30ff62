"""SONiC: config_db rendered by the fabric_sonic role (bgpcfgd's tables, checked against SONiC's YANG), /31
addresses, ports named by their first lane as the HWSKU's port_config.ini numbers them.

bgpcfgd's BGP_NEIGHBOR (what aisite writes) has no BFD field in SONiC's YANG; only frrcfgd's vrf-keyed table does,
a different management mode aisite does not render. Its bgpcfgd templates use maximum-paths 64."""

from __future__ import annotations

from aisite.drivers.switch_os import LINUX_SSH, SwitchOs


def port(port: int, speed_gbps: int, split: int, lanes: int) -> str:
    """EthernetN by first lane: Ethernet0 and Ethernet4 of an 8-lane cage split in two."""
    if split > 1:
        cage, sub = divmod(port - 1, split)
        return f"Ethernet{cage * lanes + sub * (lanes // split)}"
    lanes = lanes or (8 if speed_gbps >= 400 else 4)
    return f"Ethernet{(port - 1) * lanes}"


DRIVER = SwitchOs(
    name="sonic",
    title="SONiC",
    renders="config_db",
    role="fabric_sonic",
    port=port,
    # Linux: its role runs sonic-cfggen and config over SSH as root.
    connection=LINUX_SSH,
    bfd=False,
    bfd_why="SONiC's BGP_NEIGHBOR table (bgpcfgd) cannot enable BFD on a session",
)
