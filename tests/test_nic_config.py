"""The rail NICs' firmware settings (module aisite.site.nic_config): mstconfig's query table parsed narrowly, and the
module run by Ansible with the real mstconfig (mstflint) against PCI functions this machine does not have."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.adhoc import load_module, run_module


def _module() -> ModuleType:
    return load_module("nic_config")


def _query(rows: list[tuple[str, ...]], verbose: bool = True) -> str:
    """A table as mstflint 4.21 prints it (mlxconfig/mlxcfg_ui.cpp: printOpening, printConfHeader with -e,
    printSingleParam: "*" where the next boot differs, the name in 36 columns, each value in 16)."""
    head = (
        "%-16s%36s%16s%18s" % ("Configurations:", "Default", "Current", "Next Boot")  # noqa: UP031 (C's format)
        if verbose
        else "%-16s%38s" % ("Configurations:", "Next Boot")  # noqa: UP031
    )
    lines = ["", "Device #1:", "----------", "", "Device type:    ConnectX7", "Device:         0000:18:00.0", "", head]
    for name, *values in rows:
        star = "*" if len(set(values)) > 1 else " "
        lines.append(f"{star}        {name:<36}" + "".join(f"{v:<16}" for v in values))
    return "\n".join(lines) + "\n"


def test_the_query_table_is_read_by_its_header_and_only_the_settings_asked() -> None:
    m = _module()
    text = _query(
        [
            ("NUM_OF_VFS", "0", "0", "8"),
            ("SRIOV_EN", "False(0)", "False(0)", "True(1)"),
            ("LINK_TYPE_P1", "IB(1)", "IB(1)", "IB(1)"),
            ("PF_BAR2_SIZE", "N/A", "N/A", "N/A"),
        ]
    )
    got = m.parse_query(text, ["LINK_TYPE_P1", "NUM_OF_VFS", "SRIOV_EN"])
    assert got == {
        "LINK_TYPE_P1": {"default": 1, "current": 1, "next": 1},
        "NUM_OF_VFS": {"default": 0, "current": 0, "next": 8},
        "SRIOV_EN": {"default": 0, "current": 0, "next": 1},
    }
    # Without -e only the next boot is printed.
    plain = _query([("LINK_TYPE_P1", "ETH(2)")], verbose=False)
    assert m.parse_query(plain, ["LINK_TYPE_P1"]) == {"LINK_TYPE_P1": {"next": 2}}


def test_hostile_or_short_output_is_an_error_never_a_guess() -> None:
    m = _module()
    with pytest.raises(m.ParseError, match="no 'Configurations:' table"):
        m.parse_query("-E- Failed to open device\n", ["LINK_TYPE_P1"])
    with pytest.raises(m.ParseError, match="reports no LINK_TYPE_P2"):
        m.parse_query(_query([("LINK_TYPE_P1", "IB(1)", "IB(1)", "ETH(2)")]), ["LINK_TYPE_P1", "LINK_TYPE_P2"])
    with pytest.raises(m.ParseError, match=r"LINK_TYPE_P1: current value .* is not one mstconfig prints"):
        m.parse_query(_query([("LINK_TYPE_P1", "IB(1)", "$(reboot)", "ETH(2)")]), ["LINK_TYPE_P1"])
    # A huge answer is read only as far as its first 64 KiB.
    huge = _query([("LINK_TYPE_P1", "IB(1)", "IB(1)", "ETH(2)")]) + "x" * 10_000_000
    assert m.parse_query(huge, ["LINK_TYPE_P1"])["LINK_TYPE_P1"]["next"] == 2


def _run(sysfs: Path, devices: list[dict[str, object]], check: bool = False) -> dict[str, Any]:
    return run_module("aisite.site.nic_config", {"devices": devices, "sysfs": str(sysfs)}, check)


@pytest.mark.skipif(shutil.which("mstconfig") is None, reason="mstflint is not installed (scripts/setup.sh does)")
def test_the_module_skips_what_is_not_a_connectx_and_asks_the_real_mstconfig_for_one(tmp_path: Path) -> None:
    (tmp_path / "0000:18:00.0").mkdir()
    (tmp_path / "0000:18:00.0" / "vendor").write_text("0x8086\n")
    devices: list[dict[str, object]] = [
        {"pci": "0000:18:00.0", "settings": [["LINK_TYPE_P1", 2]]},
        {"pci": "0000:9a:00.0", "settings": [["LINK_TYPE_P1", 2], ["SRIOV_EN", 1]]},
    ]
    r = _run(tmp_path, devices)
    assert not r.get("failed") and r["changed"] is False, r
    assert r["missing"] == [
        "0000:18:00.0: vendor 0x8086, not a Mellanox/NVIDIA NIC (settings not set)",
        "0000:9a:00.0: no PCI device here (settings LINK_TYPE_P1, SRIOV_EN not set)",
    ]
    # A ConnectX by its vendor ID that the machine does not have: the real mstconfig is asked and its refusal is
    # the task's failure, with the tool's words.
    (tmp_path / "0000:9a:00.0").mkdir()
    (tmp_path / "0000:9a:00.0" / "vendor").write_text("0x15b3\n")
    r = _run(tmp_path, devices, check=True)
    assert r.get("failed") and str(r["msg"]).startswith("0000:9a:00.0: mstconfig query failed: "), r
    # What the plan gives the module is checked before anything runs.
    r = _run(tmp_path, [{"pci": "0000:18:00.0; reboot", "settings": [["LINK_TYPE_P1", 2]]}])
    assert r.get("failed") and "pci must be a PCI function" in str(r["msg"]), r
    r = _run(tmp_path, [{"pci": "0000:18:00.0", "settings": [["LINK_TYPE_P1", "2 && reboot"]]}])
    assert r.get("failed") and "is not a NAME=integer setting" in str(r["msg"]), r
