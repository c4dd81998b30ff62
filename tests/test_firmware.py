"""Firmware baselines (issue 37): the site's model, what a BMC's answer becomes, the drift, and a rollout's steps
on a node out for its firmware. The Redfish side runs for real against the lab's emulators
(tests/lab/test_70_bmcs.py: test_a_bios_change_by_hand_shows_in_diff_and_a_rollout_puts_it_back)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aisite import firmware, oob
from aisite.diff import markdown, site_diff
from aisite.drivers.bmcs import redfish
from aisite.errors import SiteError
from aisite.loader import parse_site
from aisite.maintenance.rollout import rollout
from aisite.plan import FirmwareBaseline, Plan, build_plan
from aisite.playbooks import LAYERS
from aisite.render.inventory import inventory
from tests.conftest import run_cli

BASE = FirmwareBaseline((("BootMode", "Uefi"), ("ProcTurboMode", "Enabled"), ("SriovEnable", True)), "2.1", "x")


def _plan(data: dict[str, Any]) -> Plan:
    return build_plan(parse_site(data))


def _with_baseline(lab: dict[str, Any], **firmware: Any) -> dict[str, Any]:
    data = copy.deepcopy(lab)
    data["gpu_nodes"][0]["firmware"] = firmware
    return data


def test_a_baseline_reaches_the_groups_nodes_sorted_and_not_their_host_layers(lab: dict[str, Any]) -> None:
    plan = _plan(_with_baseline(lab, bios={"ProcTurboMode": "Enabled", "BootMode": "Uefi", "NumaNodes": 4}))
    gpu01 = next(n for n in plan.nodes if n.name == "gpu01")
    assert gpu01.firmware == FirmwareBaseline(
        (("BootMode", "Uefi"), ("NumaNodes", 4), ("ProcTurboMode", "Enabled")), None, None
    )
    assert next(n for n in plan.nodes if n.name == "cp01").firmware is None
    # The BMC's business: a host's variables do not carry it, so changing it runs no host layer.
    host = inventory(plan)["all"]["children"]["gpu_nodes"]["hosts"]["gpu01"]
    assert "firmware" not in host["aisite_node"]
    bare = copy.deepcopy(lab)
    del bare["gpu_nodes"][0]["firmware"]
    d = site_diff(_plan(bare), plan, LAYERS)
    assert d.layers == {}
    assert "gpu01.firmware.bios.ProcTurboMode" in {c.key for c in d.sections["nodes"]}
    assert d.rollout.empty  # a baseline in the plan alone takes nothing out: the BMCs' answers do


@pytest.mark.parametrize(
    ("firmware", "path"),
    [
        ({"bios": {"Proc Turbo": "Enabled"}}, "bios"),
        ({"bios": {"ProcTurboMode": "On; reboot"}}, "bios.ProcTurboMode"),
        ({"bios": {"ProcTurboMode": 1.5}}, "bios.ProcTurboMode"),
        ({"bios_firmware": {"version": "2.1 beta", "image": "http://m/x.bin"}}, "bios_firmware.version"),
        ({"bios_firmware": {"version": "2.1", "image": "ftp://m/x.bin"}}, "bios_firmware.image"),
        ({"bios_firmware": {"version": "2.1"}}, "bios_firmware.image"),
        ({"bmc_firmware": {}}, "bmc_firmware"),
    ],
)
def test_a_baseline_is_checked_field_by_field(lab: dict[str, Any], firmware: dict[str, Any], path: str) -> None:
    with pytest.raises(SiteError) as err:
        parse_site(_with_baseline(lab, **firmware))
    assert any(p.path.startswith(f"site.gpu_nodes[0].firmware.{path}") for p in err.value.problems), err.value.problems


def test_validate_says_an_ipmi_bmcs_baseline_is_neither_read_nor_set() -> None:
    r = run_cli("validate", "lab")
    assert r.returncode == 0, r.stderr
    assert "site.gpu_nodes[0].firmware: 1 nodes with IPMI BMCs (gpu02)" in r.stdout + r.stderr


def test_drift_names_each_attribute_and_the_release() -> None:
    same = firmware.Reading({"BootMode": "Uefi", "ProcTurboMode": "Enabled", "SriovEnable": True}, "2.1")
    assert firmware.drift(BASE, same) == []
    off = firmware.Reading({"BootMode": "Uefi", "ProcTurboMode": "Disabled", "SriovEnable": None}, "2.0")
    assert firmware.drift(BASE, off) == [
        "firmware: BIOS ProcTurboMode 'Disabled' -> 'Enabled'",
        "firmware: BIOS SriovEnable absent -> true",
        "firmware: BIOS release 2.0 -> 2.1",
    ]
    # A BIOS's "Enabled" is not its true, nor its 1 (True == 1 in Python).
    typed = firmware.Reading({"BootMode": "Uefi", "ProcTurboMode": "Enabled", "SriovEnable": 1}, "2.1")
    assert firmware.drift(BASE, typed) == ["firmware: BIOS SriovEnable 1 -> true"]
    no_release = FirmwareBaseline(BASE.bios, None, None)
    assert firmware.drift(no_release, firmware.Reading(same.bios, None)) == []


def test_a_reset_is_owed_only_for_pending_settings_of_the_baseline() -> None:
    now = {"BootMode": "Uefi", "ProcTurboMode": "Disabled", "SriovEnable": True}
    assert firmware.owed_reset(BASE, firmware.Reading(now, "2.1", {"ProcTurboMode": "Enabled"})) == ["ProcTurboMode"]
    assert firmware.owed_reset(BASE, firmware.Reading(now, "2.1", {"ProcTurboMode": "Disabled"})) == []
    assert firmware.owed_reset(BASE, firmware.Reading(now, "2.1", {})) == []
    assert firmware.owed_reset(BASE, firmware.Reading(now, "2.0", {})) == ["release"]  # a staged update


@given(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(),
        st.lists(st.integers()),
        st.dictionaries(st.text(), st.text()),
    )
)
def test_a_bmcs_value_is_narrowed_to_bool_int_or_a_short_printable_string(raw: Any) -> None:
    v = firmware.value(raw)
    assert v is None or isinstance(v, bool | int | str)
    if isinstance(v, str):
        assert len(v) <= 128 and v.isprintable()
    if isinstance(raw, bool) or raw is None or (isinstance(raw, int) and abs(raw) < 2**63):
        assert v is raw or v == raw
    elif isinstance(raw, int):  # past 64 bits: a BMC's number no attribute holds, kept as bounded text
        assert isinstance(v, str) and len(v) <= 128


def test_a_drifted_node_rolls_with_a_reboot_and_a_new_node_does_not(lab: dict[str, Any]) -> None:
    old = _plan(lab)
    new = _plan(_with_baseline(lab, bios={"ProcTurboMode": "Enabled"}))
    r = rollout(old, new, firmware={"gpu01": ["firmware: BIOS ProcTurboMode 'Disabled' -> 'Enabled'"], "gpu09": ["x"]})
    assert set(r.disruptions) == {"gpu01"}
    assert r.disruptions["gpu01"].reboot and r.waves == [["gpu01"]]
    d = site_diff(
        old,
        new,
        LAYERS,
        firmware=firmware.SiteFirmware(
            {"gpu01": ["firmware: BIOS ProcTurboMode 'Disabled' -> 'Enabled'"]}, unsupported={"gpu02": "IPMI BMC"}
        ),
    )
    text = markdown(d, "t")
    assert "firmware: BIOS ProcTurboMode 'Disabled' -> 'Enabled' (reboot): gpu01" in text
    assert "**Firmware** (0 of 2 nodes match their baseline, 1 differ, 1 not read)" in text
    assert "- not read: gpu02: IPMI BMC" in text


class ScriptedBmc:
    """A BMC as aisite.firmware sees one: settings PATCHed wait for a reset, a release is installed at once."""

    def __init__(self, bios: dict[str, Any], version: str, refuse: str = "") -> None:
        self.bios, self.version, self.pending, self.refuse = dict(bios), version, {}, refuse
        self.calls: list[str] = []

    def read(self, t: oob.Target, baseline: FirmwareBaseline) -> firmware.Reading:
        self.calls.append(f"read {t.address}")
        return firmware.Reading(dict(self.bios), self.version, dict(self.pending))

    def apply(self, t: oob.Target, baseline: FirmwareBaseline) -> list[str]:
        self.calls.append(f"apply {t.address}")
        if self.refuse:
            raise oob.BmcError(self.refuse)
        self.pending = {n: v for n, v in baseline.bios if self.bios.get(n) != v}
        if baseline.bios_version:
            self.version = baseline.bios_version
        return ["asked"]

    def reset(self, t: oob.Target, timeout: float = 300.0) -> None:
        self.calls.append(f"reset {t.address}")
        self.bios |= self.pending
        self.pending = {}


def _steps(plan: Plan, bmc: ScriptedBmc) -> tuple[Any, Any]:
    from aisite.deploy import HostRecap, RunResult
    from aisite.maintenance.state import MemberState, RolloutState
    from aisite.maintenance.steps import AnsibleSteps

    def runner(playbook: str, limit: str | None, extravars: Any) -> RunResult:
        hosts = (limit or "").split(",")
        stats = {"health_states": {h: {"node": h, "problems": []} for h in hosts}}
        return RunResult("successful", 0, {h: HostRecap(ok=1) for h in hosts}, stats=stats)

    members = {
        "gpu01": MemberState(["firmware: BIOS ProcTurboMode 'Disabled' -> 'Enabled'"], True),
        "cp01": MemberState(["Kubernetes 1.35.5 -> 1.35.6"], False),
    }
    state = RolloutState(plan.site, "c", "t", [["cp01"], ["gpu01"]], members)
    return AnsibleSteps(plan, runner, {"AISITE_SECRET_LAB_BMC": "pw"}, bmc), state


def test_a_rollout_sets_pending_settings_resets_through_the_bmc_and_checks_them(lab: dict[str, Any]) -> None:
    plan = _plan(_with_baseline(lab, bios={"ProcTurboMode": "Enabled"}))
    bmc = ScriptedBmc({"ProcTurboMode": "Disabled"}, "1.0.0")
    steps, state = _steps(plan, bmc)
    gpu01 = next(n for n in plan.nodes if n.name == "gpu01")
    assert steps("apply", ["gpu01"], state) == {}
    assert bmc.pending == {"ProcTurboMode": "Enabled"} and steps.done == [f"{gpu01.bmc.address}: asked"]
    # The reboot left the setting pending (a container cannot reboot): the BMC restarts the system.
    assert steps("reboot", ["gpu01"], state) == {}
    assert bmc.calls[-1] == f"reset {gpu01.bmc.address}" and bmc.bios == {"ProcTurboMode": "Enabled"}
    assert steps("verify", ["gpu01"], state) == {}
    # Nothing owed: no second reset.
    calls = len(bmc.calls)
    assert steps("reboot", ["gpu01"], state) == {} and not any(c.startswith("reset") for c in bmc.calls[calls:])
    # A member out for something else is never sent to its BMC.
    bmc.calls.clear()
    assert steps("apply", ["cp01"], state) == {} and bmc.calls == []


def test_a_bmc_that_refuses_or_keeps_the_old_value_fails_the_member(lab: dict[str, Any]) -> None:
    plan = _plan(_with_baseline(lab, bios={"ProcTurboMode": "Enabled"}))
    steps, state = _steps(plan, ScriptedBmc({"ProcTurboMode": "Disabled"}, "1.0.0", refuse="Redfish BMC x: HTTP 400"))
    assert steps("apply", ["gpu01"], state) == {"gpu01": "firmware: Redfish BMC x: HTTP 400"}
    steps, state = _steps(plan, ScriptedBmc({"ProcTurboMode": "Disabled"}, "1.0.0"))
    assert steps("verify", ["gpu01"], state) == {
        "gpu01": "firmware: still differs after the reset: BIOS ProcTurboMode 'Disabled' -> 'Enabled'"
    }


def test_a_site_reads_only_redfish_bmcs_whose_secret_it_has(
    lab: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = _plan(_with_baseline(lab, bios={"ProcTurboMode": "Enabled"}))
    asked: list[str] = []

    def read(t: oob.Target, baseline: FirmwareBaseline) -> firmware.Reading:
        asked.append(t.address)
        return firmware.Reading({"ProcTurboMode": "Disabled"}, None)

    monkeypatch.setattr(firmware, "read", read)
    none = firmware.site_firmware(plan, {})
    assert asked == [] and set(none.unread) == {"gpu01"} and "nothing sent" in none.unread["gpu01"]
    assert set(none.unsupported) == {"gpu02"}
    found = firmware.site_firmware(plan, {"AISITE_SECRET_LAB_BMC": "pw"})
    gpu01 = next(n for n in plan.nodes if n.name == "gpu01")
    assert asked == [gpu01.bmc.address]
    assert found.drifted == {"gpu01": ["firmware: BIOS ProcTurboMode 'Disabled' -> 'Enabled'"]}

    def silent(t: oob.Target, baseline: FirmwareBaseline) -> firmware.Reading:
        raise oob.BmcError(f"Redfish BMC {t.address}:443 did not answer")

    monkeypatch.setattr(firmware, "read", silent)
    assert "did not answer" in firmware.site_firmware(plan, {"AISITE_SECRET_LAB_BMC": "pw"}).unread["gpu01"]


def test_the_cli_reads_nothing_without_the_bmcs_secret() -> None:
    """`oob firmware` and `diff --firmware` on the lab stack with no BMC password: nothing is sent, each said."""
    r = run_cli("oob", "firmware", "lab", "--json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert "nothing sent" in doc["unread"]["gpu01"] and "IPMI" in doc["unsupported"]["gpu02"] and doc["drift"] == {}
    d = run_cli("diff", "lab", "--firmware", "--json")
    assert d.returncode == 0, d.stderr
    assert "nothing sent" in json.loads(d.stdout)["firmware"]["unread"]["gpu01"]
    plain = run_cli("diff", "lab")
    assert "Firmware: 2 nodes have a baseline; not read (`--firmware` reads their BMCs)." in plain.stdout


def test_after_its_bmcs_reset_a_machine_is_waited_for_until_it_answers_from_a_new_boot(lab: dict[str, Any]) -> None:
    """A machine (one that reports its boot_id) reset by its BMC: its old OS may still answer, then nothing does,
    then the new boot: the step waits for that, polling; one that never comes back fails with why; a container
    (no boot_id) is said, not waited for."""
    from aisite.deploy import HostRecap, RunResult
    from aisite.maintenance.state import MemberState, RolloutState
    from aisite.maintenance.steps import AnsibleSteps

    plan = _plan(_with_baseline(lab, bios={"ProcTurboMode": "Enabled"}))
    old, new = "8d1c6a62-4f8e-4b59-9d35-0f3f0e1e2a01", "0b7e2f44-93c5-4f0e-8a54-6c1d2b3e4f02"

    def scripted(answers: list[str | None]) -> tuple[AnsibleSteps, RolloutState, list[Any]]:
        calls: list[Any] = []

        def runner(playbook: str, limit: str | None, extravars: Any) -> RunResult:
            calls.append((playbook, limit, dict(extravars)))
            said = answers.pop(0) if answers else answers_last[0]
            stats = {"boot_ids": {"gpu01": said}} if said else {}
            return RunResult("successful", 0, {"gpu01": HostRecap(ok=1)}, stats=stats)

        answers_last = [answers[-1]]
        members = {"gpu01": MemberState(["firmware: BIOS ProcTurboMode 'Disabled' -> 'Enabled'"], True)}
        state = RolloutState(plan.site, "c", "t", [["gpu01"]], members)
        now = [0.0]
        steps = AnsibleSteps(
            plan,
            runner,
            {"AISITE_SECRET_LAB_BMC": "pw"},
            ScriptedBmc({"ProcTurboMode": "Disabled"}, "1.0.0"),
            boot_wait_s=60,
            clock=lambda: now[0],
            sleep=lambda s: now.__setitem__(0, now[0] + s),
        )
        steps.bmc.pending = {"ProcTurboMode": "Enabled"}  # type: ignore[attr-defined]  # set at apply, owed a reset
        return steps, state, calls

    # The OS reboot reports `old`; after the BMC's reset: `old` again (still shutting down), nothing, then `new`.
    steps, state, calls = scripted([old, old, None, new])
    assert steps("reboot", ["gpu01"], state) == {}
    assert [c[2] for c in calls] == [{}] + [{"maintenance_reboot": False}] * 3
    assert all(c[0] == "maintenance-reboot.yml" and c[1] == "gpu01" for c in calls)
    # Never back within the wait: the member fails with why.
    steps, state, calls = scripted([old, old])
    assert steps("reboot", ["gpu01"], state) == {"gpu01": "did not boot again within 60 s of its BMC's reset"}
    assert len(calls) == 1 + 5  # polled at 0, 15, 30, 45 and 60 s
    # A garbled boot_id is no boot: not taken for a new one.
    steps, state, calls = scripted([old, "$(reboot)", new])
    assert steps("reboot", ["gpu01"], state) == {} and len(calls) == 3
    # A container reports none: said, not waited for.
    steps, state, calls = scripted([None])
    assert steps("reboot", ["gpu01"], state) == {} and len(calls) == 1
    assert steps.skipped == [
        "gpu01 (maintenance): reset by its BMC: a container's OS does not restart with it; nothing to wait for"
    ]


@pytest.mark.parametrize(
    ("image", "path", "said"),
    [
        ({"version": "2.1", "image": "https://m/x.bin"}, "bios_firmware.sha256", "required"),
        ({"version": "2.1", "image": "https://m/x.bin", "sha256": "ABC"}, "bios_firmware.sha256", "pattern"),
        ({"version": "2.1", "image": "http://m/x.bin", "sha256": "a" * 64}, "bios_firmware.image", "https URL"),
    ],
)
def test_an_image_needs_its_digest_and_https_outside_a_lab(
    lab: dict[str, Any], image: dict[str, str], path: str, said: str
) -> None:
    """Issue 64: a BIOS image was a bare URL, http accepted and handed to the BMC as HTTP, no digest."""
    data = _with_baseline(lab, bios_firmware=image)
    data["ansible"] = {"connection": "ssh"}  # not a lab
    with pytest.raises(SiteError) as err:
        parse_site(data)
    found = [p for p in err.value.problems if p.path == f"site.gpu_nodes[0].firmware.{path}"]
    assert found and said in found[0].message, err.value.problems


def test_an_unverified_bmc_certificate_outside_a_lab_is_warned_naming_the_bmcs(lab: dict[str, Any]) -> None:
    from aisite.cautions import site_warnings

    data = copy.deepcopy(lab)
    data["ansible"] = {"connection": "ssh"}
    site = parse_site(data)
    assert site.oob.tls_verify is False
    (warning,) = [w for w in site_warnings(site, build_plan(site)) if w.path == "site.oob.tls_verify"]
    plan = build_plan(site)
    redfish = [n.name for n in plan.nodes if n.bmc.protocol == "redfish"]
    assert warning.message.startswith(f"false: the certificates of {len(redfish)} Redfish BMCs ({redfish[0]}")
    lab_site = parse_site(lab)
    assert not [w for w in site_warnings(lab_site, build_plan(lab_site)) if w.path == "site.oob.tls_verify"]


class _FakeUpdates:
    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def get_update_service(self) -> Any:
        return self

    def simple_update(self, image: str, targets: list[str], transfer_protocol: str) -> None:
        self.asked.append((image, transfer_protocol))


def test_the_image_is_fetched_and_its_digest_checked_before_the_bmc_is_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The image served on loopback: the site's digest lets SimpleUpdate go, another digest (a swapped image) stops
    the member before the BMC hears of it, and an image that is not there (404) or over the bound is the
    member's error."""
    import hashlib
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    body = b"BIOS 2.1\n" * 1000

    class Serve(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            data, code = (body, 200) if self.path == "/x.bin" else (b"", 404)
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Serve)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    updates = _FakeUpdates()
    monkeypatch.setattr(firmware, "read", lambda t, b: firmware.Reading({}, "2.0"))
    monkeypatch.setattr(redfish, "root", lambda t: updates)
    monkeypatch.setattr(redfish, "managed_system", lambda t, service_root=None: type("S", (), {"path": "/Systems/1"})())
    t = oob.Target("redfish", "192.0.2.10", 443, "u", "p")
    good = hashlib.sha256(body).hexdigest()
    try:
        done = firmware.apply(t, FirmwareBaseline((), "2.1", f"{url}/x.bin", good))
        assert updates.asked == [(f"{url}/x.bin", "HTTP")]
        assert done == [f"BIOS release 2.1 requested from {url}/x.bin (sha256 {good})"]
        for image, digest, said in (
            (f"{url}/x.bin", "0" * 64, f"has sha256 {good}, not the site's {'0' * 64}: the BMC at 192.0.2.10 was not"),
            (f"{url}/gone.bin", good, "404"),
        ):
            with pytest.raises(oob.BmcError, match=said):
                firmware.apply(t, FirmwareBaseline((), "2.1", image, digest))
        with pytest.raises(oob.BmcError, match="over 100 bytes"):
            firmware.image_digest(f"{url}/x.bin", True, limit=100)
        assert len(updates.asked) == 1, "no other image reached the BMC"
    finally:
        server.shutdown()
        server.server_close()


def test_the_rollout_records_the_release_the_bmc_reports_and_the_images_digest(lab: dict[str, Any]) -> None:
    plan = _plan(_with_baseline(lab, bios_firmware={"version": "2.1", "image": "https://m/x.bin", "sha256": "b" * 64}))
    steps, state = _steps(plan, ScriptedBmc({}, "2.1"))
    assert steps("verify", ["gpu01"], state) == {}
    assert state.members["gpu01"].installed == f"BIOS release 2.1 (BMC), image sha256 {'b' * 64}"


def test_the_lab_stack_pins_the_lab_mirrors_image() -> None:
    from aisite.lab import firmware as mirror
    from aisite.loader import load_site

    plan = build_plan(load_site("lab"))
    (node, *_) = [n for n in plan.nodes if n.firmware and n.firmware.bios_version]
    assert node.firmware is not None
    assert (node.firmware.bios_image, node.firmware.bios_sha256) == (mirror.url(plan), mirror.digest())
