"""The four switch renderings (FRR, Cumulus NVUE, SONiC config_db, Onyx CLI), made by `aisite render
--switch-configs` with the switch roles' own templates, parsed back and held against the plan: the lossless
profile (priority, DSCP, ECN thresholds, ETS, MTU, PFC watchdog) agrees across the operating systems and with the
host side, and every planned BGP session, loopback and rail gateway is there.

What these cannot show: that a real Cumulus, SONiC or Onyx switch accepts the files (none runs here). FRR's port
MTU lives in systemd-networkd files; the lab test checks it on the running FRR switches."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from aisite.loader import load_site, resolve_stack
from aisite.plan import FABRIC_ROLES, Plan, RoceQos, Switch, build_plan
from aisite.playbooks import COLLECTION
from tests.conftest import run_cli

OSES = ("frr", "cumulus", "sonic", "onyx")


def stack_on(
    stack: str, os_name: str, path: Path, *, os_version: str = "5.15", fabric: dict[str, Any] | None = None
) -> Path:
    """A shipped stack with every fabric switch group on one OS (Cumulus at `os_version`; the management and
    out-of-band switches as the stack has them), named after the file (Pulumi.<name>.yaml), with `fabric` keys
    added, written to `path`. SONiC gets BFD off: bgpcfgd cannot enable it and the site checks refuse it."""
    text = resolve_stack(stack).read_text()
    os_text = f'cumulus, os_version: "{os_version}"' if os_name == "cumulus" else os_name
    fabric_line = r"^(\s+(?:leaves|spines|super_spines): \{.*?)"
    text = re.sub(fabric_line + r', os_version: "5.15"', r"\1", text, flags=re.M)
    text = re.sub(fabric_line + r"os: (frr|cumulus|sonic|onyx)\b", rf"\1os: {os_text}", text, flags=re.M)
    text = text.replace(f"name: {stack}\n", f"name: {path.stem.removeprefix('Pulumi.')}\n", 1)
    for key, value in (({"bfd": False} if os_name == "sonic" else {}) | (fabric or {})).items():
        text = text.replace("    fabric:\n", f"    fabric:\n      {key}: {json.dumps(value)}\n", 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


_RENDERED: dict[str, tuple[Plan, Path]] = {}


def render_switches(path: Path, out: Path) -> tuple[Plan, Path]:
    """`aisite render --switch-configs` of a stack file (connecting to nothing): its plan and switches/ folder. A
    stack file of the same name and text as one rendered before in this process is not rendered again: its
    rendering is the same (several tests here render the same stack on the same OS, each for its own checks)."""
    key = f"{path.name}\n{path.read_text()}"
    if key not in _RENDERED:
        r = run_cli("render", str(path), "--out", str(out), "--switch-configs")
        assert r.returncode == 0, r.stdout + r.stderr
        _RENDERED[key] = (build_plan(load_site(path)), out / "switches")
    return _RENDERED[key]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Plan, Path]]:
    """The lab on each switch OS."""
    out: dict[str, tuple[Plan, Path]] = {}
    for os_name in OSES:
        tmp = tmp_path_factory.mktemp(os_name)
        out[os_name] = render_switches(stack_on("lab", os_name, tmp / "Pulumi.sw.yaml"), tmp / "out")
    return out


def fabric(plan: Plan) -> list[Switch]:
    return [s for s in plan.switches if s.role in FABRIC_ROLES]


def host_side(roce: RoceQos) -> dict[str, int]:
    """What the hosts are told (inventory roce_qos, read by the host roles): ToS, PFC vector, MTU."""
    return {
        "dscp": roce.nccl_ib_tc >> 2,
        "pfc_priority": roce.pfc_enable.split(",").index("1"),
        "mtu": roce.host_mtu,
    }


# ------------------------------------------------------------------------------ parsers, one per OS
def qos_cumulus(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())[0]["set"]
    qos = doc["qos"]
    dscp = {int(k): v["switch-priority"] for k, v in qos["mapping"]["default-global"]["dscp"].items()}
    ecn = qos["congestion-control"]["default-global"]["traffic-class"]
    (tc,) = ecn
    sched = qos["egress-scheduler"]["default-global"]["traffic-class"]
    ports = {name: i["link"]["mtu"] for name, i in doc["interface"].items() if i.get("type") == "swp"}
    return {
        "trust": qos["mapping"]["default-global"]["trust"],
        "lossless": qos["roce"]["mode"],
        "pfc": [int(p) for p in qos["pfc"]["default-global"]["switch-priority"]],
        "dscp": dscp,
        "ecn": (int(tc), ecn[tc]["min-threshold"], ecn[tc]["max-threshold"]),
        "ets": {int(k): v.get("bw-percent", "strict") for k, v in sched.items()},
        "watchdog": "pfc-watchdog" in qos
        and all("pfc-watchdog" in i.get("qos", {}) for i in doc["interface"].values() if i.get("type") == "swp"),
        "mtu": ports,
    }


def qos_sonic(path: Path) -> dict[str, Any]:
    db = json.loads(path.read_text())
    (name,) = db["DSCP_TO_TC_MAP"]
    dscp = {int(k): int(v) for k, v in db["DSCP_TO_TC_MAP"][name].items() if v != "0"}
    port_qos = db["PORT_QOS_MAP"]
    pfc = {v["pfc_enable"] for v in port_qos.values()}
    assert len(pfc) == 1, pfc
    wred = db["WRED_PROFILE"][f"{name}_LOSSLESS"]
    lossless_queues = {k.split("|")[1] for k, v in db["QUEUE"].items() if "wred_profile" in v}
    (tc,) = lossless_queues
    sched = {int(k.split("|")[1]): db["SCHEDULER"][v["scheduler"]] for k, v in db["QUEUE"].items()}
    return {
        "trust": "l3" if all(v["dscp_to_tc_map"] == name for v in port_qos.values()) else "none",
        "lossless": "lossless" if wred["ecn"] == "ecn_all" else "lossy",
        "pfc": [int(p) for p in pfc.pop().split(",")],
        "dscp": dscp,
        "ecn": (int(tc), int(wred["green_min_threshold"]), int(wred["green_max_threshold"])),
        "ets": {tc: int(s["weight"]) if s["type"] == "DWRR" else "strict" for tc, s in sched.items()},
        "watchdog": set(db.get("PFC_WD", {})) - {"GLOBAL"} == set(db["PORT"]),
        "mtu": {p: int(v["mtu"]) for p, v in db["PORT"].items()},
    }


def qos_onyx(path: Path, roce: RoceQos) -> dict[str, Any]:
    lines = path.read_text().splitlines()
    ecn = {
        (int(m[2]), int(m[3]) * 1000, int(m[4]) * 1000)
        for line in lines
        if (
            m := re.fullmatch(
                r"interface ethernet (\S+) traffic-class (\d) congestion-control ecn "
                r"minimum-absolute (\d+) maximum-absolute (\d+)",
                line,
            )
        )
    }
    assert len(ecn) == 1, ecn
    ets: dict[int, Any] = {}
    for line in lines:
        if m := re.fullmatch(r"interface ethernet \S+ traffic-class (\d) dcb ets (wrr (\d+)|strict)", line):
            ets[int(m[1])] = int(m[3]) if m[3] else "strict"
    ports = {m[1] for line in lines if (m := re.fullmatch(r"interface ethernet (\S+) mtu (\d+) force", line))}
    trusted = {m[1] for line in lines if (m := re.fullmatch(r"interface ethernet (\S+) qos trust L3", line))}
    assert "roce lossless" in lines
    return {
        "trust": "l3" if trusted == ports else "none",
        "lossless": "lossless",
        "pfc": [
            int(m[1]) for line in lines if (m := re.fullmatch(r"dcb priority-flow-control priority (\d) enable", line))
        ],
        # `roce lossless` maps these (the site checks refuse any other profile on Onyx): the onyx driver's fixed_roce.
        "dscp": {26: 3, 48: 6},
        "ecn": ecn.pop(),
        "ets": ets,
        "watchdog": "dcb priority-flow-control watch-dog enable" in lines,
        "mtu": {
            f"Eth{m[1]}": int(m[2])
            for line in lines
            if (m := re.fullmatch(r"interface ethernet (\S+) mtu (\d+) force", line))
        },
    }


def expected_qos(plan: Plan, sw: Switch) -> dict[str, Any]:
    r = plan.roce
    ports = [nb.interface for nb in sw.neighbors] + [p for h in sw.host_subnets for p in h.ports]
    return {
        "trust": "l3",
        "lossless": "lossless",
        "pfc": [r.pfc_priority],
        "dscp": {r.roce_dscp: r.pfc_priority, r.cnp_dscp: r.cnp_priority},
        "ecn": (r.roce_tc, r.ecn_min_bytes, r.ecn_max_bytes),
        "ets": {0: r.ets_default_percent, r.roce_tc: r.ets_roce_percent, r.cnp_priority: "strict"},
        "watchdog": r.pfc_watchdog,
        "mtu": dict.fromkeys(ports, r.switch_mtu),
    }


def test_every_switch_gets_its_own_rendering(rendered: dict[str, tuple[Plan, Path]]) -> None:
    suffix = {"frr": "frr.conf", "cumulus": "nvue.yaml", "sonic": "config_db.json", "onyx": "onyx.cfg"}
    for os_name, (plan, out) in rendered.items():
        assert sorted(p.name for p in out.iterdir()) == sorted(f"{s.name}.{suffix[os_name]}" for s in fabric(plan))


def test_lossless_profile_agrees_across_the_renderings_and_with_the_hosts(
    rendered: dict[str, tuple[Plan, Path]],
) -> None:
    seen: dict[str, dict[str, Any]] = {}
    for os_name in ("cumulus", "sonic", "onyx"):
        plan, out = rendered[os_name]
        for sw in fabric(plan):
            if os_name == "cumulus":
                got = qos_cumulus(out / f"{sw.name}.nvue.yaml")
            elif os_name == "sonic":
                got = qos_sonic(out / f"{sw.name}.config_db.json")
            else:
                got = qos_onyx(out / f"{sw.name}.onyx.cfg", plan.roce)
            assert got == expected_qos(plan, sw), (os_name, sw.name)
            seen[f"{os_name}/{sw.name}"] = {k: v for k, v in got.items() if k != "mtu"}
            hosts = host_side(plan.roce)
            assert got["dscp"][hosts["dscp"]] == hosts["pfc_priority"] and got["pfc"] == [hosts["pfc_priority"]]
            # A host's full frame (MTU + Ethernet header and VLAN tag) fits every switch port.
            assert all(mtu >= hosts["mtu"] + 18 for mtu in got["mtu"].values())
    assert len({json.dumps(v, sort_keys=True) for v in seen.values()}) == 1, seen


def test_bgp_sessions_loopbacks_and_rail_gateways_are_rendered(rendered: dict[str, tuple[Plan, Path]]) -> None:
    for os_name, (plan, out) in rendered.items():
        for sw in fabric(plan):
            assert sw.asn is not None and sw.loopback is not None
            loopback = sw.loopback.split("/")[0]
            if os_name == "frr":
                text = (out / f"{sw.name}.frr.conf").read_text()
                assert f"router bgp {sw.asn}\n bgp router-id {loopback}" in text
                for nb in sw.neighbors:
                    assert f" neighbor {nb.interface} interface peer-group FABRIC" in text
            elif os_name == "cumulus":
                doc = yaml.safe_load((out / f"{sw.name}.nvue.yaml").read_text())[0]["set"]
                bgp = doc["vrf"]["default"]["router"]["bgp"]
                assert doc["router"]["bgp"]["autonomous-system"] == sw.asn
                assert bgp["neighbor"] == {
                    nb.interface: {"type": "unnumbered", "peer-group": "FABRIC", "description": nb.peer}
                    for nb in sw.neighbors
                }
                assert list(doc["interface"]["lo"]["ipv4"]["address"]) == [sw.loopback]  # 5.15's name
                # NVUE refused these: BFD is per peer group (no `router bfd enable`); the watchdog's polling
                # interval is an integer of milliseconds.
                assert "bfd" not in doc["router"]
                assert bgp["peer-group"]["FABRIC"]["bfd"] == {"state": "enabled"}
                if "pfc-watchdog" in doc["qos"]:
                    assert isinstance(doc["qos"]["pfc-watchdog"]["polling-interval"], int)
                for h in sw.host_subnets:
                    svi = doc["interface"][f"vlan{100 + h.rail}"]
                    assert list(svi["ipv4"]["address"]) == [f"{h.gateway}/{h.subnet.split('/')[1]}"]
                    assert all(
                        doc["interface"][p]["bridge"]["domain"]["br_default"]["access"] == 100 + h.rail for p in h.ports
                    )
            elif os_name == "sonic":
                db = json.loads((out / f"{sw.name}.config_db.json").read_text())
                assert db["DEVICE_METADATA"]["localhost"]["bgp_asn"] == str(sw.asn)
                assert db["BGP_NEIGHBOR"] == {
                    nb.peer_address.split("/")[0]: {
                        "asn": str(nb.peer_asn),
                        "name": nb.peer,
                        "local_addr": nb.local_address.split("/")[0],
                        "admin_status": "up",
                        "keepalive": "3",
                        "holdtime": "9",
                    }
                    for nb in sw.neighbors
                }
                assert {f"{nb.interface}|{nb.local_address}" for nb in sw.neighbors} <= set(db["INTERFACE"])
                assert f"Loopback0|{sw.loopback}" in db["LOOPBACK_INTERFACE"]
                for h in sw.host_subnets:
                    assert f"Vlan{100 + h.rail}|{h.gateway}/{h.subnet.split('/')[1]}" in db["VLAN_INTERFACE"]
                    assert {f"Vlan{100 + h.rail}|{p}" for p in h.ports} <= set(db["VLAN_MEMBER"])
            else:
                lines = (out / f"{sw.name}.onyx.cfg").read_text().splitlines()
                bgp = f"router bgp {sw.asn} vrf default"
                assert f"{bgp} router-id {loopback} force" in lines
                assert f"{bgp} network {loopback} /32" in lines
                for nb in sw.neighbors:
                    assert f"{bgp} neighbor {nb.peer_address.split('/')[0]} remote-as {nb.peer_asn}" in lines
                    port = nb.interface.removeprefix("Eth")
                    assert f"interface ethernet {port} ip address {nb.local_address} primary" in lines
                for h in sw.host_subnets:
                    assert f"{bgp} network {h.subnet.split('/')[0]} /{h.subnet.split('/')[1]}" in lines


def test_sessions_pair_up_across_the_fabric(rendered: dict[str, tuple[Plan, Path]]) -> None:
    """Numbered renderings: each side's neighbour address is the other side's own address on that link."""
    plan, out = rendered["sonic"]
    own = {}
    for sw in fabric(plan):
        db = json.loads((out / f"{sw.name}.config_db.json").read_text())
        own[sw.name] = {k.split("|")[1].split("/")[0] for k in db["INTERFACE"] if "|" in k}
    for sw in fabric(plan):
        db = json.loads((out / f"{sw.name}.config_db.json").read_text())
        for address, nb in db["BGP_NEIGHBOR"].items():
            assert address in own[nb["name"]], (sw.name, address)


def _sessions(os_name: str, path: Path) -> tuple[dict[str, str], bool]:
    """A switch's BGP sessions as its rendering states them (unnumbered: interface -> "";
    numbered: neighbour address -> remote ASN) and whether BFD runs on them."""
    text = path.read_text()
    if os_name == "frr":
        sessions = dict.fromkeys(re.findall(r"^ neighbor (\S+) interface peer-group FABRIC$", text, re.M), "")
        return sessions, " neighbor FABRIC bfd" in text.splitlines()
    if os_name == "cumulus":
        bgp = yaml.safe_load(text)[0]["set"]["vrf"]["default"]["router"]["bgp"]
        return dict.fromkeys(bgp["neighbor"], ""), "bfd" in bgp["peer-group"]["FABRIC"]
    if os_name == "sonic":
        db = json.loads(text)
        return {a: n["asn"] for a, n in db["BGP_NEIGHBOR"].items()}, False
    sessions = dict(re.findall(r"^router bgp \d+ vrf default neighbor (\S+) remote-as (\d+)$", text, re.M))
    bfd = set(re.findall(r"^router bgp \d+ vrf default neighbor (\S+) bfd$", text, re.M))
    assert bfd in (set(), set(sessions)), "BFD on some sessions only"
    return sessions, bool(bfd)


@pytest.mark.parametrize("stack", ["lab", "dc1", "h100pod", "lab3"])
def test_sessions_pair_up_and_bfd_agrees_on_every_os(stack: str, tmp_path: Path) -> None:
    """Each shipped stack (multiple uplinks in h100pod, leaf-to-leaf links in dc1, three tiers in lab3) on each
    switch OS: every fabric cable carries one session, seen from both ends (unnumbered: on the cabled port;
    numbered: the neighbour address is the peer's own on that link, with the peer's ASN), and BFD runs on every
    session exactly where the plan says (fabric.bfd, off here for FRR; SONiC cannot, so its stacks turn it off)."""
    for os_name in OSES:
        # BFD off for FRR too: the plan's value must reach the role.
        bfd_off = {"bfd": False} if os_name == "frr" else None
        path = stack_on(stack, os_name, tmp_path / os_name / "Pulumi.sw.yaml", fabric=bfd_off)
        plan, out = render_switches(path, tmp_path / os_name / "out")
        suffix = {"frr": "frr.conf", "cumulus": "nvue.yaml", "sonic": "config_db.json", "onyx": "onyx.cfg"}[os_name]
        switches = {sw.name: sw for sw in fabric(plan)}
        seen = {n: _sessions(os_name, out / f"{n}.{suffix}") for n in switches}
        links = [c for c in plan.cables if c.kind == "fabric"]
        assert links and sum(len(s) for s, _ in seen.values()) == 2 * len(links), os_name
        for sw in switches.values():
            sessions, bfd = seen[sw.name]
            assert bfd == sw.bfd == (os_name not in ("sonic", "frr")), (os_name, sw.name)
            for nb in sw.neighbors:
                peer = switches[nb.peer]
                if os_name in ("frr", "cumulus"):
                    assert nb.interface in sessions and nb.peer_interface in seen[nb.peer][0], (os_name, sw.name)
                    continue
                address = nb.peer_address.split("/")[0]
                assert sessions[address] == str(peer.asn), (os_name, sw.name, address)
                theirs = next(n for n in peer.neighbors if n.peer == sw.name and n.interface == nb.peer_interface)
                assert theirs.local_address.split("/")[0] == address
                assert theirs.peer_address.split("/")[0] in seen[nb.peer][0]


# ------------------------------------------------------------------------------ the roles' own helpers
def load_plugin(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(Path(path).stem, COLLECTION / path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_config_db_drift_names_what_differs_and_ignores_what_aisite_does_not_own() -> None:
    drift = load_plugin("plugins/filter/config_db.py").config_db_drift
    want = {
        "PORT": {"Ethernet0": {"mtu": "9216"}, "Ethernet4": {"mtu": "9216"}},
        "LOOPBACK_INTERFACE": {"Loopback0": {}},
    }
    have = {
        "PORT": {"Ethernet0": {"mtu": "9216", "lanes": "0,1,2,3"}, "Ethernet4": {"mtu": "1500"}},
        "LOOPBACK_INTERFACE": {"Loopback0": {"NULL": "NULL"}},
    }
    assert drift(want, have) == ["PORT|Ethernet4"]
    assert drift(want, {}) == ["LOOPBACK_INTERFACE|Loopback0", "PORT|Ethernet0", "PORT|Ethernet4"]
    have["PORT"]["Ethernet4"]["mtu"] = "9216"
    assert drift(want, have) == []


def test_lossless_needs_buffers_on_the_switch(rendered: dict[str, tuple[Plan, Path]]) -> None:
    """Priority 3 is lossless only with buffer headroom: a factory config_db (no buffers) is refused for every
    lossless port, and either buffer model's configuration satisfies the check."""
    gaps = load_plugin("plugins/filter/config_db.py").lossless_buffer_gaps
    plan, out = rendered["sonic"]
    for sw in fabric(plan):
        want = json.loads((out / f"{sw.name}.config_db.json").read_text())
        ports = sorted(want["PORT_QOS_MAP"])
        assert ports and gaps(want, {"PORT": {p: {} for p in ports}}) == [f"{p} (priority 3)" for p in ports]
        traditional = {
            "CABLE_LENGTH": {"AZURE": dict.fromkeys(ports, "5m")},
            "BUFFER_POOL": {"ingress_lossless_pool": {"type": "ingress", "mode": "dynamic"}},
        }
        assert gaps(want, traditional) == []
        dynamic = {
            "DEVICE_METADATA": {"localhost": {"buffer_model": "dynamic"}},
            "BUFFER_PG": {f"{p}|3-4": {"profile": "NULL"} for p in ports},
        }
        assert gaps(want, dynamic) == []
        # The dynamic model ignores cable lengths: without its PG rows the ports are not lossless.
        assert gaps(want, traditional | {"DEVICE_METADATA": dynamic["DEVICE_METADATA"]}) != []
        del dynamic["BUFFER_PG"][f"{ports[0]}|3-4"]
        assert gaps(want, dynamic) == [f"{ports[0]} (priority 3)"]


