"""SONiC: config_db rendered by the fabric_sonic role (bgpcfgd's tables, checked against SONiC's YANG), /31
addresses, ports named by their first lane as the HWSKU's port_config.ini numbers them.

bgpcfgd's BGP_NEIGHBOR (what aisite writes) has no BFD field in SONiC's YANG; only frrcfgd's vrf-keyed table does,
a different management mode aisite does not render. Its bgpcfgd templates use maximum-paths 64."""

from __future__ import annotations

from aisite.drivers.switch_os import LINUX_SSH, Platform, SwitchOs

# sonic-buildimage's device/mellanox/<platform>/platform.json and <hwsku>/hwsku.json (@ 086b03bd70f9; in
# ../shared/sonic-yang/hwsku): each data cage's breakout_modes, and each HWSKU's default_brkout_mode. The SN5600's
# OSFP cages offer 1x800G, 2x400G and 4x200G; its Mellanox-SN5600-O128 HWSKU boots every cage as 2x400G (128 ports
# of 400G), ACS-SN5600 as 1x800G. The SN2700's QSFP28 cages offer 1x100G and 2x50G (ACS-MSN2700 boots 1x100G).
# Other models' platform files are not in aisite's catalog yet: a SONiC breakout on them is refused.
PLATFORMS = {
    "SN5600": Platform(
        "x86_64-nvidia_sn5600-r0",
        {
            1: "1x800G[400G,200G,100G,50G,40G,25G,10G]",
            2: "2x400G[200G,100G,50G,40G,25G,10G]",
            4: "4x200G[100G,50G,25G,10G]",
        },
        {1: "ACS-SN5600", 2: "Mellanox-SN5600-O128"},
        "sonic-buildimage device/mellanox/x86_64-nvidia_sn5600-r0 platform.json, hwsku.json",
    ),
    "SN2700": Platform(
        "x86_64-mlnx_msn2700-r0",
        {1: "1x100G[50G,40G,25G,10G]", 2: "2x50G[25G,10G]"},
        {1: "ACS-MSN2700"},
        "sonic-buildimage device/mellanox/x86_64-mlnx_msn2700-r0 platform.json, hwsku.json",
    ),
}


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
    platforms=PLATFORMS,
)
