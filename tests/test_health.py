"""Health checks offline: the tools' real output (tests/fixtures/health, each file's source in its README) read
and judged — XID, ECC and row remapping, NVLink, rails down — and the quarantine's cap, recovery and objects."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path

import kubernetes_validate
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from aisite.health import parse
from aisite.health.judge import Expected, Facts, NodeHealth, Problem, judge
from aisite.health.quarantine import NodeRecord, cap, decide, eviction, metrics, node_object

FIXTURES = Path(__file__).parent / "fixtures" / "health"
DGX = Expected("dgx01", gpus=1, nvlink=False, rails=())


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def problems(h: NodeHealth, check: str) -> list[Problem]:
    return [p for p in h.problems if p.check == check]


@pytest.mark.parametrize(
    ("name", "faulty"),
    [
        ("dmesg-akash-support-244.txt", {("0000:00:08", 94)}),  # 43 and 31 are the program's, 94 the GPU's
        ("dmesg-nvsentinel-155.txt", {("0000:b3:00", 79)}),  # fallen off the bus, no XID printed
        ("kmsg-gpud-1174.txt", {("0019:01:00", 149), ("0000:00:00", 149), ("0018:01:00", 145), ("0000:9b:00", 94)}),
        ("dmesg-xid-119-gpud.log", {("0000:9b:00", 119)}),
    ],
)
def test_xids_from_real_kernel_logs(name: str, faulty: set[tuple[str, int]]) -> None:
    events = parse.xid_events(fixture(name))
    h = judge(Facts(xids=events), DGX)
    assert {(p.subject, int(p.message.split()[1].rstrip(":"))) for p in problems(h, "xid")} == faulty
    assert not h.healthy and h.reason == "xid"


def test_application_xids_alone_leave_the_node_healthy() -> None:
    log = "\n".join(line for line in fixture("dmesg-akash-support-244.txt").splitlines() if "): 94," not in line)
    h = judge(Facts(xids=parse.xid_events(log)), DGX)
    assert len(parse.xid_events(log)) == 3 and h.healthy and "xid" in h.checked


def test_ecc_and_row_remapping_from_nvidia_smi() -> None:
    healthy = parse.smi_query(fixture("nvidia-smi-q-rtx4090-535-gpud.txt"))
    assert [(g.bus_id, g.remap_pending, g.remap_failed) for g in healthy] == [("00000000:01:00.0", False, False)]
    assert judge(Facts(memory=healthy), DGX).healthy
    edited = judge(Facts(memory=parse.smi_query(fixture("nvidia-smi-q-ecc-edited.txt"))), DGX)
    assert sorted(p.message for p in problems(edited, "ecc")) == [
        "2 uncorrectable SRAM ECC errors",
        "row remapping failed: the GPU needs replacing",
    ]
    pending = judge(Facts(memory=parse.smi_query(fixture("nvidia-smi-remapped-rows-pending-gpud-80.txt"))), DGX)
    assert [p.message for p in problems(pending, "ecc")] == ["row remapping pending (4 uncorrectable): reset the GPU"]


def test_a_real_h200_on_driver_580() -> None:
    # Recorded on a lent H200 (driver 580.159.04) by benchmarks/gpu_device_check.sh: R570+ splits SRAM uncorrectable
    # into Parity and SEC-DED and adds the field-diagnostics threshold, memory repairs and the recovery action.
    [g] = parse.smi_query(fixture("nvidia-smi-q-h200-580.txt"))
    assert (g.bus_id, g.product, g.ecc_mode) == ("00000000:00:06.0", "NVIDIA H200", "Enabled")
    assert (g.volatile_sram_uncorrectable, g.aggregate_sram_uncorrectable, g.volatile_dram_uncorrectable) == (0, 0, 0)
    assert (g.sram_threshold_exceeded, g.channel_repair_pending, g.tpc_repair_pending) == (False, False, False)
    assert (g.unrepairable_memory, g.recovery_action, g.remap_pending, g.remap_failed) == (False, "None", False, False)
    h = judge(Facts(memory=[g]), DGX)
    assert h.healthy and {"ecc", "gpu-recovery", "gpu-clocks"} <= set(h.checked)
    # A driver that prints no recovery action (R535): said skipped, not passed.
    old = judge(Facts(memory=parse.smi_query(fixture("nvidia-smi-q-rtx4090-535-gpud.txt"))), DGX)
    assert "gpu-recovery" not in old.checked and any(s.startswith("gpu-recovery:") for s in old.skipped)
    assert "gpu-clocks" not in old.checked and any(s.startswith("gpu-clocks:") for s in old.skipped)


def test_h200_faults_in_the_r580_fields_are_each_found() -> None:
    # The real H200 output with faults edited in (no published R570+ output of a faulty GPU was found): each field
    # alone must take the GPU out, and the split SRAM counters are summed.
    real = fixture("nvidia-smi-q-h200-580.txt")

    def edited(*pairs: tuple[str, str, str]) -> NodeHealth:
        lines = real.splitlines()
        for key, value, after in pairs:
            start = next(i for i, line in enumerate(lines) if line.strip().startswith(after))
            at = next(i for i in range(start, len(lines)) if lines[i].strip().startswith(key))
            lines[at] = lines[at].rsplit(":", 1)[0] + ": " + value
        return judge(Facts(memory=parse.smi_query("\n".join(lines))), DGX)

    sram = edited(("SRAM Uncorrectable Parity", "2", "Volatile"), ("SRAM Uncorrectable SEC-DED", "3", "Volatile"))
    assert [p.message for p in problems(sram, "ecc")] == ["5 uncorrectable SRAM ECC errors"]
    cases = {
        "SRAM Threshold Exceeded": "SRAM errors exceed the field diagnostics threshold: run them",
        "Channel Repair Pending": "a memory channel repair is pending: reset the GPU",
        "TPC Repair Pending": "a TPC repair is pending: reset the GPU",
        "Unrepairable Memory": "memory the GPU cannot repair: the GPU needs replacing",
    }
    for key, message in cases.items():
        h = edited((key, "Yes", "ECC Errors"))
        assert [p.message for p in h.problems] == [message] and h.reason == "ecc", key
    reset = edited(("GPU Recovery Action", "Reset", "GPU "))
    assert [(p.check, p.message) for p in reset.problems] == [("gpu-recovery", "the driver asks for recovery: Reset")]
    assert not reset.healthy


def test_hardware_slowing_a_gpus_clocks_between_checks_is_found() -> None:
    # The real H200's cumulative clock event counters (all 0 us); a rise of HW Thermal Slowdown or HW Power Braking
    # since the last check takes the GPU out, a software power cap does not, and neither does a first check or a
    # driver reload that reset the counters.
    [g] = parse.smi_query(fixture("nvidia-smi-q-h200-580.txt"))
    assert g.clock_event_us == {
        "SW Power Capping": 0, "Sync Boost": 0, "SW Thermal Slowdown": 0, "HW Thermal Slowdown": 0,
        "HW Power Braking": 0,
    }  # fmt: skip
    key = f"gpu {g.bus_id}"
    assert judge(Facts(memory=[g]), DGX).healthy  # nothing to compare with
    hot = dict(g.clock_event_us, **{"HW Thermal Slowdown": 2_500_000, "SW Power Capping": 9_000_000})
    later = parse.GpuMemoryState(g.bus_id, clock_event_us=hot)
    h = judge(Facts(memory=[later], previous_counters={key: g.clock_event_us}), DGX)
    assert [(p.check, p.message) for p in h.problems] == [
        ("gpu-clocks", "clocks held back since the last check: HW Thermal Slowdown 2.5 s")
    ]
    reset = judge(Facts(memory=[g], previous_counters={key: hot}), DGX)
    assert reset.healthy


def _edited_h200(*pairs: tuple[str, str, str]) -> str:
    """The real H200's `nvidia-smi -q` with `key`'s value after the line starting `after` set to `value`."""
    lines = fixture("nvidia-smi-q-h200-580.txt").splitlines()
    for key, value, after in pairs:
        start = next(i for i, line in enumerate(lines) if line.strip().startswith(after))
        at = next(i for i in range(start, len(lines)) if lines[i].strip().startswith(key))
        lines[at] = lines[at].rsplit(":", 1)[0] + ": " + value
    return "\n".join(lines)


def test_the_loaded_driver_must_be_of_the_plans_branch() -> None:
    # A rollout of a new branch verifies the node with this: a reboot that left the old module loaded is a problem.
    text = fixture("nvidia-smi-q-h200-580.txt")
    assert parse.smi_driver(text) == "580.159.04"
    facts = Facts(memory=parse.smi_query(text), driver=parse.smi_driver(text))
    ok = judge(facts, Expected("g", 1, False, (), driver_branch=580))
    assert ok.healthy and "gpu-driver" in ok.checked
    old = judge(facts, Expected("g", 1, False, (), driver_branch=570))
    assert [(p.check, p.subject, p.message) for p in old.problems] == [
        ("gpu-driver", "node", "driver 580.159.04 is loaded, the plan has R570")
    ]
    assert old.reason == "gpu-driver"
    assert "gpu-driver" not in judge(facts, DGX).checked  # a plan without a branch judges none
    unprinted = judge(Facts(memory=facts.memory), Expected("g", 1, False, (), driver_branch=580))
    assert unprinted.healthy and any(s.startswith("gpu-driver:") for s in unprinted.skipped)
    assert parse.smi_driver("Driver Version : 580.1; rm -rf /\n") is None  # only a version, whole line


@pytest.mark.parametrize(
    ("said", "code", "message"),
    [
        # anderskm/gputil#55 and mozilla/translations#1167: nvidia-smi after a driver upgrade without its reboot.
        (
            "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 535.161\n",
            18,
            "Failed to initialize NVML: Driver/library version mismatch NVML library version: 535.161 (exit 18)",
        ),
        # NVIDIA/nvidia-docker#988: no module loaded.
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
            "NVIDIA driver is installed and running.\n",
            9,
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
            "NVIDIA driver is installed and running. (exit 9)",
        ),
    ],
)
def test_nvidia_smi_failing_on_a_gpu_node_is_a_problem_not_a_skip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, said: str, code: int, message: str
) -> None:
    from aisite.health import node

    tool = tmp_path / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\nprintf '%b' {json.dumps(said)}\nexit {code}\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing else the check reads is there: each is skipped
    expected = Expected("g", 8, True, (), driver_branch=580)
    facts = node.collect(expected, 60)
    assert (facts.memory, facts.smi_error) == (None, message)
    h = judge(facts, expected)
    assert [(p.check, p.message) for p in h.problems] == [("gpu-driver", f"nvidia-smi failed: {message}")]
    # Not on the node at all (a node that never had the driver) stays a skip, as before.
    tool.unlink()
    absent = node.collect(expected, 60)
    assert (absent.memory, absent.smi_error) == (None, None)
    assert not judge(absent, expected).problems


def test_nvswitch_gpus_must_have_registered_with_the_fabric() -> None:
    # NVML's nvmlGpuFabricInfo_t: state Not Started, In Progress, Completed; the status is read once Completed;
    # Health's Summary as kubernetes-sigs/dra-driver-nvidia-gpu#626 printed it. The real H200 (no NVSwitch) has N/A.
    nvswitch = Expected("g", 1, True, ())
    na = judge(Facts(memory=parse.smi_query(fixture("nvidia-smi-q-h200-580.txt"))), nvswitch)
    assert "gpu-fabric" not in na.checked and any(s.startswith("gpu-fabric:") for s in na.skipped)
    done = parse.smi_query(_edited_h200(("State", "Completed", "Fabric"), ("Status", "Success", "Fabric")))
    assert (done[0].fabric_state, done[0].fabric_status, done[0].fabric_health) == ("Completed", "Success", None)
    ok = judge(Facts(memory=done), nvswitch)
    assert "gpu-fabric" in ok.checked and not problems(ok, "gpu-fabric")
    cases = {
        (("State", "In Progress", "Fabric"),): "fabric registration In Progress (nvidia-fabricmanager)",
        (("State", "Not Started", "Fabric"),): "fabric registration Not Started (nvidia-fabricmanager)",
        (("State", "Completed", "Fabric"), ("Status", "Failure", "Fabric")): "fabric registration failed: Failure",
        (
            ("State", "Completed", "Fabric"),
            ("Status", "Success", "Fabric"),
            ("Summary", "Unhealthy", "Health"),
        ): "fabric health Unhealthy",
    }
    for edits, message in cases.items():
        h = judge(Facts(memory=parse.smi_query(_edited_h200(*edits))), nvswitch)
        assert [(p.check, p.subject, p.message) for p in h.problems] == [("gpu-fabric", "00000000:00:06.0", message)]
    # Without NVSwitch the fabric is not judged at all.
    assert judge(Facts(memory=parse.smi_query(_edited_h200(("State", "In Progress", "Fabric")))), DGX).healthy


def test_a_missing_gpu_is_a_problem() -> None:
    h = judge(Facts(memory=parse.smi_query(fixture("nvidia-smi-q-rtx4090-535-gpud.txt"))), Expected("n", 8, False, ()))
    assert [p.message for p in problems(h, "gpu-count")] == ["1 GPUs answer, the plan has 8"]


def test_nvlink_from_nvidia_smi_and_dcgmi() -> None:
    a100 = Expected("dgxa100", gpus=8, nvlink=True, rails=())
    healthy = parse.nvlink_status(fixture("nvidia-smi-nvlink-status-a100-gpud.txt"))
    assert len(healthy) == 8 and all(len(g.links) == 12 for g in healthy)
    assert judge(Facts(nvlink=healthy), a100).healthy
    # The same output with one link of GPU 3 reported inactive (the driver's `<inactive>`): an edit in the test.
    one_down = fixture("nvidia-smi-nvlink-status-a100-gpud.txt").splitlines()
    at = one_down.index(next(line for line in one_down if line.startswith("GPU 3:"))) + 6
    one_down[at] = one_down[at].replace("25 GB/s", "<inactive>")
    h = judge(Facts(nvlink=parse.nvlink_status("\n".join(one_down))), a100)
    assert [(p.subject, p.message) for p in h.problems] == [("GPU 3", "NVLink 5 inactive")]
    b200 = judge(Facts(nvlink=parse.nvlink_status(fixture("nvidia-smi-nvlink-inactive-gpud-1085.txt"))), a100)
    assert ("GPU 2", "all NVLinks inactive") in [(p.subject, p.message) for p in b200.problems]
    dcgm = parse.dcgmi_link_status(fixture("dcgmi-nvlink-link-status-dcgm-198.txt"))
    assert [len(g.links) for g in dcgm] == [18, 18]
    h = judge(Facts(nvlink=dcgm), Expected("n", 2, True, ()))
    assert [(p.subject, p.message) for p in h.problems] == [
        ("GPU 0", "all NVLinks inactive"),
        ("GPU 1", "all NVLinks inactive"),
    ]


def test_dcgm_diagnostics_from_dcgmi() -> None:
    text = fixture("dcgmi-diag-r1-dcgm-3.1.0.txt")
    results = parse.dcgm_diag(text)
    assert results is not None and len(results) == 17 and {r.status for r in results} == {"PASS"}
    assert judge(Facts(diag=results), DGX).healthy
    # One GPU's software test failed: an edit in the test, of the real document.
    failed = text.replace(
        '"gpu_ids": 5,\n\t\t\t\t\t\t\t\t"status": "PASS"', '"gpu_ids": 5,\n\t\t\t\t\t\t\t\t"status": "FAIL"'
    )
    assert failed != text
    h = judge(Facts(diag=parse.dcgm_diag(failed)), DGX)
    assert [(p.subject, p.message) for p in h.problems] == [("GPU 5", "software failed")]
    assert parse.dcgm_diag("Error: unable to connect to the host engine") is None


def test_a_rail_down_or_wrong_is_a_problem() -> None:
    links = parse.ip_links(fixture("ip-addr-rail1-down.json"))
    rails = (("rail0", 9000, "10.250.16.28/27"), ("rail1", 9000, "10.250.17.28/27"))
    h = judge(Facts(links=links), Expected("gpu01", 0, False, rails))
    assert [(p.subject, p.message) for p in h.problems] == [("rail1", "down (operstate DOWN)")]
    h = judge(
        Facts(links=links), Expected("gpu01", 0, False, (("rail0", 4200, "10.250.16.29/27"), ("rail2", 9000, "x")))
    )
    assert [(p.subject, p.message) for p in h.problems] == [
        ("rail0", "MTU 9000, the plan's 4200"),
        ("rail0", "address 10.250.16.29/27 missing"),
        ("rail2", "missing"),
    ]


def test_what_a_node_lacks_is_skipped_and_said() -> None:
    h = judge(Facts(), Expected("lab-node", gpus=1, nvlink=True, rails=(("rail0", 9000, "x"),)))
    assert h.healthy and not h.checked
    assert {s.split(":")[0] for s in h.skipped} == {
        "xid",
        "ecc, gpu-count",
        "nvlink",
        "rail",
        "filesystem",
        "clock",
        "rdma",
    }


def _health(node: str, ok: bool) -> NodeHealth:
    return NodeHealth(node, [] if ok else [Problem("xid", "0000:3b:00", "XID 79")])


@given(
    st.integers(1, 30).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.floats(0.01, 1.0),
            st.integers(1, 4),
            st.lists(st.lists(st.booleans(), min_size=n, max_size=n), min_size=1, max_size=12),
        )
    )
)
def test_quarantine_never_exceeds_its_cap_and_releases_only_after_clean_checks(
    case: tuple[int, float, int, list[list[bool]]],
) -> None:
    n, share, recover_after, rounds = case
    limit = cap(n, share, None)
    assert 1 <= limit <= max(1, n)
    state: dict[str, NodeRecord] = {}
    clean_runs = dict.fromkeys(range(n), 0)
    for i, oks in enumerate(rounds):
        results = {f"n{k:02d}": _health(f"n{k:02d}", ok) for k, ok in enumerate(oks)}
        before = {k: r.quarantined for k, r in state.items()}
        state, actions = decide(state, results, limit, recover_after, f"t{i}")
        assert sum(r.quarantined for r in state.values()) <= limit
        for k, ok in enumerate(oks):
            clean_runs[k] = clean_runs[k] + 1 if ok else 0
        for a in actions:
            k = int(a.node[1:])
            if a.kind == "release":
                assert before.get(a.node) and clean_runs[k] >= recover_after
            else:  # quarantine or held: only a failing node, never one already out
                assert not oks[k] and not before.get(a.node)
        held = [a for a in actions if a.kind == "held"]
        assert not held or sum(r.quarantined for r in state.values()) == limit


@given(
    st.integers(0, 2),  # racks that may be out at once
    st.integers(0, 3),  # the node cap
    st.lists(st.tuples(st.sets(st.integers(0, 3), max_size=4), st.sets(st.integers(0, 11))), min_size=1, max_size=8),
)
def test_a_faulted_rack_is_decided_whole_under_the_racks_cap(
    rack_limit: int, limit: int, rounds: list[tuple[set[int], set[int]]]
) -> None:
    """Four racks of three trays and a lone node each round: the faulted racks (their trays carry the rack's
    problem) and the trays failing on their own. A faulted rack's trays all share one fate (all out, or all held
    with the same reason), never more racks out than the racks' cap, never a rack out when the node cap is 0, and
    the node cap counts every node out, with its rack or on its own."""
    trays = {f"r{r}": [f"r{r}t{t}" for t in range(3)] for r in range(4)}
    state: dict[str, NodeRecord] = {}
    for i, (faulted, failing) in enumerate(rounds):
        names = [t for ts in trays.values() for t in ts]
        faults = {f"r{r}": (trays[f"r{r}"], "NVLink fabric") for r in sorted(faulted)}
        bad = {t for r in faulted for t in trays[f"r{r}"]} | {names[k] for k in failing}
        results = {t: _health(t, t not in bad) for t in names}
        before = {k: r.quarantined for k, r in state.items()}
        state, actions = decide(state, results, limit, 3, f"t{i}", racks=faults, rack_limit=rack_limit)
        racks_out = {r.rack for r in state.values() if r.quarantined and r.rack}
        assert len(racks_out) <= rack_limit and (limit > 0 or not racks_out)
        assert sum(r.quarantined for r in state.values()) <= max(limit, sum(before.values()))
        for rack, (members, _) in faults.items():
            # Out with its rack, every tray; or the rack held: its trays not yet out held for one reason, and a
            # tray out on its own before stays out as a node.
            if any(state[t].rack == rack for t in members):
                assert all(state[t].quarantined and state[t].rack == rack for t in members), rack
            else:
                held = {a.reason for a in actions if a.node in members and a.kind == "held"}
                assert {a.node for a in actions if a.node in members} == {t for t in members if not before.get(t)}
                assert len(held) == (1 if not all(before.get(t) for t in members) else 0), held
                assert all(state[t].quarantined == bool(before.get(t)) for t in members)


def test_the_cap_holds_a_site_back_from_draining_itself() -> None:
    """A bad threshold fails every node at once: a tenth of them are quarantined, the rest held and alerted."""
    nodes = [f"gpu{k:02d}" for k in range(20)]
    limit = cap(len(nodes), 0.1, None)
    _, actions = decide({}, {n: _health(n, False) for n in nodes}, limit, 3, "t0")
    assert limit == 2 and [a.node for a in actions if a.kind == "quarantine"] == ["gpu00", "gpu01"]
    assert len([a for a in actions if a.kind == "held"]) == 18
    assert cap(4, 0.1, None) == 1 and cap(100, 0.5, 0) == 0


def test_quarantine_objects_validate_and_release_owns_nothing() -> None:
    rec = NodeRecord(quarantined=True, reason="nvlink")
    taint = node_object("gpu01", rec)
    for obj in (taint, node_object("gpu01", None), eviction("worker-0", "team-a")):
        kubernetes_validate.validate(obj, "1.35.6", strict=True)
    assert taint["spec"] == {
        "unschedulable": True,
        "taints": [{"key": "aisite.io/unhealthy", "value": "nvlink", "effect": "NoSchedule"}],
    }
    assert "spec" not in node_object("gpu01", NodeRecord())
    bad = node_object("gpu01", rec)
    bad["spec"]["taints"][0]["effekt"] = bad["spec"]["taints"][0].pop("effect")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, "1.35.6", strict=True)


def test_quarantine_metrics_parse_as_prometheus_text() -> None:
    state, actions = decide({}, {"a": _health("a", False), "b": _health("b", False)}, 1, 2, "t0")
    families = {f.name: f for f in text_string_to_metric_families(metrics(state, actions, 1))}
    quarantined = {s.labels["node"]: s.value for s in families["aisite_health_quarantined"].samples}
    assert quarantined == {"a": 1.0, "b": 0.0}
    assert [s.labels["node"] for s in families["aisite_health_held"].samples] == ["b"]
    assert families["aisite_health_quarantine_cap"].samples[0].value == 1.0


def test_a_pass_on_the_controller_records_applies_and_releases(tmp_path: Path) -> None:
    """Two passes over the lab's nodes as their status.json would read: the node with a rail down is quarantined
    (state, actions, metrics, its Node object written), a node that sent nothing is reported missing; once it
    is clean for recover_after checks it is released and its object owns nothing again."""
    import yaml

    from aisite.health.site import run_pass
    from aisite.loader import load_site
    from aisite.plan import build_plan

    plan = build_plan(load_site("lab"))
    assert plan.health is not None
    down = {"node": "gpu02", "problems": [{"check": "rail", "subject": "rail1", "message": "down (operstate DOWN)"}]}
    ok = {n.name: {"node": n.name, "problems": [], "checked": ["rail"], "skipped": []} for n in plan.nodes}
    first = run_pass(plan, ok | {"gpu02": down, "stor01": None}, tmp_path, tmp_path / "members.json")
    assert [(a.node, a.kind) for a in first.actions] == [("gpu02", "quarantine")]
    assert first.missing == ["stor01"] and first.limit == 1  # 5 nodes x 0.1, at least one
    obj = yaml.safe_load((tmp_path / "nodes" / "gpu02.yaml").read_text())
    assert obj["spec"]["taints"] == [{"key": "aisite.io/unhealthy", "value": "rail", "effect": "NoSchedule"}]
    kubernetes_validate.validate(obj, plan.kubernetes.version, strict=True)
    for i in range(plan.health.recover_after):
        later = run_pass(plan, ok, tmp_path, tmp_path / "members.json")
        released = [(a.node, a.kind) for a in later.actions]
        assert released == ([("gpu02", "release")] if i == plan.health.recover_after - 1 else [])
    assert "spec" not in yaml.safe_load((tmp_path / "nodes" / "gpu02.yaml").read_text())
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "actions.jsonl").read_text().splitlines()]
    assert kinds == ["quarantine", "release"]
    garbled = run_pass(plan, ok | {"cp01": {"node": "cp01"}}, tmp_path, tmp_path / "members.json")
    assert [p.check for p in garbled.results["cp01"].problems] == ["status"]


def _sysfs(tmp_path: Path, edit: dict[str, str] | None = None, ethernet: bool = True) -> Path:
    """The recorded /sys/class/infiniband of an 8x H100 system (its JSON fixture), as a tree again. That system's
    ports run InfiniBand; `ethernet` edits their link layer to a RoCE site's (the NICs' LINK_TYPE set to ETH)."""
    files: dict[str, str] = json.loads(fixture("sys-class-infiniband-h100-gpud.json"))
    if ethernet:
        files |= {k: "Ethernet\n" for k in files if k.endswith("/link_layer")}
    files |= edit or {}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def test_rdma_ports_state_rate_and_error_counters(tmp_path: Path) -> None:
    rails = tuple((f"rail{i}", 9000, f"10.0.{i}.2/24") for i in range(2))
    expected = Expected("dgx01", 0, False, rails, rail_gbps=400, rdma=("mlx5_0", "mlx5_1"))
    recorded = parse.rdma_ports(_sysfs(tmp_path / "ib", ethernet=False))
    p0 = next(p for p in recorded if p.device == "mlx5_0")
    assert (p0.state, p0.phys_state, p0.rate_gbps, p0.link_layer) == ("ACTIVE", "LinkUp", 400.0, "InfiniBand")
    # As recorded, InfiniBand: on a RoCE fabric each rail's NIC has not booted into its LINK_TYPE ETH.
    assert [(p.subject, p.message) for p in judge(Facts(rdma=recorded), expected).problems] == [
        (d, "link layer InfiniBand, the fabric's Ethernet (RoCE): the NIC's LINK_TYPE, not booted")
        for d in ("mlx5_0", "mlx5_1")
    ]
    ports = parse.rdma_ports(_sysfs(tmp_path / "ok"))
    assert len(ports) == 9 and {p.device for p in ports} >= {"mlx5_0", "mlx5_1", "mlx5_bond_0"}
    assert "symbol_error" in p0.counters and "out_of_sequence" in p0.counters
    before = {f"{p.device}/{p.port}": p.counters for p in ports}
    assert judge(Facts(rdma=ports, previous_counters=before), expected).healthy
    # The next check: mlx5_1's link recovered from errors, with symbol errors (an edit of the recording; its
    # 8-bit link_downed already reads 255 there, saturated, so it cannot show one more).
    assert next(p for p in ports if p.device == "mlx5_1").counters["link_downed"] == 255
    down = {"mlx5_1/ports/1/counters/link_error_recovery": "1\n", "mlx5_1/ports/1/counters/symbol_error": "12\n"}
    later = parse.rdma_ports(_sysfs(tmp_path / "later", down))
    h = judge(Facts(rdma=later, previous_counters=before), expected)
    assert [(p.subject, p.message) for p in h.problems] == [
        ("mlx5_1", "errors since the last check: link_error_recovery +1, symbol_error +12")
    ]
    slow = parse.rdma_ports(_sysfs(tmp_path / "slow", {"mlx5_0/ports/1/rate": "200 Gb/sec (2X NDR)\n"}))
    assert [p.message for p in judge(Facts(rdma=slow), expected).problems] == ["200 Gb/s, the plan's 400"]
    gone = parse.rdma_ports(_sysfs(tmp_path / "gone", {"mlx5_0/ports/1/state": "1: DOWN\n"}))
    assert [p.message for p in judge(Facts(rdma=gone), expected).problems] == ["port DOWN (LinkUp)"]
    assert "rdma: no RDMA device on this node" in judge(Facts(), expected).skipped


def test_rdma_devices_are_the_models_and_the_machine_must_agree(tmp_path: Path) -> None:
    """The rails' RDMA devices come from the plan (a DGX H100's from its user guide's Table 6): on the recording of
    another 8x H100 system, whose firmware numbered them mlx5_0,1,4..9, three of the DGX's devices are missing; a
    rail whose interface sits on another device than the plan's is the plan disagreeing with the machine; a rail
    whose device no document names is judged by the device behind its interface."""
    from aisite.catalog import SERVER_MODELS

    dgx = tuple(p.rdma for p in SERVER_MODELS["dgx-h100"].compute_ports)
    assert dgx == ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11")
    rails = tuple((f"rail{i}", 9000, f"10.0.{i}.2/24") for i in range(8))
    ports = parse.rdma_ports(_sysfs(tmp_path))
    h = judge(Facts(rdma=ports), Expected("dgx01", 0, False, rails, rail_gbps=400, rdma=dgx))
    assert sorted((p.subject, p.message) for p in h.problems) == [
        ("mlx5_10", "missing"),
        ("mlx5_11", "missing"),
        ("mlx5_3", "missing"),
    ]
    wrong = judge(
        Facts(rdma=ports, rail_rdma={"rail0": "mlx5_0", "rail1": "mlx5_1"}),
        Expected("dgx01", 0, False, rails[:2], rail_gbps=400, rdma=("mlx5_0", "mlx5_3")),
    )
    assert ("rail1", "RDMA device mlx5_1, the plan's mlx5_3 (ports map wrong)") in [
        (p.subject, p.message) for p in wrong.problems
    ]
    unknown = Expected("gpu01", 0, False, rails[:2], rail_gbps=400)
    found = judge(Facts(rdma=ports, rail_rdma={"rail0": "mlx5_4", "rail1": "mlx5_bond_0"}), unknown)
    # mlx5_bond_0 is the 200G Ethernet bond: behind rail1, it is judged as rail1's device and is too slow.
    assert [(p.subject, p.message) for p in found.problems] == [("mlx5_bond_0", "200 Gb/s, the plan's 400")]
    blind = judge(Facts(rdma=ports, rail_rdma={}), unknown)
    assert blind.healthy and any("rail0's RDMA device is neither in the plan" in s for s in blind.skipped)


def test_the_health_daemonset_starts_the_nodes_own_check_and_validates() -> None:
    """h100pod runs the check from a DaemonSet: privileged in a namespace of its own, on every node, starting the
    node's service through nsenter; the others keep the timer and render no DaemonSet."""
    from aisite.loader import load_site
    from aisite.plan import build_plan
    from aisite.platform import objects
    from aisite.render.inventory import inventory

    plan = build_plan(load_site("h100pod"))
    ns, ds = objects(plan)["health.yaml"]
    for o in (ns, ds):
        kubernetes_validate.validate(o, plan.kubernetes.version, strict=True)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostPID"] and pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["automountServiceAccountToken"] is False  # it talks to no API: no token in a privileged pod
    assert "systemctl start aisite-health.service" in pod["containers"][0]["command"][-1]
    assert "sleep 300" in pod["containers"][0]["command"][-1]
    assert inventory(plan)["all"]["vars"]["aisite_health"]["runner"] == "daemonset"
    assert "health.yaml" not in objects(build_plan(load_site("dc1")))