KNOBS = {
    "ecn_probability_percent": 20,
    "pfc_watchdog_poll_ms": 50,
    "pfc_watchdog_detection_ms": 250,
    "pfc_watchdog_restoration_ms": 400,
}


def knobs_cumulus(path: Path) -> dict[str, int]:
    qos = yaml.safe_load(path.read_text())[0]["set"]["qos"]
    (tc,) = qos["congestion-control"]["default-global"]["traffic-class"].values()
    wd = qos["pfc-watchdog"]
    return {
        "ecn_probability_percent": tc["probability"],
        "pfc_watchdog_poll_ms": wd["polling-interval"],
        "pfc_watchdog_detection_ms": wd["polling-interval"] * wd["robustness"],
    }


def knobs_sonic(path: Path) -> dict[str, int]:
    db = json.loads(path.read_text())
    (wred,) = db["WRED_PROFILE"].values()
    probability = {wred[f"{c}_drop_probability"] for c in ("green", "yellow", "red")}
    ports = {k: v for k, v in db["PFC_WD"].items() if k != "GLOBAL"}
    detection = {v["detection_time"] for v in ports.values()}
    restoration = {v["restoration_time"] for v in ports.values()}
    assert len(probability) == len(detection) == len(restoration) == 1, (probability, detection, restoration)
    return {
        "ecn_probability_percent": int(probability.pop()),
        "pfc_watchdog_poll_ms": int(db["PFC_WD"]["GLOBAL"]["POLL_INTERVAL"]),
        "pfc_watchdog_detection_ms": int(detection.pop()),
        "pfc_watchdog_restoration_ms": int(restoration.pop()),
    }


