"""Acceptance offline: the bisection (property-tested), verdicts against floors and the best of a kind, and the
attribution of failed checks to the node, rail or path that explains them. The lab runs the stages for real
(tests/test_lab_integration.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aisite.accept.bisect import isolate
from aisite.accept.lab import LabAcceptance, Options
from aisite.accept.report import Check, Report, heatmap, judge
from aisite.loader import load_site
from aisite.plan import Plan, build_plan


@given(st.integers(1, 40).flatmap(lambda n: st.tuples(st.just(n), st.sets(st.integers(0, n - 1), min_size=1))))
def test_bisection_finds_exactly_the_members_that_fail_alone(case: tuple[int, set[int]]) -> None:
    n, bad = case
    seen: list[Sequence[int]] = []

    def test(g: Sequence[int]) -> bool:
        seen.append(g)
        return not set(g) & bad

    found = isolate(list(range(n)), test)
    assert set(found.members) == bad and not found.between
    assert found.tests == len(seen) <= 2 * len(bad) * max(1, n.bit_length())


@given(
    st.integers(2, 40).flatmap(lambda n: st.tuples(st.just(n), st.sets(st.integers(0, n - 1), min_size=2, max_size=2)))
)
def test_bisection_names_a_fault_between_halves_that_pass_apart(case: tuple[int, set[int]]) -> None:
    """A path fault: the group fails only when both ends are in it; no member is blamed."""
    n, pair = case
    found = isolate(list(range(n)), lambda g: not pair <= set(g))
    assert not found.members
    ((left, right),) = found.between
    assert len(pair & set(left)) == 1 and len(pair & set(right)) == 1


def test_a_bandwidth_fails_below_its_floor_or_a_share_of_the_best() -> None:
    assert judge(9.0, 0.5, 10.0, 0.5, 0.8) == "pass"
    assert judge(7.0, 0.5, 10.0, 0.5, 0.8) == "degraded"
    assert judge(4.0, 0.5, 10.0, 0.5, 0.8) == "fail"
    assert judge(0.4, 0.5, 0.45, 0.5, 0.8) == "fail"  # the floor, even when it is the best
    assert judge(float("nan"), None, 10.0, 0.5, 0.8) == "fail"


@pytest.fixture(scope="module")
def lab() -> Plan:
    return build_plan(load_site("lab"))


def _acceptance(plan: Plan, checks: list[Check]) -> LabAcceptance:
    run = LabAcceptance(plan, Options(), lambda _: None)
    run.report.checks = checks
    return run


def _faults(plan: Plan) -> list[Check]:
    """What the lab's two injected faults leave: gpu01's rail0 MTU, gpu02's rail1 slowed on its way out."""

    def ok(stage: str, subject: str, node: str, rail: int, peer: str | None = None) -> Check:
        return Check(stage, subject, "iperf3-gbps", 5.0, ">= 0.5", "pass", node=node, rail=rail, peer=peer)

    return [
        Check("node", "gpu01:rail0", "mtu", "1500", "9000", "fail", "MTU 1500, the plan's 9000", node="gpu01", rail=0),
        Check("node", "gpu01:rail1", "mtu", "9000", "9000", "pass", node="gpu01", rail=1),
        Check("link", "gpu02:rail1>leaf02", "iperf3-tx-gbps", 0.09, ">= 0.5", "fail", node="gpu02", rail=1),
        ok("link", "gpu02:rail0>leaf01", "gpu02", 0),
        Check("link", "gpu01:rail0>leaf01", "iperf3-tx-gbps", 2.0, ">= 0.5", "fail", node="gpu01", rail=0),
        Check(
            "pair", "gpu02:rail1>gpu01:rail1", "iperf3-gbps", 0.09, ">= 0.5", "fail", node="gpu02", rail=1, peer="gpu01"
        ),
        ok("pair", "gpu01:rail1>gpu02:rail1", "gpu01", 1, "gpu02"),
        Check(
            "group",
            "unit0/rail1[gpu01,gpu02]",
            "allreduce-unit-busbw",
            0.01,
            ">= 0.02",
            "fail",
            rail=1,
            members=("gpu01", "gpu02"),
        ),
    ]


def test_findings_name_the_faulty_node_and_rail_and_nothing_else(lab: Plan) -> None:
    run = _acceptance(lab, _faults(lab))
    run.isolated["unit0/rail1[gpu01,gpu02]"] = (["gpu02"], [])
    run.attribute()
    got = {(f.node, f.interface, f.peer, f.verdict) for f in run.report.findings}
    assert got == {("gpu01", "rail0", None, "fail"), ("gpu02", "rail1", None, "fail")}
    by_node = {f.node: f for f in run.report.findings}
    assert "mtu" in by_node["gpu01"].what and "gpu01:rail0>leaf01" in by_node["gpu01"].evidence
    assert set(by_node["gpu02"].evidence) == {
        "gpu02:rail1>leaf02",
        "gpu02:rail1>gpu01:rail1",
        "unit0/rail1[gpu01,gpu02]",
    }
    assert run.report.node_verdicts() == {"gpu01": "fail", "gpu02": "fail"}


def test_a_slow_pair_no_link_explains_is_named_as_its_path(lab: Plan) -> None:
    checks = [c for c in _faults(lab) if c.stage == "pair"]
    run = _acceptance(lab, checks)
    run.attribute()
    ((f,),) = [run.report.findings]
    assert (f.node, f.rail, f.peer) == ("gpu02", 1, "gpu01") and f.what.startswith("path gpu02:rail1>gpu01:rail1")


def test_the_report_is_json_and_the_heat_map_a_png(lab: Plan, tmp_path) -> None:  # type: ignore[no-untyped-def]
    run = _acceptance(lab, _faults(lab))
    run.attribute()
    report: Report = run.report
    png = heatmap(report, ["gpu01", "gpu02"], [0, 1], tmp_path / "h.png")
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads(json.dumps(report.doc()))
    assert doc["verdict"] == "fail" and {f["node"] for f in doc["findings"]} == {"gpu01", "gpu02"}
