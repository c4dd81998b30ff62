"""Every SONiC config_db.json the project renders, validated as SONiC validates configuration: SONiC's own YANG
models through `sonic_yang` on libyang 3.12.2 with SONiC's patches (../shared/sonic-yang, built once into .venv by
scripts/sonic-yang.sh, which `make setup` runs). `config load` itself checks nothing, so this is the only check a
file gets before a switch applies it.

Each rendering is merged, field by field as `sonic-cfggen --write-to-db` does, into a base config_db of the
switch's HWSKU: its real PORT rows (names, lanes, aliases from port_config.ini) and DEVICE_METADATA. The stacks:
the lab (16 x 100G, on an SN2700's ports), dc1 (leaf-to-leaf links, SN2700) and h100pod (SN5600) at 400G and at
800G, each with every leaf and spine on SONiC."""

from __future__ import annotations

import copy
import functools
import json
import sys
from pathlib import Path
from typing import Any

import jinja2
import pytest

from aisite.loader import load_site, resolve_stack
from aisite.plan import FABRIC_ROLES, build_plan
from tests.conftest import run_cli
from tests.test_platform import SHARED

SONIC = SHARED / "sonic-yang"
HWSKU = {
    "SN2700": "x86_64-mlnx_msn2700-r0/ACS-MSN2700",
    "SN5600": "x86_64-nvidia_sn5600-r0/ACS-SN5600",
}
# stack -> (replacements that put its fabric on SONiC, the HWSKU of its switches)
CASES: dict[str, tuple[str, list[tuple[str, str]], str]] = {
    "lab": ("lab", [("os: frr", "os: sonic")], "SN2700"),
    # Three tiers: the super-spines are SpineRouters (T2) in DEVICE_METADATA.
    "lab3": ("lab3", [("os: frr", "os: sonic")], "SN2700"),
    "dc1": ("dc1", [("os: onyx", "os: sonic")], "SN2700"),
    "h100pod-400g": ("h100pod", [("os: cumulus, model: SN5600", "os: sonic, model: SN5600")], "SN5600"),
    # 128 x 400G: every 800G cage split 2x400G (BREAKOUT_CFG), ports named by first lane (Ethernet0, Ethernet4).
    "h100pod-2x400g": (
        "h100pod",
        [
            (
                "os: cumulus, model: SN5600, ports: 64, speed_gbps: 400",
                "os: sonic, model: SN5600, ports: 128, speed_gbps: 400",
            )
        ],
        "SN5600",
    ),
    "h100pod-800g": (
        "h100pod",
        [
            (
                "os: cumulus, model: SN5600, ports: 64, speed_gbps: 400",
                "os: sonic, model: SN5600, ports: 64, speed_gbps: 800",
            )
        ],
        "SN5600",
    ),
}

if not (SONIC / "src" / "sonic-yang-mgmt" / "sonic_yang.py").is_file():
    pytest.skip(f"{SONIC} is absent: SONiC's models and validator are not on this machine", allow_module_level=True)
pytest.importorskip("libyang", reason="libyang-python is not built: run make setup (scripts/sonic-yang.sh)")
sys.path.insert(0, str(SONIC / "src" / "sonic-yang-mgmt"))
import sonic_yang  # noqa: E402


@pytest.fixture(scope="module")
def validator(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """SONiC's models as its build installs them: the .yang files and the templates rendered for Python."""
    yang = tmp_path_factory.mktemp("yang")
    for f in (SONIC / "src" / "sonic-yang-models" / "yang-models").glob("*.yang"):
        (yang / f.name).write_text(f.read_text())
    templates = SONIC / "src" / "sonic-yang-models" / "yang-templates"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(templates), autoescape=False)
    for f in templates.glob("*.yang.j2"):
        (yang / f.name.removesuffix(".j2")).write_text(env.get_template(f.name).render(yang_model_type="py"))
    sy = sonic_yang.SonicYang(str(yang), print_log_enabled=False)
    sy.loadYangModel()
    return sy


@functools.cache
def hwsku_ports(model: str) -> dict[str, dict[str, str]]:
    """The HWSKU's PORT rows: name -> lanes, alias, index, its full speed (100G on 4 lanes, 800G on 8)."""
    out = {}
    for line in (SONIC / "hwsku" / HWSKU[model] / "port_config.ini").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, lanes, alias, index = line.split()[:4]
        speed = "800000" if len(lanes.split(",")) == 8 else "100000"
        out[name] = {"lanes": lanes, "alias": alias, "index": index, "speed": speed, "admin_status": "down"}
    return out


def base(model: str, hostname: str) -> dict[str, Any]:
    return {
        "PORT": copy.deepcopy(hwsku_ports(model)),
        "DEVICE_METADATA": {
            "localhost": {
                "hwsku": HWSKU[model].split("/")[1],
                "platform": HWSKU[model].split("/")[0],
                "mac": "1c:34:da:00:00:01",
                "hostname": hostname,
            }
        },
    }


def merged(db: dict[str, Any], fragment: dict[str, Any]) -> dict[str, Any]:
    """`config load` of the fragment: each TABLE|key's fields written over the running ones."""
    out = copy.deepcopy(db)
    for table, rows in fragment.items():
        for key, fields in rows.items():
            out.setdefault(table, {}).setdefault(key, {}).update(fields)
    return out


