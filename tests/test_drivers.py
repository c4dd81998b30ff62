"""The drivers' registries (aisite/drivers): every switch OS a module with its DRIVER, read by the model, the plan,
the checks and the inventory, and agreeing with the role that configures it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from aisite.drivers.registry import discover
from aisite.drivers.switch_os import SwitchOs
from aisite.drivers.switches import ACCESS, CONFIGURED, SWITCH_OS
from aisite.model import AccessSwitchGroup, SwitchGroup
from aisite.plan.fabric import port_name
from aisite.playbooks import PLAYBOOKS, ROLES, role_name


def test_the_registry_finds_each_switch_os_module() -> None:
    assert set(SWITCH_OS) == {"cumulus", "frr", "onyx", "sonic", "generic"}
    assert CONFIGURED == ("cumulus", "frr", "onyx", "sonic") and ACCESS == ("cumulus",)
    assert not SWITCH_OS["generic"].configured


def test_a_new_switch_os_is_one_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module holding a DRIVER is found by its package alone; two modules naming one OS, or a module without a
    driver, are refused when the registry is built (at import: never a site half-checked)."""
    pkg = tmp_path / "more_switches"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "eos.py").write_text(
        "from aisite.drivers.switch_os import SwitchOs, linux_port\n"
        "DRIVER = SwitchOs(name='eos', role='fabric_eos', port=lambda p, s, n, l: f'Ethernet{p}')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    found = discover([str(pkg)], "more_switches", SwitchOs)
    assert list(found) == ["eos"] and found["eos"].port(3, 400, 1, 0) == "Ethernet3"
    (pkg / "eos2.py").write_text("from more_switches.eos import DRIVER\n")
    with pytest.raises(ValueError, match="SwitchOs 'eos' registered twice"):
        discover([str(pkg)], "more_switches", SwitchOs)
    del sys.modules["more_switches.eos2"]
    (pkg / "eos2.py").write_text("DRIVER = 'not a driver'\n")
    with pytest.raises(TypeError, match=r"more_switches\.eos2"):
        discover([str(pkg)], "more_switches", SwitchOs)
    for name in [m for m in sys.modules if m.startswith("more_switches")]:
        del sys.modules[name]


def test_the_model_takes_its_switch_oses_from_the_registry() -> None:
    fabric = SwitchGroup.model_json_schema()["properties"]["os"]
    access = AccessSwitchGroup.model_json_schema()["properties"]["os"]
    assert fabric["enum"] == list(CONFIGURED)
    assert access["enum"] == [*CONFIGURED, "generic"]
    base = {"count": 2, "name_pattern": "leaf{n:02d}", "asn_base": 65100, "ports": 64, "speed_gbps": 400}
    with pytest.raises(ValueError, match="'eos' is not a switch OS aisite configures here; known: cumulus, frr"):
        SwitchGroup.model_validate(base | {"os": "eos"})
    with pytest.raises(ValueError, match="'generic' is not a switch OS"):
        SwitchGroup.model_validate(base | {"os": "generic"})


@pytest.mark.parametrize("name", CONFIGURED)
def test_each_configured_os_has_its_role_and_its_play(name: str) -> None:
    """The role a driver names exists, fabric.yml runs it on the OS's group, and the BGP maximum-paths the role
    renders by default is the driver's (the ECMP check reads the driver)."""
    driver = SWITCH_OS[name]
    assert (ROLES / driver.role / "tasks" / "main.yml").is_file(), driver.role
    plays = yaml.safe_load((PLAYBOOKS / "fabric.yml").read_text())
    roles = [
        role_name(r["role"] if isinstance(r, dict) else r)
        for play in plays
        if play.get("hosts") == f"fabric_os_{name}"
        for r in play.get("roles", [])
    ]
    assert driver.role in roles, (name, roles)
    defaults = yaml.safe_load((ROLES / driver.role / "defaults" / "main.yml").read_text()) or {}
    key = f"{driver.role}_max_paths"
    if key in defaults:
        assert defaults[key] == driver.max_paths, f"{key} differs from the {name} driver's max_paths"
    else:
        assert driver.max_paths == 64, f"{name}: its role renders no maximum-paths; its platform's is 64"


@pytest.mark.parametrize(
    ("os", "port", "speed", "front", "name"),
    [
        ("cumulus", 3, 400, (1, 0), "swp3"),
        ("frr", 4, 400, (2, 8), "swp2s1"),
        ("sonic", 2, 400, (1, 0), "Ethernet8"),
        ("sonic", 2, 100, (1, 0), "Ethernet4"),
        ("sonic", 4, 400, (2, 8), "Ethernet12"),
        ("onyx", 3, 400, (1, 0), "Eth1/3"),
        ("onyx", 4, 200, (2, 4), "Eth1/2/2"),
        ("generic", 7, 10, (1, 0), "port7"),
    ],
)
def test_ports_are_named_by_the_os_driver(os: str, port: int, speed: int, front: tuple[int, int], name: str) -> None:
    assert port_name(os, port, speed, front) == name


def test_the_bmc_registry_and_what_reads_it() -> None:
    """Each BMC protocol is a module with its DRIVER: the model's choices, the default port the plan gives a BMC,
    the order discovery asks an undeclared address in (Redfish first), and its tasks in the bmc role."""
    from aisite.drivers.bmcs import BMC_PROTOCOLS
    from aisite.model import BmcSpec, OobDefaults

    assert set(BMC_PROTOCOLS) == {"redfish", "ipmi"}
    assert BmcSpec.model_json_schema()["properties"]["protocol"]["anyOf"][0]["enum"] == ["redfish", "ipmi"]
    assert OobDefaults.model_json_schema()["properties"]["protocol"]["enum"] == ["redfish", "ipmi"]
    with pytest.raises(ValueError, match="'snmp' is not a BMC protocol aisite drives; known: redfish, ipmi"):
        OobDefaults.model_validate({"protocol": "snmp"})
    assert (BMC_PROTOCOLS["redfish"].port, BMC_PROTOCOLS["ipmi"].port) == (443, 623)
    for name in BMC_PROTOCOLS:
        assert (ROLES / "bmc" / "tasks" / f"{name}.yml").is_file(), name


def test_discovery_asks_each_protocol_its_driver_names(monkeypatch: pytest.MonkeyPatch) -> None:
    from aisite import oob

    asked: list[tuple[str, int]] = []

    def answers(protocol: str, address: str, port: int, timeout: float = 1.0) -> bool:
        asked.append((protocol, port))
        return False

    monkeypatch.setattr(oob, "answers", answers)
    found = oob.discover("192.0.2.0/30", {}, lambda a, p: None, timeout=0.01, workers=1)
    assert asked == [("redfish", 443), ("ipmi", 623)] and not found.undeclared
