"""Issue 64: foreign JSON bounded everywhere. A 30 KB document nested 5,000 levels raised RecursionError, which the
`except ValueError` handlers missed: a hostile first monitor stopped `aisite health` before its quarantine pass,
and the same input crashed promote's evaluation and checkpoint listing, acceptance's node status and bench
collection (the model server's 400 is in test_serving). One parser (aisite/payloads/foreign_json.py) reads every
such document, bounded in size and depth; its refusal is that source's own error and the pass goes on."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aisite import foreign
from aisite.loader import load_site
from aisite.payloads.foreign_json import MAX_DEPTH, depth
from aisite.plan import build_plan

DEEP = '{"a":' * 5000 + "1" + "}" * 5000  # the reproducer: 30 KB

_numbers = st.integers(-(10**12), 10**12) | st.floats(allow_nan=False, allow_infinity=False)
_leaves = st.none() | st.booleans() | _numbers | st.text()
_docs = st.recursive(
    _leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4), max_leaves=30
)


def _depth_of(doc: Any) -> int:
    if isinstance(doc, list):
        return 1 + max(map(_depth_of, doc), default=0)
    if isinstance(doc, dict):
        return 1 + max(map(_depth_of, doc.values()), default=0)
    return 0


@given(_docs)
def test_what_json_reads_the_bounded_reader_reads_the_same_and_measures_its_depth(doc: Any) -> None:
    text = json.dumps(doc)
    assert foreign.loads(text, len(text.encode())) == doc
    assert depth(text) == _depth_of(doc)


@given(st.text(alphabet='[]{}"\\:,a1 ', max_size=300))
def test_any_text_is_read_or_refused_as_a_value_error_never_another(text: str) -> None:
    with contextlib.suppress(foreign.ForeignJSONError):
        foreign.loads(text, 1000, max_depth=5)


def test_too_large_too_deep_or_not_json_is_refused_saying_which() -> None:
    with pytest.raises(foreign.ForeignJSONError, match=f"nested 5000 levels, deeper than {MAX_DEPTH}"):
        foreign.loads(DEEP, 1 << 20)
    with pytest.raises(foreign.ForeignJSONError, match="over the 100 read"):
        foreign.loads("x" * 101, 100)
    with pytest.raises(foreign.ForeignJSONError, match="over the 100 read"):
        foreign.loads("é" * 60, 100)  # 120 bytes in UTF-8
    for bad, said in (("NaN", "NaN is not a JSON number"), (b"\xff", "not UTF-8"), ("[1,", "not JSON")):
        with pytest.raises(foreign.ForeignJSONError, match=said):
            foreign.loads(bad, 100)
    assert foreign.loads('["[[[[", {"k": "}}}"}]', 100) == ["[[[[", {"k": "}}}"}]  # brackets in strings
    assert foreign.loads("[" * MAX_DEPTH + "]" * MAX_DEPTH, 1000) is not None


def test_a_deep_node_status_is_that_nodes_problem_and_the_quarantine_pass_goes_on(tmp_path: Path) -> None:
    """`aisite health`: one node's status nested 5,000 levels (as the status playbook returns it: text) is its
    own unreadable status; another node's real failure is still decided in the same pass."""
    from aisite.health.site import run_pass

    plan = build_plan(load_site("lab"))
    gpus = [n.name for n in plan.by_role("gpu")]
    records: dict[str, Any] = {n.name: json.dumps({"node": n.name, "problems": []}) for n in plan.nodes}
    records[gpus[0]] = DEEP
    failing = {"check": "xid", "subject": "0000:3b:00.0", "message": "XID 79"}
    records[gpus[1]] = json.dumps({"node": gpus[1], "problems": [failing]})
    records[gpus[2]] = 3 << 20  # over the bound: the playbook returned its size
    hp = run_pass(plan, records, tmp_path / "health", tmp_path / "members.json")
    assert [p.message for p in hp.results[gpus[0]].problems] == [
        "unreadable: status.json: nested 5000 levels, deeper than 64"
    ]
    assert hp.results[gpus[2]].problems[0].message == f"unreadable: status.json: {3 << 20} bytes, over the 2097152 read"
    # The real failure ranks gravest and takes the lab's cap of one; the unreadable nodes are held, said.
    assert hp.limit == 1 and {a.node for a in hp.actions if a.kind == "quarantine"} == {gpus[1]}, hp.actions
    assert {a.node for a in hp.actions if a.kind == "held"} == {gpus[0], gpus[2]}


def test_a_deep_pull_record_is_that_nodes_failing_state() -> None:
    from aisite.reconcile.nodes import convergence

    rows = convergence(["gpu01", "gpu02"], {"gpu01": DEEP, "gpu02": json.dumps({"status": "applied"})}, None, 0.0)
    assert (rows[0].state, rows[0].message) == (
        "failing",
        "its record is unreadable: state.json: nested 5000 levels, deeper than 64",
    )
    assert rows[1].state == "failing" and "no commit" in rows[1].message  # the next node is still judged


def test_a_deep_evaluation_or_checkpoint_listing_is_the_sources_error() -> None:
    from aisite.serving.cluster import parse_listing
    from aisite.serving.policy import PolicyInputError, parse_evaluation

    with pytest.raises(PolicyInputError, match="the evaluation of v2: its result line: nested 5000 levels"):
        parse_evaluation("loading\n" + DEEP + "\n", "the evaluation of v2")
    with pytest.raises(PolicyInputError, match="the listing: its result line: nested 5000 levels"):
        parse_listing(DEEP, "the listing")


def test_a_deep_bench_result_line_is_a_collect_error() -> None:
    from aisite.bench.results import SCHEMA, CollectError, collect

    line = '{"schema": "' + SCHEMA + '", "x":' + "[" * 5000 + "]" * 5000 + "}"
    with pytest.raises(CollectError, match=r"gpu01:2: not a valid .* nested 5001 levels"):
        collect("warming up\n" + line, "gpu01")


def test_a_deep_node_status_in_acceptance_is_that_nodes_failed_check() -> None:
    from aisite.accept.site import SiteRunner
    from aisite.accept.stages import Options

    plan = build_plan(load_site("h100pod"))

    class Deep:
        def run(self, objects: list[dict[str, Any]], result_pod: str, timeout: float) -> str:
            return DEEP + "\n=====aisite-accept=====\n"

    node = plan.by_role("gpu")[0]
    (check,) = SiteRunner(plan, Options(), Deep()).node(node)
    assert (check.verdict, check.detail) == ("fail", "the node's check printed no status")