LYING = [
    "not a dict",
    ["a", "list"],
    {"node": "gpu01"},  # no problems at all
    {"node": "gpu01", "problems": [{"check": "rail", "message": "no subject"}]},
    {"node": "gpu01", "problems": [{"check": "rail", "subject": 5, "message": "x"}]},
    {"node": "gpu01", "problems": [{"check": "{{ lookup('pipe', 'id') }}", "subject": "s", "message": "m"}]},
    {"node": "gpu01", "problems": [{"check": "made-up", "subject": "s", "message": "m"}]},
    {"node": "gpu01", "problems": [{"check": "rail", "subject": "s" * 10_000, "message": "m"}]},
    {"node": "gpu01", "problems": [{"check": "rail", "subject": "s", "message": "m"}] * 5000},
    {"node": "gpu02", "problems": []},  # names another node
    {"node": "gpu01", "problems": [], "checked": 10**400},
]


@pytest.mark.parametrize("doc", LYING, ids=range(len(LYING)))
def test_a_status_that_does_not_parse_is_the_nodes_unreadable_verdict(doc: object) -> None:
    from aisite.health.site import from_status

    h = from_status("gpu01", doc)
    assert [(p.check, p.subject) for p in h.problems] == [("status", "status.json")]
    assert h.problems[0].message.startswith("unreadable: ") and len(h.problems[0].message) < 200


