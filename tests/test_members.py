"""One state per node and switch (aisite.members.store): provisioning, health and maintenance each hold a member out in
states of their own, every one of them reads what is out from the same record, and the budget they ask counts it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from aisite.health.judge import NodeHealth, Problem
from aisite.health.quarantine import NodeRecord, decide
from aisite.health.site import sync_members as health_sync
from aisite.maintenance.state import MemberState, RolloutState, advance, skip
from aisite.maintenance.state import sync_members as rollout_sync
from aisite.members import store
from aisite.members.budget import Budget, Member


def test_each_owner_holds_in_its_own_states_and_the_first_owner_names_the_state() -> None:
    m: dict[str, store.Member] = {}
    with pytest.raises(ValueError, match="health holds a member in one of quarantined, not 'maintenance'"):
        store.hold(m, "gpu01", "health", state="maintenance", pending="", at="t0")
    assert m == {}
    assert store.hold(m, "gpu01", "health", state="quarantined", pending="quarantine", at="t0", message="rail")
    assert not store.hold(m, "gpu01", "health", state="quarantined", pending="quarantine", at="t1", message="rail")
    assert store.hold(m, "gpu01", "maintenance", state="maintenance", pending="drain", at="t2")
    # A quarantined node in a rollout: the rollout's step is its state, the quarantine stays held beside it.
    assert m["gpu01"].state == "maintenance" and set(m["gpu01"].holds) == {"health", "maintenance"}
    assert store.out_of_service(m) == ["gpu01"] and store.out_of_service(m, but="maintenance") == ["gpu01"]
    assert store.release(m, "gpu01", "maintenance", at="t3", message="done")
    assert m["gpu01"].state == "quarantined" and m["gpu01"].holds["health"].since == "t0"
    assert store.out_of_service(m, but="health") == []
    assert store.release(m, "gpu01", "health", at="t4")
    assert not store.release(m, "gpu01", "health", at="t5")  # nothing held: nothing changes
    assert m["gpu01"].state == store.IN_SERVICE and store.out_of_service(m) == []
    assert m["gpu01"].history == [
        "t0 health: quarantined (quarantine pending): rail",
        "t2 maintenance: maintenance (drain pending)",
        "t3 maintenance: released -> quarantined: done",
        "t4 health: released -> in-service",
    ]


def test_the_record_is_kept_whole_bounded_and_a_file_that_does_not_fit_is_said(tmp_path: Path) -> None:
    path = tmp_path / "site" / "members.json"
    assert store.load(path) == {}
    with store.editing(path) as m:
        for i in range(store.HISTORY + 5):
            store.hold(m, "leaf01", "maintenance", state="maintenance", pending=f"step{i}", at=f"t{i}")
    again = store.load(path)
    assert again["leaf01"].holds["maintenance"].pending == f"step{store.HISTORY + 4}"
    assert len(again["leaf01"].history) == store.HISTORY and again["leaf01"].history[-1].startswith("t24 ")
    with pytest.raises(RuntimeError), store.editing(path) as m:  # a writer that fails saves nothing
        store.release(m, "leaf01", "maintenance", at="t99")
        raise RuntimeError
    assert store.held_out(path) == ["leaf01"]
    path.write_text(json.dumps({"gpu01": {"holds": {"health": {"state": "provisioning"}}}}))
    with pytest.raises(ValueError, match=r"members.json: gpu01: health cannot hold a member in 'provisioning'"):
        store.load(path)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a mapping"):
        store.load(path)


def _rollout() -> RolloutState:
    members = {n: MemberState(["kernel 6.1 -> 6.12"], True) for n in ("gpu01", "gpu02", "gpu03")}
    return RolloutState("s", "HEAD -> working tree", "t0", [["gpu01"], ["gpu02", "gpu03"]], members)


def test_a_rollout_holds_its_members_from_their_cordon_until_they_are_given_back(tmp_path: Path) -> None:
    path = tmp_path / "members.json"
    state = _rollout()
    rollout_sync(path, state, "t0")  # running, first wave: gpu01 is about to be cordoned; the others wait
    assert store.held_out(path) == ["gpu01"]
    assert store.load(path)["gpu01"].holds["maintenance"].pending == "cordon"
    state.status = "waiting"  # the budget said no: nothing of the wave was touched
    rollout_sync(path, state, "t1")
    assert store.held_out(path) == []
    state.status = "running"
    for step in ("cordon", "drain", "apply"):
        advance(state.members["gpu01"], "", step)
    advance(state.members["gpu01"], "the node did not come back", "reboot")
    state.status = "failed"
    rollout_sync(path, state, "t2")
    h = store.load(path)["gpu01"].holds["maintenance"]
    assert (h.state, h.pending, h.message) == ("maintenance-failed", "reboot", "the node did not come back")
    assert skip(state, "gpu01", "t3") == ""  # the operator's now: the rollout no longer holds it
    rollout_sync(path, state, "t3")
    assert store.held_out(path) == [] and store.load(path)["gpu01"].history[-1].endswith("skipped")
    state.wave, state.status = 1, "running"
    for n in ("gpu02", "gpu03"):
        for step in ("cordon", "drain", "apply", "reboot"):
            advance(state.members[n], "", step)
    rollout_sync(path, state, "t4")
    assert store.held_out(path) == ["gpu02", "gpu03"]
    assert {h.pending for n, h in store.held_by(store.load(path), "maintenance").items()} == {"verify"}
    for n in ("gpu02", "gpu03"):
        advance(state.members[n], "", "verify")
        advance(state.members[n], "", "uncordon")
    rollout_sync(path, state, "t5")
    assert store.held_out(path) == []


# ------------------------------------------------------------------ every owner through the one record
GPUS = [f"g{i}" for i in range(8)]


class OneRecord(RuleBasedStateMachine):
    """Health passes, rollout members taken and given back, and installs, in any order, with the one record the
    only thing they share: what health and maintenance hold never exceeds the budget (each counts what the others
    hold, installs included), and the record's health holds are health's quarantines (and releases not yet
    applied), nothing else."""

    def __init__(self) -> None:
        super().__init__()
        self.path = Path(self._tmp()) / "members.json"
        members = {n: Member(n, "gpu", 8, i % 3) for i, n in enumerate(GPUS)}
        members |= {"spine1": Member("spine1", "spine", 0, None), "spine2": Member("spine2", "spine", 0, None)}
        self.budget = Budget(24, True, members)
        self.health: dict[str, NodeRecord] = {}
        self.clock = 0

    @staticmethod
    def _tmp() -> str:
        import tempfile

        return tempfile.mkdtemp(prefix="aisite-lifecycle-")

    def _at(self) -> str:
        self.clock += 1
        return f"t{self.clock}"

    def _held(self, owner: store.Owner) -> list[str]:
        return sorted(store.held_by(store.load(self.path), owner))

    @rule(failing=st.lists(st.sampled_from(GPUS), max_size=4, unique=True), applied=st.booleans())
    def health_pass(self, failing: list[str], applied: bool) -> None:
        at = self._at()
        results = {n: NodeHealth(n, [Problem("rail", "rail0", "down")] if n in failing else []) for n in GPUS}
        elsewhere = store.held_out(self.path, but="health")
        self.health, _ = decide(self.health, results, 100, 2, at, budget=self.budget, elsewhere=elsewhere)
        if applied:  # health-apply.yml succeeded: nothing is pending any more
            for rec in self.health.values():
                rec.pending = ""
        health_sync(self.path, self.health, at)

    @rule(name=st.sampled_from([*GPUS, "spine1", "spine2"]))
    def take_for_maintenance(self, name: str) -> None:
        out = store.held_out(self.path)
        if name not in out and self.budget.admits(out, name):
            with store.editing(self.path) as m:
                store.hold(m, name, "maintenance", state="maintenance", pending="drain", at=self._at())

    @precondition(lambda self: bool(self._held("maintenance")))
    @rule(data=st.data())
    def give_back(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(self._held("maintenance")))
        with store.editing(self.path) as m:
            store.release(m, name, "maintenance", at=self._at())

    @rule(name=st.sampled_from(GPUS), ok=st.booleans())
    def install(self, name: str, ok: bool) -> None:
        """Provisioning asks no budget (day one installs everything); once it holds a node, the others count it."""
        with store.editing(self.path) as m:
            store.hold(m, name, "provision", state="provisioning", pending="install", at=self._at())

    @precondition(lambda self: bool(self._held("provision")))
    @rule(data=st.data(), ok=st.booleans())
    def installed(self, data: st.DataObject, ok: bool) -> None:
        name = data.draw(st.sampled_from(self._held("provision")))
        with store.editing(self.path) as m:
            if ok:
                store.release(m, name, "provision", at=self._at())
            else:
                store.hold(m, name, "provision", state="provision-failed", pending="provision", at=self._at())

    @invariant()
    def health_and_maintenance_keep_within_the_budget(self) -> None:
        members = store.load(self.path)
        asked = [n for n, m in members.items() if {"health", "maintenance"} & set(m.holds)]
        assert self.budget.problem(asked) is None, asked

    @invariant()
    def the_records_health_holds_are_the_quarantine(self) -> None:
        want = {n: "quarantine" if r.pending == "quarantine" else "" for n, r in self.health.items() if r.quarantined}
        want |= {n: "release" for n, r in self.health.items() if not r.quarantined and r.pending == "release"}
        held = store.held_by(store.load(self.path), "health")
        assert {n: h.pending for n, h in held.items()} == want
        assert {h.state for h in held.values()} <= {"quarantined"}


TestOneRecord = OneRecord.TestCase
TestOneRecord.settings = settings(
    max_examples=60, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def test_the_status_rows_name_every_member_and_its_first_owner() -> None:
    m: dict[str, store.Member] = {}
    store.hold(m, "gpu02", "health", state="quarantined", pending="", at="t0", message="xid")
    store.hold(m, "gpu02", "provision", state="provisioning", pending="install", at="t1")
    rows: list[dict[str, Any]] = store.rows(["gpu01", "gpu02"], m)
    assert [(r["name"], r["state"], r["by"], r["pending"]) for r in rows] == [
        ("gpu01", "in-service", "", ""),
        ("gpu02", "provisioning", "provision", "install"),
    ]
    assert set(rows[1]["holds"]) == {"health", "provision"}


def test_a_quarantine_an_older_aisite_recorded_only_in_healths_file_moves_into_the_members_once() -> None:
    """Before members.json, health kept its quarantines in its own state.json alone: the first reader of the
    budget moves them into members.json as health's holds (said in each one's history), once each however both
    files say it; a garbled file is an error with its path, not a guess."""
    import shutil

    from aisite.paths import health_state_file, members_file, site_dir

    site = "t-older-health"
    try:
        older = health_state_file(site)
        older.parent.mkdir(parents=True)
        older.write_text(
            json.dumps(
                {
                    "gpu01": {
                        "quarantined": True,
                        "clean": 0,
                        "reason": "rail: rail1 down",
                        "since": "t0",
                        "pending": "",
                    },
                    "gpu02": {"quarantined": False, "clean": 3, "reason": "", "since": "", "pending": ""},
                }
            )
        )
        assert not members_file(site).exists()
        assert store.site_held_out(site) == ["gpu01"]
        assert store.site_held_out(site, but="maintenance") == ["gpu01"]
        assert store.site_held_out(site, but="health") == []
        moved = store.load(members_file(site))
        assert list(moved) == ["gpu01"] and moved["gpu01"].holds["health"].message == "rail: rail1 down"
        assert (
            moved["gpu01"].holds["health"].since == "t0"
            and "moved from health's state.json" in moved["gpu01"].history[0]
        )
        assert store.migrate_older(site) == []  # once
        assert store.load(members_file(site)) == moved
        # Another owner's file written since (a rollout's member): both counted, gpu01 once.
        with store.editing(members_file(site)) as members:
            store.hold(members, "cp01", "maintenance", state="maintenance", pending="drain", at="t1")
            store.hold(members, "gpu01", "maintenance", state="maintenance", pending="drain", at="t1")
        assert store.site_held_out(site) == ["cp01", "gpu01"]
        assert store.site_held_out(site, but="maintenance") == ["gpu01"]
        older.write_text(json.dumps({"gpu01": {"quarantined": "yes"}}))
        with pytest.raises(store.RecordError, match=r"state\.json: gpu01: not a health record"):
            store.site_held_out(site)
    finally:
        shutil.rmtree(site_dir(site), ignore_errors=True)