@functools.cache
def rendered(case: str, tmp: Path) -> dict[str, dict[str, Any]]:
    """switch name -> its config_db fragment, rendered by `aisite render --switch-configs`."""
    stack, replacements, _ = CASES[case]
    text = resolve_stack(stack).read_text()
    for old, new in replacements:
        assert old in text, f"{stack}: {old!r} not found"
        text = text.replace(old, new)
    text = text.replace(f"name: {stack}\n", f"name: sonic{case.replace('-', '')}\n", 1)
    text = text.replace("    fabric:\n", "    fabric:\n      bfd: false\n", 1)  # SONiC cannot (checks refuse it)
    path = tmp / f"Pulumi.{case}.yaml"
    path.write_text(text)
    r = run_cli("render", str(path), "--out", str(tmp / "out"), "--switch-configs")
    assert r.returncode == 0, r.stdout + r.stderr
    plan = build_plan(load_site(path))
    fabric = [s.name for s in plan.switches if s.role in FABRIC_ROLES]
    assert fabric and all(s.os == "sonic" for s in plan.switches if s.name in fabric)
    return {name: json.loads((tmp / "out" / "switches" / f"{name}.config_db.json").read_text()) for name in fabric}


def problems(sy: Any, db: dict[str, Any]) -> str | None:
    """sonic_yang's verdict: None when the config_db loads and validates, else its message."""
    try:
        sy.loadData(copy.deepcopy(db))
        sy.validate_data_tree()
    except sonic_yang.SonicYangException as exc:
        return str(exc)
    return None


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sonic")


@pytest.mark.parametrize("case", CASES)
def test_every_rendered_config_db_validates_with_sonics_yang(case: str, validator: Any, tmp: Path) -> None:
    model = CASES[case][2]
    failures = {}
    for name, fragment in rendered(case, tmp).items():
        # Port names come from the HWSKU: a name the switch does not have would be a new, lane-less PORT row. A
        # split cage's ports are new rows, each with its share of the parent's lanes, the parent in BREAKOUT_CFG.
        hw = hwsku_ports(model)
        parent_of = {lane: p for p, row in hw.items() for lane in row["lanes"].split(",")}
        for port in set(fragment["PORT"]) - set(hw):
            lanes = fragment["PORT"][port]["lanes"].split(",")
            assert {parent_of[lane] for lane in lanes} <= set(fragment.get("BREAKOUT_CFG", {})), port
        # Each split cage in the mode its platform defines (platform.json's breakout_modes), by that exact name.
        platform = json.loads((SONIC / "hwsku" / HWSKU[model].split("/")[0] / "platform.json").read_text())
        for parent, row in fragment.get("BREAKOUT_CFG", {}).items():
            assert row["brkout_mode"] in platform["interfaces"][parent]["breakout_modes"], (name, parent, row)
        if why := problems(validator, merged(base(model, name), fragment)):
            failures[name] = why
        # A table with no model would be dropped unchecked, not refused.
        assert not validator.tablesWithOutYang, f"{name}: no YANG model for {sorted(validator.tablesWithOutYang)}"
    assert failures == {}


def test_the_drivers_breakout_modes_are_the_platforms_and_each_hwsku_boots_in_its_own() -> None:
    """aisite's SONiC platform table (aisite.drivers.switches.sonic) against sonic-buildimage's files: every data
    cage of the platform offers each mode by that name, and the HWSKU named for a split boots every data cage in
    that split's mode (hwsku.json's default_brkout_mode)."""
    from aisite.drivers.switch_os import mode_speeds
    from aisite.drivers.switches.sonic import PLATFORMS

    for model, plat in PLATFORMS.items():
        doc = json.loads((SONIC / "hwsku" / plat.name / "platform.json").read_text())
        widest = max(len(p["lanes"].split(",")) for p in doc["interfaces"].values())
        cages = {n: p for n, p in doc["interfaces"].items() if len(p["lanes"].split(",")) == widest}
        for split, mode in plat.modes.items():
            assert mode_speeds(mode)[0] == split, (model, mode)
            assert all(mode in p["breakout_modes"] for p in cages.values()), (model, mode)
        for split, hwsku in plat.hwskus.items():
            defaults = json.loads((SONIC / "hwsku" / plat.name / hwsku / "hwsku.json").read_text())["interfaces"]
            booted = {defaults[n]["default_brkout_mode"] for n in cages if n in defaults}
            assert booted == {plat.modes[split]}, (model, hwsku, booted)


@pytest.mark.parametrize(
    ("what", "plant"),
    [
        ("an MTU above SONiC's 9216", lambda f: f["PORT"][next(iter(f["PORT"]))].update(mtu="9217")),
        ("a queue naming a WRED profile that does not exist", lambda f: f["WRED_PROFILE"].clear()),
        ("a port the HWSKU does not have", lambda f: f["PORT"].update(Ethernet1020={"mtu": "9216"})),
        ("a neighbour whose ASN is not a number", lambda f: next(iter(f["BGP_NEIGHBOR"].values())).update(asn="x")),
        ("a VLAN member of a VLAN that does not exist", lambda f: f["VLAN"].clear()),
    ],
)
def test_planted_errors_are_caught(what: str, plant: Any, validator: Any, tmp: Path) -> None:
    name, fragment = next((n, f) for n, f in rendered("lab", tmp).items() if "VLAN" in f)  # a leaf
    bad = copy.deepcopy(fragment)
    plant(bad)
    assert problems(validator, merged(base("SN2700", name), bad)), f"{what} passed SONiC's YANG"