@pytest.mark.parametrize("stack", ["lab", "dc1", "h100pod"])
def test_ecn_probability_and_watchdog_timings_are_the_plans_on_every_os(stack: str, tmp_path: Path) -> None:
    """Set away from their defaults in the site, the marking probability and the watchdog's timings reach the
    Cumulus and SONiC renderings as the same values (Cumulus has no restoration time: it counts detection in polls).
    Onyx renders none of them: the checks refuse them there."""
    for os_name, parse in (("cumulus", knobs_cumulus), ("sonic", knobs_sonic)):
        path = stack_on(stack, os_name, tmp_path / os_name / "Pulumi.sw.yaml", fabric={"roce": KNOBS})
        plan, out = render_switches(path, tmp_path / os_name / "out")
        suffix = {"cumulus": "nvue.yaml", "sonic": "config_db.json"}[os_name]
        for sw in fabric(plan):
            got = parse(out / f"{sw.name}.{suffix}")
            assert got == {k: v for k, v in KNOBS.items() if k in got}, (os_name, sw.name)
    r = run_cli("validate", str(stack_on(stack, "onyx", tmp_path / "Pulumi.konyx.yaml", fabric={"roce": KNOBS})))
    assert r.returncode == 2 and all(f"site.fabric.roce.{k}: Onyx" in r.stderr + r.stdout for k in KNOBS)


