"""NVIDIA Onyx: CLI lines rendered by the fabric_onyx role, through network_cli with the collection's cliconf and
terminal plugins (aisite.site.onyx) in enable mode; /31 addresses; no breakout rendered yet.

Onyx's `roce lossless` fixes DSCP 26, PFC priority 3 and CNP DSCP 48 on priority 6; the lines aisite renders cannot
set the ECN probability (its ECN command takes thresholds) nor the PFC watchdog's timers (only `enable`)."""

from __future__ import annotations

from aisite.drivers.switch_os import SwitchOs


def port(port: int, speed_gbps: int, split: int, lanes: int) -> str:
    """Eth1/N, and Eth1/N/M for the Mth port of split cage N."""
    if split > 1:
        cage, sub = divmod(port - 1, split)
        return f"Eth1/{cage + 1}/{sub + 1}"
    return f"Eth1/{port}"


DRIVER = SwitchOs(
    name="onyx",
    title="Onyx",
    renders="CLI lines",
    role="fabric_onyx",
    port=port,
    connection={
        "ansible_connection": "ansible.netcommon.network_cli",
        "ansible_network_os": "aisite.site.onyx",
        "ansible_become": True,
        "ansible_become_method": "ansible.netcommon.enable",
    },
    breakout=False,
    fixed_roce={"roce_dscp": 26, "pfc_priority": 3, "cnp_dscp": 48, "cnp_priority": 6},
    unset_roce=(
        "ecn_probability_percent",
        "pfc_watchdog_poll_ms",
        "pfc_watchdog_detection_ms",
        "pfc_watchdog_restoration_ms",
    ),
)
