# Runs on the host: what mstconfig (mstflint; NVIDIA's mlxconfig) reports of the rail NICs' non-volatile settings is
# the NIC's word, parsed narrowly (the settings asked for, each an integer) and never run or templated.
from __future__ import annotations

import os
import re
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: nic_config
short_description: Set a ConnectX NIC's firmware settings for its next boot (mstflint's mstconfig)
description:
  - For each device, reads the settings asked for with C(mstconfig -e -d PCI query NAME...) (default, current and
    next-boot values) and sets those whose next-boot value differs with C(mstconfig -y -d PCI set NAME=VALUE...).
    The NIC takes them at the next boot; until then the device is reported in RV(reboot).
  - A PCI function with no device, or one that is not a Mellanox/NVIDIA NIC (vendor 0x15b3), is reported in
    RV(missing), not failed, since the host is not the hardware the plan names (a container, a VM).
  - In check mode nothing is set; what would be is reported as changed.
options:
  devices:
    description: The NICs, each C(pci) (its function 0, V(0000:18:00.0)) and C(settings), a list of
      [NAME, VALUE] pairs (mstconfig's parameter names, non-negative integer values).
    type: list
    elements: dict
    required: true
  tool:
    description: The configuration tool (mstflint's C(mstconfig); NVIDIA MFT's C(mlxconfig) takes the same commands).
    type: str
    default: mstconfig
  sysfs:
    description: Where PCI devices are listed (tests point it elsewhere).
    type: path
    default: /sys/bus/pci/devices
author: aisite
"""

EXAMPLES = r"""
- name: RoCE host | Rails on Ethernet
  aisite.site.nic_config:
    devices:
      - {pci: "0000:18:00.0", settings: [[LINK_TYPE_P1, 2]]}
"""

RETURN = r"""
devices:
  description: Per device read, per setting its default, current and next-boot value and the one wanted.
  type: dict
  returned: always
missing:
  description: Devices not set, and why (named so because Ansible reads a result's C(skipped) as the task's own).
  type: list
  returned: always
reboot:
  description: Settings set for the next boot that the NIC does not run yet (C(0000:18:00.0 LINK_TYPE_P1 1 -> 2)).
  type: list
  returned: always
"""

PCI = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
MELLANOX = 0x15B3
# mstconfig prints a value as its number, NAME(number), N/A, or Array[a..b] (mlxconfig/mlxcfg_ui.cpp, printValue).
_VALUE = re.compile(r"^(?:[A-Za-z0-9_]{1,32}\((\d{1,10})\)|(\d{1,10})|N/A|Array\[\d{1,5}\.\.\d{1,5}\])$")
_LIMIT = 1 << 16


class ParseError(ValueError):
    pass


def parse_query(text: str, names: list[str]) -> dict[str, dict[str, int | None]]:
    """`mstconfig -e -d PCI query NAMES` as NAME -> {default, current, next}: the table under "Configurations:",
    whose header names the columns (mstflint 4.21, mlxconfig/mlxcfg_ui.cpp printConfHeader/printSingleParam: an
    optional "*" where the next boot differs, the name, then one value per column). Only `names` are kept; one of
    them missing or a value that is not one of mstconfig's forms is an error."""
    lines = text[:_LIMIT].splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith("Configurations:")), None)
    if header is None:
        raise ParseError("no 'Configurations:' table in mstconfig's output")
    columns = ["default"] if "Default" in lines[header] else []
    columns += ["current"] if "Current" in lines[header] else []
    columns.append("next")
    found: dict[str, dict[str, int | None]] = {}
    for line in lines[header + 1 :]:
        fields = line[:512].split()
        if fields[:1] == ["*"]:
            fields = fields[1:]
        if len(fields) != len(columns) + 1 or fields[0] not in names:
            continue
        values: dict[str, int | None] = {}
        for column, raw in zip(columns, fields[1:], strict=True):
            m = _VALUE.match(raw)
            if m is None:
                raise ParseError(f"{fields[0]}: {column} value {raw[:40]!r} is not one mstconfig prints")
            number = m.group(1) or m.group(2)
            values[column] = int(number) if number is not None else None
        found[fields[0]] = values
    missing = [n for n in names if n not in found]
    if missing:
        raise ParseError(f"the NIC's firmware reports no {', '.join(missing)} (not a setting of this NIC or release)")
    return found


def _vendor(sysfs: str, pci: str) -> int | None:
    try:
        with open(os.path.join(sysfs, pci, "vendor"), encoding="ascii") as f:
            return int(f.read(16).strip(), 16)
    except (OSError, ValueError):
        return None


def _settings(device: Any) -> tuple[str, dict[str, int]]:
    """A device entry, checked: its PCI function and its settings."""
    if not isinstance(device, dict) or not isinstance(device.get("pci"), str) or not PCI.match(device["pci"]):
        raise ValueError(f"device {str(device)[:80]!r}: pci must be a PCI function such as 0000:18:00.0")
    pairs = device.get("settings")
    settings: dict[str, int] = {}
    for pair in pairs if isinstance(pairs, list) else [None]:
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[0], str)):
            raise ValueError(f"{device['pci']}: settings must be [NAME, VALUE] pairs")
        name, value = pair
        if not NAME.match(name) or isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 32:
            raise ValueError(f"{device['pci']}: {str(name)[:64]}={str(value)[:16]} is not a NAME=integer setting")
        settings[name] = value
    return device["pci"], settings


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "devices": {"type": "list", "elements": "dict", "required": True},
            "tool": {"type": "str", "default": "mstconfig"},
            "sysfs": {"type": "path", "default": "/sys/bus/pci/devices"},
        },
        supports_check_mode=True,
    )
    try:
        wanted = dict(_settings(d) for d in module.params["devices"])
    except ValueError as e:
        module.fail_json(msg=str(e))
    report: dict[str, Any] = {}
    missing: list[str] = []
    reboot: list[str] = []
    changed = False
    tool = None
    for pci, settings in wanted.items():
        vendor = _vendor(module.params["sysfs"], pci)
        if vendor is None:
            missing.append(f"{pci}: no PCI device here (settings {', '.join(settings)} not set)")
            continue
        if vendor != MELLANOX:
            missing.append(f"{pci}: vendor 0x{vendor:04x}, not a Mellanox/NVIDIA NIC (settings not set)")
            continue
        tool = tool or module.get_bin_path(module.params["tool"], required=True)
        names = sorted(settings)
        rc, out, err = module.run_command([tool, "-e", "-d", pci, "query", *names])
        if rc != 0:
            module.fail_json(msg=f"{pci}: {module.params['tool']} query failed: {(err or out)[-400:]}")
        try:
            read = parse_query(out, names)
        except ParseError as e:
            module.fail_json(msg=f"{pci}: {e}")
        report[pci] = {n: read[n] | {"want": settings[n]} for n in names}
        to_set = [n for n in names if read[n]["next"] != settings[n]]
        if to_set:
            changed = True
            if not module.check_mode:
                rc, out, err = module.run_command(
                    [tool, "-y", "-d", pci, "set", *(f"{n}={settings[n]}" for n in to_set)]
                )
                if rc != 0:
                    module.fail_json(msg=f"{pci}: {module.params['tool']} set failed: {(err or out)[-400:]}")
        for n in names:
            current = read[n].get("current")
            if current != settings[n]:
                reboot.append(f"{pci} {n} {'?' if current is None else current} -> {settings[n]}")
    module.exit_json(changed=changed, devices=report, missing=missing, reboot=reboot)


if __name__ == "__main__":
    main()