# ------------------------------------------------------------------------------ NVUE, per release
NVUE_REFERENCE = "https://docs.nvidia.com/networking-ethernet-software/nvue-reference/Set-and-Unset-Commands/"
CHANGED = (
    "https://docs.nvidia.com/networking-ethernet-software/cumulus-linux-515/Whats-New/New-and-Changed-NVUE-Commands/"
)
BOTH, BEFORE_515, FROM_515 = "5.11-5.15", "5.11-5.14", "5.15"
# Every `nv set` path the Cumulus template can emit (ids and values in <>), with the section of NVIDIA's NVUE
# command reference that documents it, per release era: BOTH (5.11-5.14 and 5.15), BEFORE_515 (renamed in 5.15: the
# left column of 5.15's New and Changed NVUE Commands), FROM_515 (its right column).
NVUE_PATHS: dict[str, tuple[str, str]] = {
    "nv set bridge domain <id> vlan <id>": ("Bridge", BOTH),
    "nv set interface <id> bridge domain <id> access <integer>": ("Interface", BOTH),
    "nv set interface <id> description <text>": ("Interface", BOTH),
    "nv set interface <id> link mtu <integer>": ("Interface", BOTH),
    "nv set interface <id> link state up": ("Interface", BOTH),
    "nv set interface <id> qos pfc-watchdog": ("QoS", BOTH),
    "nv set interface <id> type loopback": ("Interface", BOTH),
    "nv set interface <id> type svi": ("Interface", BOTH),
    "nv set interface <id> type swp": ("Interface", BOTH),
    "nv set interface <id> vlan <integer>": ("Interface", BOTH),
    "nv set qos congestion-control <id> traffic-class <id> ecn enable": ("QoS", BOTH),
    "nv set qos congestion-control <id> traffic-class <id> max-threshold <integer>": ("QoS", BOTH),
    "nv set qos congestion-control <id> traffic-class <id> min-threshold <integer>": ("QoS", BOTH),
    "nv set qos congestion-control <id> traffic-class <id> probability <integer>": ("QoS", BOTH),
    "nv set qos congestion-control <id> traffic-class <id> red disable": ("QoS", BOTH),
    "nv set qos egress-scheduler <id> traffic-class <id> bw-percent <integer>": ("QoS", BOTH),
    "nv set qos egress-scheduler <id> traffic-class <id> mode dwrr": ("QoS", BOTH),
    "nv set qos egress-scheduler <id> traffic-class <id> mode strict": ("QoS", BOTH),
    "nv set qos mapping <id> dscp <id> switch-priority <integer>": ("QoS", BOTH),
    "nv set qos mapping <id> trust l3": ("QoS", BOTH),
    "nv set qos pfc <id> rx enable": ("QoS", BOTH),
    "nv set qos pfc <id> switch-priority <id>": ("QoS", BOTH),
    "nv set qos pfc <id> tx enable": ("QoS", BOTH),
    "nv set qos pfc-watchdog polling-interval <integer>": ("QoS", BOTH),
    "nv set qos pfc-watchdog robustness <integer>": ("QoS", BOTH),
    "nv set qos roce mode lossless": ("QoS", BOTH),
    "nv set router bgp autonomous-system <integer>": ("BGP", BOTH),
    "nv set router bgp router-id <ip>": ("BGP", BOTH),
    "nv set router policy prefix-list <id> rule <id> action permit": ("Router-Policy", BOTH),
    "nv set router policy prefix-list <id> rule <id> match <id> max-prefix-len <integer>": ("Router-Policy", BOTH),
    "nv set router policy prefix-list <id> type ipv4": ("Router-Policy", BOTH),
    "nv set router policy route-map <id> rule <id> action permit": ("Router-Policy", BOTH),
    "nv set router policy route-map <id> rule <id> match ip-prefix-list <name>": ("Router-Policy", BOTH),
    "nv set router policy route-map <id> rule <id> match type ipv4": ("Router-Policy", BOTH),
    "nv set system hostname <text>": ("System", BOTH),
    "nv set vrf <id> router bgp address-family ipv4-unicast multipaths ebgp <integer>": ("BGP", BOTH),
    "nv set vrf <id> router bgp address-family ipv4-unicast redistribute connected route-map <name>": ("BGP", BOTH),
    "nv set vrf <id> router bgp neighbor <id> description <text>": ("BGP", BOTH),
    "nv set vrf <id> router bgp neighbor <id> peer-group <name>": ("BGP", BOTH),
    "nv set vrf <id> router bgp neighbor <id> type unnumbered": ("BGP", BOTH),
    "nv set vrf <id> router bgp peer-group <id> address-family ipv4-unicast policy outbound route-map <name>": (
        "BGP",
        BOTH,
    ),
    "nv set vrf <id> router bgp peer-group <id> remote-as external": ("BGP", BOTH),
    "nv set vrf <id> router bgp router-id <ip>": ("BGP", BOTH),
    "nv set interface <id> ip address <id>": (CHANGED, BEFORE_515),
    "nv set qos roce enable on": (CHANGED, BEFORE_515),
    "nv set router bgp enable on": (CHANGED, BEFORE_515),
    "nv set vrf <id> router bgp address-family ipv4-unicast enable on": (CHANGED, BEFORE_515),
    "nv set vrf <id> router bgp address-family ipv4-unicast redistribute connected enable on": (CHANGED, BEFORE_515),
    "nv set vrf <id> router bgp enable on": (CHANGED, BEFORE_515),
    "nv set vrf <id> router bgp path-selection multipath aspath-ignore on": (CHANGED, BEFORE_515),
    "nv set vrf <id> router bgp peer-group <id> address-family ipv4-unicast enable on": (CHANGED, BEFORE_515),
    "nv set vrf <id> router bgp peer-group <id> bfd enable on": (CHANGED, BEFORE_515),
    "nv set interface <id> ipv4 address <id>": (CHANGED, FROM_515),
    "nv set qos roce state enabled": (CHANGED, FROM_515),
    "nv set router bgp state enabled": (CHANGED, FROM_515),
    "nv set vrf <id> router bgp address-family ipv4-unicast redistribute connected state enabled": (CHANGED, FROM_515),
    "nv set vrf <id> router bgp address-family ipv4-unicast state enabled": (CHANGED, FROM_515),
    "nv set vrf <id> router bgp path-selection multipath aspath-ignore enabled": (CHANGED, FROM_515),
    "nv set vrf <id> router bgp peer-group <id> address-family ipv4-unicast state enabled": (CHANGED, FROM_515),
    "nv set vrf <id> router bgp peer-group <id> bfd state enabled": (CHANGED, FROM_515),
    "nv set vrf <id> router bgp state enabled": (CHANGED, FROM_515),
}