def test_a_nodes_text_is_kept_printable_and_bounded() -> None:
    from aisite.health.site import from_status

    paint = "\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2J\x1b]0;title\x07[/x][red]gpu\u202e\n"
    h = from_status("gpu01", {"node": "gpu01", "problems": [{"check": "rail", "subject": paint, "message": paint}]})
    for text in (h.problems[0].subject, h.problems[0].message):
        assert "\x1b" not in text and "\x07" not in text and "\n" not in text and "\u202e" not in text
        assert text == "[/x][red]gpu"  # markup is escaped where it is shown, not here


def test_quarantine_takes_the_gravest_node_not_the_one_reporting_most() -> None:
    """A node reporting 500 trivial problems does not take the only place from a node with an ECC failure; of two
    equally grave, the one failing longest goes first."""
    from aisite.health.quarantine import summary

    noisy = NodeHealth("gpu01", [Problem("clock", "node", f"offset {i}") for i in range(500)])
    ecc = NodeHealth("gpu02", [Problem("ecc", "GPU 0", "row remapping failed: the GPU needs replacing")])
    state, actions = decide({}, {"gpu01": noisy, "gpu02": ecc}, 1, 3, "2026-01-01T00:00:00")
    assert [(a.node, a.kind) for a in actions] == [("gpu02", "quarantine"), ("gpu01", "held")]
    assert state["gpu02"].reason == "ecc" and len(actions[1].reason) < 600 and "+495 more" in actions[1].reason
    assert summary(NodeHealth("n", [Problem("clock", "node", "x"), Problem("xid", "gpu", "79")]))[1] == "xid"
    # Two rails down: gpu03 has been failing since the first round, gpu04 only since the second.
    rail = [Problem("rail", "rail0", "down")]
    first, _ = decide({}, {"gpu03": NodeHealth("gpu03", rail)}, 0, 3, "2026-01-01T00:00:00")
    _, later = decide(
        first, {"gpu04": NodeHealth("gpu04", rail), "gpu03": NodeHealth("gpu03", rail)}, 1, 3, "2026-01-01T00:05:00"
    )
    assert [(a.node, a.kind) for a in later] == [("gpu03", "quarantine"), ("gpu04", "held")]