# Paths only a management or out-of-band switch's configuration emits (access.nvue.yaml.j2): an uplink is a bridge
# port with no `access` VLAN, a trunk of every VLAN in the bridge (NVUE reference, Interface: `nv set interface
# <interface-id> bridge domain <domain-id>`). h100pod's access switches render them; the lab has none.
ACCESS_NVUE_PATHS: dict[str, tuple[str, str]] = {
    "nv set interface <id> bridge domain <id>": ("Interface", BOTH),
}


_ID_CONTAINERS = {"interface", "domain", "vrf", "peer-group", "neighbor", "prefix-list", "rule", "dscp"}
_ID_CONTAINERS |= {"switch-priority", "traffic-class", "address"}


def _holds_ids(path: list[str]) -> bool:
    """Whether the keys under this path are identifiers (names, numbers, prefixes) rather than NVUE's own words."""
    last = path[-1] if path else ""
    if last in _ID_CONTAINERS:
        return True
    if last == "route-map" and path[-2:-1] == ["policy"]:
        return True
    if (last == "vlan" and "bridge" in path) or (last == "match" and "prefix-list" in path):
        return True
    return last in ("mapping", "pfc", "congestion-control", "egress-scheduler") and path[-2:-1] == ["qos"]


def _shown(key: str, value: Any) -> str:
    if isinstance(value, bool):  # YAML 1.1 reads `on` as true
        return "on" if value else "off"
    if isinstance(value, int):
        return "<integer>"
    if key in ("description", "hostname"):
        return "<text>"
    if key in ("route-map", "ip-prefix-list", "peer-group"):
        return "<name>"
    return "<ip>" if re.fullmatch(r"[0-9.]+(/[0-9]+)?", str(value)) else str(value)


def nv_paths(doc: dict[str, Any]) -> set[str]:
    """An NVUE YAML document as the `nv set` commands it amounts to, identifiers and values as <placeholders>."""
    out: set[str] = set()

    def walk(node: Any, path: list[str], shown: list[str]) -> None:
        if isinstance(node, dict) and node:
            ids = _holds_ids(path)
            for k, v in node.items():
                walk(v, [*path, str(k)], [*shown, "<id>" if ids else str(k)])
        elif node == {}:
            out.add("nv set " + " ".join(shown))
        else:
            out.add("nv set " + " ".join(shown) + " " + _shown(path[-1], node))

    walk(doc, [], [])
    return out


@pytest.mark.parametrize("stack", ["lab", "h100pod", "lab3"])
def test_every_nvue_path_is_documented_for_the_release_it_is_rendered_for(stack: str, tmp_path: Path) -> None:
    """Rendered for Cumulus Linux 5.11, 5.14 and 5.15, every `nv set` path is in NVUE_PATHS for that release (the
    renamed ones on the side of 5.15's change list the release is on), and every row of the table is emitted."""
    emitted: set[str] = set()
    for release in ("5.11", "5.14", "5.15"):
        path = stack_on(stack, "cumulus", tmp_path / release / "Pulumi.sw.yaml", os_version=release)
        _, out = render_switches(path, tmp_path / release / "out")
        era = {BOTH, FROM_515} if release == "5.15" else {BOTH, BEFORE_515}
        for f in sorted(out.glob("*.nvue.yaml")):
            paths = nv_paths(yaml.safe_load(f.read_text())[0]["set"])
            table = NVUE_PATHS | ACCESS_NVUE_PATHS
            undocumented = sorted(p for p in paths if table.get(p, ("", ""))[1] not in era)
            assert undocumented == [], f"{release} {f.name}: paths not in NVUE_PATHS for {release}"
            emitted |= paths
    if stack == "lab":  # the lab renders every feature (rail SVIs, BFD, watchdog)
        assert set(NVUE_PATHS) == emitted, sorted(set(NVUE_PATHS) ^ emitted)
    if stack == "h100pod":  # and h100pod its management and out-of-band switches
        assert set(ACCESS_NVUE_PATHS) <= emitted
    assert {section for section, _ in NVUE_PATHS.values()} <= {
        "Interface",
        "Bridge",
        "QoS",
        "BGP",
        "Router-Policy",
        "System",
        CHANGED,
    }