def _cert(path: Path, days: int) -> bytes:
    """A self-signed certificate valid for `days` from now, made by openssl as kubeadm's CA would sign one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    key = path.with_suffix(".key")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            str(days),
            "-subj",
            "/CN=t",
            "-keyout",
            str(key),
            "-out",
            str(path),
        ],
        check=True,
        capture_output=True,
    )
    return path.read_bytes()


def test_kubeadm_certificates_are_read_and_judged_by_the_days_they_have_left(tmp_path: Path) -> None:
    """Files under pki/ (etcd's too) and the client certificate a kubeconfig carries, each by its days left; one
    that does not parse is unreadable; a node with no pki/ has none to check (a worker before its join)."""
    from aisite.health.node import certificates
    from aisite.health.node import metrics as node_metrics

    root = tmp_path / "kubernetes"
    _cert(root / "pki" / "apiserver.crt", 10)
    _cert(root / "pki" / "etcd" / "server.crt", 400)
    client = _cert(tmp_path / "admin.crt", 5)
    (root / "admin.conf").write_text(
        "apiVersion: v1\nusers:\n- name: kubernetes-admin\n  user:\n"
        f"    client-certificate-data: {base64.b64encode(client).decode()}\n    client-key-data: eA==\n"
    )
    (root / "pki" / "front-proxy-client.crt").write_text("-----BEGIN CERTIFICATE-----\nnot one\n")
    found = certificates(root)
    assert found is not None and set(found) == {
        "pki/apiserver.crt",
        "pki/etcd/server.crt",
        "pki/front-proxy-client.crt",
        "admin.conf",
    }
    assert 9 < found["pki/apiserver.crt"] <= 10 and 399 < found["pki/etcd/server.crt"] <= 400  # type: ignore[operator]
    assert found["pki/front-proxy-client.crt"] is None
    h = judge(Facts(certificates=found), Expected("cp01", gpus=0, nvlink=False, rails=(), min_certificate_days=30))
    assert "certificate" in h.checked
    assert {(p.subject, p.message.split(" (")[0]) for p in h.problems} == {
        ("admin.conf", "expires in 5 days"),
        ("pki/apiserver.crt", "expires in 10 days"),
        ("pki/front-proxy-client.crt", "unreadable"),
    }
    later = certificates(root, now=time.time() + 20 * 86400)
    assert later is not None and later["pki/apiserver.crt"] is not None and later["pki/apiserver.crt"] < 0
    h = judge(Facts(certificates=later), Expected("cp01", gpus=0, nvlink=False, rails=()))
    assert ("pki/apiserver.crt", "expired 10 days ago") in {(p.subject, p.message) for p in h.problems}
    text = node_metrics(h, time.time(), found)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    series = {s.labels["certificate"]: s.value for s in families["aisite_certificate_expiry_days"].samples}
    assert set(series) == {"pki/apiserver.crt", "pki/etcd/server.crt", "admin.conf"}
    assert certificates(tmp_path / "no-kubeadm-here") is None
    assert judge(Facts(), Expected("w", gpus=0, nvlink=False, rails=())).checked == []


def test_renewal_due_after_the_health_checks_limit_is_warned(lab: dict[str, object]) -> None:
    from aisite.cautions import site_warnings
    from aisite.loader import parse_site
    from aisite.plan import build_plan

    lab["kubernetes"] = dict(lab["kubernetes"]) | {"certificate_renew_days": 20}  # type: ignore[arg-type]
    site = parse_site(lab)
    found = [str(w) for w in site_warnings(site, build_plan(site))]
    assert any(w.startswith("site.kubernetes.certificate_renew_days: 20 is not more than") for w in found), found
    lab["kubernetes"] = dict(lab["kubernetes"]) | {"certificate_renew_days": 90}  # type: ignore[arg-type]
    site = parse_site(lab)
    assert not any("certificate_renew_days" in str(w) for w in site_warnings(site, build_plan(site)))


def test_looking_never_acts_a_dry_run_writes_nothing_and_status_reads_the_last_pass(tmp_path: Path) -> None:
    """`aisite health --dry-run` decides as a pass would and leaves no record; `aisite status --health` shows the
    last recorded pass from the controller's files alone (the stack's nodes are never reached: the lab's are not
    up in this test), and exits 1 as health would when a node was unhealthy then."""
    import os
    import shutil

    from aisite.health.site import run_pass
    from aisite.loader import load_site
    from aisite.paths import health_dir, members_file
    from aisite.plan import build_plan
    from tests.conftest import ROOT, run_cli

    site = f"looktest-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
    stack = tmp_path / f"Pulumi.{site}.yaml"
    stack.write_text((ROOT / "stacks" / "Pulumi.lab.yaml").read_text().replace("name: lab\n", f"name: {site}\n"))
    plan = build_plan(load_site(stack))
    down = {"node": "gpu02", "problems": [{"check": "rail", "subject": "rail1", "message": "down (operstate DOWN)"}]}
    ok = {n.name: {"node": n.name, "problems": [], "checked": ["rail"], "skipped": []} for n in plan.nodes}
    folder, members = health_dir(site), members_file(site)
    try:
        dry = run_pass(plan, ok | {"gpu02": down}, folder, members, dry_run=True)
        assert [(a.node, a.kind) for a in dry.actions] == [("gpu02", "quarantine")]
        assert not folder.exists() and not members.exists() and dry.to_apply == []
        assert " ".join(run_cli("status", str(stack), "--health").stdout.split()).startswith("no health pass")
        run_pass(plan, ok | {"gpu02": down, "stor01": None}, folder, members)
        shown = run_cli("status", str(stack), "--health", "--json")
        assert shown.returncode == 1, shown.stderr
        doc = json.loads(shown.stdout)
        assert doc["quarantined"] == ["gpu02"] and doc["missing"] == ["stor01"]
        assert doc["nodes"]["gpu02"]["problems"][0]["message"] == "down (operstate DOWN)"
        assert doc["nodes"]["cp01"]["healthy"] is True and doc["checked_at"]
        table = run_cli("status", str(stack), "--health")
        assert "unhealthy" in table.stdout and "rail rail1: down" in " ".join(table.stdout.split())
        (folder / "checks.json").write_text('{"version": 1, "nodes": [')
        bad = run_cli("status", str(stack), "--health")
        assert bad.returncode == 1 and "checks.json" in bad.stderr and "Traceback" not in bad.stderr
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)


def test_health_says_first_that_it_reaches_every_node_and_may_quarantine() -> None:
    from tests.conftest import run_cli

    shown = " ".join(run_cli("health", "--help").stdout.split())
    assert "Reaches every node over SSH and may quarantine" in shown and "--dry-run" in shown
    assert "aisite status STACK --health" in shown