# ------------------------------------------------------------------------------ Onyx, line by line
ONYX = "ansible-collections/mellanox.onyx plugins/modules/"
UNVERIFIED = "UNVERIFIED"
# Every line form the Onyx template emits (a regular expression over the rendered line) and where that form is
# documented: the command the mellanox.onyx collection's module generates for it, or UNVERIFIED with why. README
# lists the unverified ones. The interface forms are flat (`interface ethernet 1/1 <cmd>`), as `show
# running-config` prints them and as the collection's modules send them.
ONYX_FORMS: dict[str, str] = {
    r"## .*": "a comment line (the managed-by banner)",
    r"hostname \S+": UNVERIFIED + ": Onyx's `hostname` (no module generates it)",
    r"interface ethernet \d+/\d+ mtu \d+ force": ONYX + "onyx_interface.py (mtu <n> force)",
    r"interface ethernet \d+/\d+ no switchport force": ONYX + "onyx_l3_interface.py",
    r"interface ethernet \d+/\d+ description \S+": ONYX + "onyx_interface.py (description)",
    r"interface (ethernet \d+/\d+|vlan \d+|loopback 0) ip address [0-9./]+ primary": UNVERIFIED
    + ": onyx_l3_interface.py sends `ip address A/L`; `primary` is the running-config's form, not seen on a switch",
    r"vlan \d+": ONYX + "onyx_vlan.py",
    r"vlan \d+ name \S+": ONYX + "onyx_vlan.py",
    r"interface ethernet \d+/\d+ switchport access vlan \d+": ONYX + "onyx_l2_interface.py",
    r"interface vlan \d+": ONYX + "onyx_interface.py",
    r"interface vlan \d+ mtu \d+": ONYX + "onyx_interface.py (mtu)",
    r"interface loopback 0": ONYX + "onyx_interface.py",
    r"roce lossless": UNVERIFIED + ": Onyx's RoCE profile command, beside explicit QoS lines (no module)",
    r"dcb priority-flow-control enable force": ONYX + "onyx_protocol.py (dcb_pfc)",
    r"dcb priority-flow-control priority \d enable": UNVERIFIED + ": no module generates it",
    r"dcb priority-flow-control watch-dog enable": UNVERIFIED
    + ": the documented watchdog form found is per interface (pfc-wd); this global form was not found",
    r"interface ethernet \d+/\d+ qos trust L3": ONYX + "onyx_qos.py (TRUST_CMD)",
    r"interface ethernet \d+/\d+ dcb priority-flow-control mode on force": ONYX + "onyx_pfc_interface.py",
    r"interface ethernet \d+/\d+ traffic-class \d congestion-control ecn"
    r" minimum-absolute \d+ maximum-absolute \d+": ONYX + "onyx_traffic_class.py",
    r"interface ethernet \d+/\d+ traffic-class \d dcb ets (wrr \d+|strict)": ONYX + "onyx_traffic_class.py",
    r"protocol (bfd|bgp)": ONYX + "onyx_protocol.py",
    r"router bgp \d+ vrf default": ONYX + "onyx_bgp.py",
    r"router bgp \d+ vrf default router-id [0-9.]+ force": ONYX + "onyx_bgp.py",
    r"router bgp \d+ vrf default maximum-paths \d+": ONYX + "onyx_bgp.py",
    r"router bgp \d+ vrf default bestpath as-path multipath-relax force": ONYX + "onyx_bgp.py",
    r"router bgp \d+ vrf default network [0-9.]+ /\d+": ONYX + "onyx_bgp.py",
    r"router bgp \d+ vrf default neighbor [0-9.]+ remote-as \d+": ONYX + "onyx_bgp.py",
    r"router bgp \d+ vrf default neighbor [0-9.]+ description \S+": UNVERIFIED + ": onyx_bgp.py sends no description",
    r"router bgp \d+ vrf default neighbor [0-9.]+ bfd": UNVERIFIED
    + ": onyx_bfd.py covers `ip bfd` timers and static routes, not a BGP neighbour's BFD",
}


@pytest.mark.parametrize("stack", ["lab", "dc1", "lab3"])
def test_every_onyx_line_has_a_known_form(stack: str, tmp_path: Path) -> None:
    """Every rendered Onyx line matches exactly one form of ONYX_FORMS, and every form is rendered (dc1's direct
    leaf links included)."""
    _, out = render_switches(stack_on(stack, "onyx", tmp_path / "Pulumi.sw.yaml"), tmp_path / "out")
    used: set[str] = set()
    for f in sorted(out.glob("*.onyx.cfg")):
        for line in f.read_text().splitlines():
            forms = [form for form in ONYX_FORMS if re.fullmatch(form, line)]
            assert len(forms) == 1, f"{f.name}: {line!r} matches {forms}"
            used.update(forms)
    assert used == set(ONYX_FORMS), sorted(set(ONYX_FORMS) - used)


def test_onyx_cliconf_sends_only_the_lines_the_switch_lacks() -> None:
    pytest.importorskip("ansible_collections.ansible.netcommon", reason="ansible.netcommon ships with ansible")
    onyx = load_plugin("plugins/cliconf/onyx.py")
    candidate = "## managed\nhostname leaf01\n\ninterface ethernet 1/1 mtu 9216 force\nroce lossless\n"
    running = "##\n## Running-config\nhostname leaf01\n   interface ethernet 1/1 mtu 1500 force\n"
    assert onyx.missing_lines(candidate, running) == ["interface ethernet 1/1 mtu 9216 force", "roce lossless"]
    assert onyx.missing_lines(candidate, running + "roce lossless\ninterface ethernet 1/1 mtu 9216 force\n") == []


@pytest.mark.parametrize(
    ("edit", "path", "words"),
    [
        (
            (
                "os: frr, ports: 16, speed_gbps: 100}\n      spines",
                "os: sonic, ports: 16, speed_gbps: 100}\n      spines",
            ),
            "site.switches.spines.os",
            "frr spines cannot peer with sonic leaves",
        ),
        (
            ("asn_base: 4200000000", "asn_base: 4200000000\n      roce: {roce_dscp: 24}"),
            "site.fabric.roce.roce_dscp",
            "Onyx's `roce lossless` uses 26",
        ),
    ],
)
def test_switch_os_choices_the_roles_cannot_honour_are_refused(
    tmp_path: Path, edit: tuple[str, str], path: str, words: str
) -> None:
    text = resolve_stack("lab").read_text()
    if "roce_dscp" in edit[1]:
        text = text.replace("os: frr", "os: onyx")
    assert edit[0] in text
    stack = tmp_path / "Pulumi.bad.yaml"
    stack.write_text(text.replace(edit[0], edit[1]))
    r = run_cli("validate", str(stack))
    assert r.returncode != 0
    assert path in r.stderr and words in r.stderr, r.stderr
