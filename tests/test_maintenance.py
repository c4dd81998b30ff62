"""The site's disruption budget, the changes that need a member out of service, and their waves (issue 37)."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from aisite.diff import markdown, site_diff
from aisite.health.judge import NodeHealth, Problem
from aisite.health.quarantine import decide
from aisite.loader import parse_site
from aisite.maintenance.rollout import PHASES, kubernetes_refusals, rollout, waves
from aisite.members import store
from aisite.members.budget import Budget, Member, site_budget
from aisite.plan import Plan, build_plan
from aisite.playbooks import LAYERS
from tests.conftest import stack_data


def _plan(data: dict[str, Any]) -> Plan:
    return build_plan(parse_site(data))


@pytest.fixture(scope="module")
def h100pod() -> dict[str, Any]:
    return stack_data("h100pod")


def test_the_budget_is_the_sites_share_of_its_gpus_never_less_than_a_node(h100pod: dict[str, Any]) -> None:
    plan = _plan(h100pod)
    gpus = sum(n.gpu.count for n in plan.nodes if n.gpu)
    assert gpus == 256 and site_budget(plan).max_gpus == 32  # 12.5 % by default
    data = copy.deepcopy(h100pod) | {"maintenance": {"max_unavailable_fraction": 0.001}}
    assert site_budget(_plan(data)).max_gpus == 8  # one DGX: a node can always go alone
    data["maintenance"] = {"max_unavailable_gpus": 16, "max_unavailable_fraction": 0.5}
    assert site_budget(_plan(data)).max_gpus == 16  # the number wins over the share


def test_the_budget_says_why_a_set_is_over_it() -> None:
    members = {
        "cp1": Member("cp1", "control-plane", 0, None),
        "cp2": Member("cp2", "control-plane", 0, None),
        "g1": Member("g1", "gpu", 8, 0),
        "g2": Member("g2", "gpu", 8, 0),
        "g3": Member("g3", "gpu", 8, 1),
        "s1": Member("s1", "spine", 0, None),
        "s2": Member("s2", "spine", 0, None),
        "l1": Member("l1", "leaf", 0, None),
    }
    b = Budget(16, True, members)
    assert b.problem(["g1", "g3", "s1", "l1", "cp1"]) is None
    assert b.problem(["g1", "g2", "g3"]) == "24 GPUs out of service, over the site's budget of 16"
    assert b.problem(["cp1", "cp2"]) == "2 control-plane members out at once (cp1, cp2); one at a time"
    assert b.problem(["s1", "s2"]) == "2 spine members out at once (s1, s2); one at a time"
    assert b.problem(["g1", "g2"]) == "g1 and g2 are both of scalable unit 0 (one_node_per_unit)"
    assert Budget(16, False, members).problem(["g1", "g2"]) is None
    assert b.problem(["g1", "gone-since"]) is None  # a stale record of a node the site no longer has


@st.composite
def _members(draw: st.DrawFn) -> dict[str, Member]:
    out: dict[str, Member] = {}
    for i in range(draw(st.integers(0, 3))):
        out[f"cp{i}"] = Member(f"cp{i}", "control-plane", 0, None)
    for i in range(draw(st.integers(1, 24))):
        out[f"g{i:02d}"] = Member(f"g{i:02d}", "gpu", draw(st.sampled_from([4, 8])), draw(st.integers(0, 3)))
    for role in ("spine", "leaf"):
        for i in range(draw(st.integers(0, 3))):
            out[f"{role}{i}"] = Member(f"{role}{i}", role, 0, None)
    return out


@given(data=st.data())
@settings(max_examples=200, deadline=None)
def test_no_wave_beside_what_is_out_exceeds_the_budget(data: st.DataObject) -> None:
    members = data.draw(_members())
    budget = Budget(data.draw(st.integers(0, 64)), data.draw(st.booleans()), members)
    # What is out already (quarantined) is a set the budget admitted, one member at a time.
    out: list[str] = []
    for name in data.draw(st.lists(st.sampled_from(sorted(members)), max_size=6, unique=True)):
        if budget.admits(out, name):
            out.append(name)
    rest = sorted(set(members) - set(out))
    changed = data.draw(st.lists(st.sampled_from(rest), unique=True)) if rest else []
    ordered = sorted(changed, key=lambda n: (PHASES.index(members[n].role), n))
    canary = data.draw(st.integers(1, 3))
    planned, blocked = waves(budget, ordered, out, canary)
    rolled = [n for w in planned for n in w]
    assert sorted(rolled + list(blocked)) == sorted(changed)  # each member once: in a wave or blocked
    assert len(rolled) == len(set(rolled))
    for wave in planned:
        assert budget.problem([*out, *wave]) is None, wave
        assert len({members[n].role for n in wave}) == 1  # a wave never mixes phases
    gpu_waves = [w for w in planned if members[w[0]].role == "gpu"]
    assert not gpu_waves or len(gpu_waves[0]) <= canary
    for name, why in blocked.items():
        assert budget.problem([*out, name]) is not None, why  # blocked only when it cannot go even alone
    # Phases roll in order.
    phases = [PHASES.index(members[w[0]].role) for w in planned]
    assert phases == sorted(phases)


class QuarantineAndMaintenance(RuleBasedStateMachine):
    """Health quarantines and releases, maintenance takes members out and gives them back, in any order: what is
    out of service together never exceeds the one budget."""

    def __init__(self) -> None:
        super().__init__()
        self.members = {f"g{i}": Member(f"g{i}", "gpu", 8, i % 3) for i in range(9)}
        self.members |= {"spine1": Member("spine1", "spine", 0, None), "spine2": Member("spine2", "spine", 0, None)}
        self.budget = Budget(24, True, self.members)
        self.state: dict[str, Any] = {}
        self.maintenance: list[str] = []
        self.clock = 0

    def _quarantined(self) -> list[str]:
        return [n for n, r in self.state.items() if r.quarantined]

    @rule(nodes=st.lists(st.sampled_from([f"g{i}" for i in range(9)]), max_size=4, unique=True))
    def health_pass(self, nodes: list[str]) -> None:
        """A pass where `nodes` fail and every other node is clean."""
        self.clock += 1
        results = {
            n: NodeHealth(n, [Problem("rail", "rail0", "down")] if n in nodes else [])
            for n in self.members
            if n.startswith("g") and n not in self.maintenance
        }
        self.state, _ = decide(
            self.state, results, 100, 2, str(self.clock), budget=self.budget, elsewhere=self.maintenance
        )

    @rule(name=st.sampled_from(["g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8", "spine1", "spine2"]))
    def take_for_maintenance(self, name: str) -> None:
        out = [*self.maintenance, *self._quarantined()]
        if name not in out and self.budget.admits(out, name):
            self.maintenance.append(name)

    @precondition(lambda self: bool(self.maintenance))
    @rule(data=st.data())
    def give_back(self, data: st.DataObject) -> None:
        self.maintenance.remove(data.draw(st.sampled_from(self.maintenance)))

    @invariant()
    def within_the_budget(self) -> None:
        assert self.budget.problem([*self.maintenance, *self._quarantined()]) is None


TestQuarantineAndMaintenance = QuarantineAndMaintenance.TestCase
TestQuarantineAndMaintenance.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def test_a_kubernetes_minor_bump_rolls_the_control_plane_first_then_gpu_nodes_in_waves(
    h100pod: dict[str, Any],
) -> None:
    old_data = copy.deepcopy(h100pod)
    old_data.setdefault("kubernetes", {})["version"] = "1.34.3"
    old, new = _plan(old_data), _plan(h100pod)
    r = rollout(old, new)
    assert r.refused == [] and len(r.disruptions) == len(new.nodes) and not r.blocked
    assert all(d.reasons == ("Kubernetes 1.34.3 -> 1.35.6",) and not d.reboot for d in r.disruptions.values())
    assert r.waves[:3] == [["cp01"], ["cp02"], ["cp03"]]  # kubeadm upgrade apply on the first, then the others
    gpu = [w for w in r.waves if w[0].startswith("dgx")]
    assert gpu[0] == ["dgx001"]  # the canary alone
    assert all(len(w) * 8 <= 32 for w in gpu) and sum(map(len, gpu)) == 32
    text = markdown(site_diff(old, new, LAYERS), "t")
    assert "**Out of service** (39 members, 0 rebooted; budget 32 GPUs)" in text
    assert "- wave 1: cp01" in text and "- wave 9: dgx002, dgx003, dgx004, dgx005" in text


def test_quarantined_nodes_count_against_the_budget_and_are_changed_while_out(h100pod: dict[str, Any]) -> None:
    data = copy.deepcopy(h100pod)
    data["gpu_nodes"][0]["driver_branch"] = 570
    old, new = _plan(data), _plan(h100pod)
    r = rollout(old, new, ["dgx001", "dgx002", "dgx003"])
    assert all(d.reboot and d.reasons == ("NVIDIA driver R570 -> R590",) for d in r.disruptions.values())
    assert r.while_out == ["dgx001", "dgx002", "dgx003"]
    assert all(len(w) == 1 for w in r.waves)  # 24 of 32 GPUs are out: one DGX at a time
    full = rollout(old, new, ["dgx001", "dgx002", "dgx003", "dgx004"])
    assert full.waves == [] and len(full.blocked) == 28
    assert full.blocked["dgx005"] == "40 GPUs out of service, over the site's budget of 32"
    assert rollout(old, new).to_dict()["max_unavailable_gpus"] == 32


def test_a_rail_nic_firmware_change_reboots_every_node_it_reaches_in_waves(h100pod: dict[str, Any]) -> None:
    """SR-IOV turned on for the DGX model: every DGX goes out for it and reboots (the NIC takes its settings at the
    next boot), canary first, within the budget; the hosts layer that sets them is held back until then."""
    from aisite.maintenance.hold import hold_back

    data = copy.deepcopy(h100pod)
    data["gpu_nodes"][0]["firmware"] = {"nic": {"sriov": True, "num_vfs": 8}}
    old, new = _plan(h100pod), _plan(data)
    r = rollout(old, new)
    gpus = sorted(n.name for n in new.by_role("gpu"))
    assert sorted(r.disruptions) == gpus
    assert all(
        d.reboot and d.reasons == ("rail NIC firmware: NUM_OF_VFS - -> 8, SRIOV_EN - -> 1",)
        for d in r.disruptions.values()
    )
    assert r.waves[0] == [gpus[0]] and all(len(w) * 8 <= 32 for w in r.waves)
    assert sorted(hold_back(old, new, None).members) == gpus
    assert rollout(new, new).empty  # the same settings again: nothing out


def test_one_node_per_unit_spreads_every_wave_over_the_units(h100pod: dict[str, Any]) -> None:
    data = copy.deepcopy(h100pod)
    data["maintenance"] = {"one_node_per_unit": True, "max_unavailable_gpus": 64}
    new = _plan(data)
    data["gpu_nodes"][0]["driver_branch"] = 570
    r = rollout(_plan(data), new)
    units = {n.name: n.scalable_unit for n in new.nodes}
    for wave in r.waves[1:]:
        assert len({units[n] for n in wave}) == len(wave), wave


def test_switch_os_and_fabric_settings_roll_one_switch_per_tier(h100pod: dict[str, Any]) -> None:
    data = copy.deepcopy(h100pod)
    for tier in ("leaves", "spines"):
        data["switches"][tier]["os_version"] = "5.14"
    data["fabric"]["roce"] = {"ecn_max_kb": 2000}
    r = rollout(_plan(data), _plan(h100pod))
    spines = [n for n, d in r.disruptions.items() if n.startswith("spine")]
    assert r.disruptions[spines[0]].reasons == ("cumulus 5.14 -> 5.15", "RoCE QoS")
    assert r.disruptions[spines[0]].reboot
    assert all(len(w) == 1 for w in r.waves)
    assert [w[0] for w in r.waves][:5] == ["spine01", "spine02", "spine03", "spine04", "leaf01"]
    assert not any(n.startswith(("mgmt", "oob", "dgx")) for n in r.disruptions)


def test_a_new_member_rolls_with_nothing(h100pod: dict[str, Any]) -> None:
    data = copy.deepcopy(h100pod)
    data["gpu_nodes"][0]["count"] -= 1
    data["kubernetes"]["gpu_overcommit"] = True  # the tenants' quotas were sized for 32 nodes
    old = _plan(data)
    data["gpu_nodes"][0]["count"] += 1
    data.setdefault("kubernetes", {})["version"] = "1.35.7"
    r = rollout(old, _plan(data))
    assert sorted(r.disruptions) == sorted(n.name for n in old.nodes) and "dgx032" not in r.disruptions


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ("1.33.4", "1.35.6", "skips a minor; kubeadm upgrades one minor at a time"),
        ("1.35.6", "1.34.9", "a downgrade; kubeadm upgrades only forward"),
        ("1.35.6", "1.35.2", "a downgrade; kubeadm upgrades only forward"),
    ],
)
def test_kubernetes_skips_and_downgrades_are_refused(old: str, new: str, why: str) -> None:
    assert kubernetes_refusals(old, new) == [f"kubernetes.version {old} -> {new}: {why}"]
    assert kubernetes_refusals(old, old) == []


def test_diff_json_carries_the_waves(lab: dict[str, Any]) -> None:
    old = _plan(lab)
    lab["kubernetes"]["version"] = "1.34.3"
    d = site_diff(old, _plan(lab), LAYERS).to_dict()
    m = d["maintenance"]
    assert m["refused"] == ["kubernetes.version 1.35.6 -> 1.34.3: a downgrade; kubeadm upgrades only forward"]
    assert m["waves"][0] == ["cp01"] and json.dumps(d)


def test_a_quarantine_not_applied_on_the_cluster_is_applied_again(lab: dict[str, Any], tmp_path: Path) -> None:
    """The issue's bug: the decision was recorded before health-apply ran, so a quarantine whose apply was skipped
    (no API server) or failed was never applied again."""
    from aisite.health.site import confirm_applied, load_state, run_pass

    plan = _plan(lab)
    members = tmp_path / "members.json"
    ok = {n.name: {"node": n.name, "problems": []} for n in plan.nodes}
    down = {"node": "gpu02", "problems": [{"check": "rail", "subject": "rail1", "message": "down"}]}
    first = run_pass(plan, ok | {"gpu02": down}, tmp_path, members)
    assert [(i["node"], i["kind"]) for i in first.to_apply] == [("gpu02", "quarantine")]

    def held() -> tuple[str, str]:  # gpu02's one state: what and what it waits on
        h = store.load(members)["gpu02"].holds.get("health")
        return (h.state, h.pending) if h else ("in-service", "")

    assert held() == ("quarantined", "quarantine")
    again = run_pass(plan, ok | {"gpu02": down}, tmp_path, members)  # the apply did not happen: still to apply
    assert again.actions == [] and [(i["node"], i["kind"]) for i in again.to_apply] == [("gpu02", "quarantine")]
    confirm_applied(tmp_path, ["gpu02"], members, "t")
    assert load_state(tmp_path / "state.json")["gpu02"].pending == ""
    assert held() == ("quarantined", "")
    assert run_pass(plan, ok | {"gpu02": down}, tmp_path, members).to_apply == []
    assert plan.health is not None
    for _ in range(plan.health.recover_after):
        last = run_pass(plan, ok, tmp_path, members)
    assert [(i["node"], i["kind"]) for i in last.to_apply] == [("gpu02", "release")]
    assert [(i["node"], i["kind"]) for i in run_pass(plan, ok, tmp_path, members).to_apply] == [("gpu02", "release")]
    # Released on the record, but still tainted on the cluster until the release is applied: still out.
    assert held() == ("quarantined", "release") and store.held_out(members) == ["gpu02"]
    confirm_applied(tmp_path, ["gpu02"], members, "t")
    assert held() == ("in-service", "") and store.held_out(members) == []


def test_health_holds_a_quarantine_the_sites_budget_cannot_take(lab: dict[str, Any], tmp_path: Path) -> None:
    from aisite.health.site import run_pass

    lab["health"] = {"max_quarantined": 5}
    lab["maintenance"] = {"max_unavailable_gpus": 1}
    plan = _plan(lab)
    bad = {
        n.name: {"node": n.name, "problems": [{"check": "rail", "subject": "rail0", "message": "down"}]}
        for n in plan.nodes
        if n.gpu
    }
    hp = run_pass(plan, bad, tmp_path, tmp_path / "members.json")
    kinds = sorted(a.kind for a in hp.actions)
    assert len(bad) > 1 and kinds == ["held"] * (len(bad) - 1) + ["quarantine"], hp.actions
    held = next(a for a in hp.actions if a.kind == "held")
    assert held.reason.startswith("site's disruption budget: 2 GPUs out of service, over the site's budget of 1")


def test_the_diff_command_prints_the_waves_and_counts_quarantined_nodes(tmp_path: Path) -> None:
    """`aisite diff` on a Kubernetes patch bump of a lab-like site: every node out in waves, the control plane
    first; a node `aisite health` holds quarantined on this machine is out already and changed while out."""
    import os

    from aisite.paths import members_file
    from tests.conftest import ROOT, make_site_repo, run_cli

    site = f"mainttest-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
    text = (ROOT / "stacks" / "Pulumi.lab.yaml").read_text().replace("name: lab\n", f"name: {site}\n")
    repo = make_site_repo(tmp_path / "site", {f"Pulumi.{site}.yaml": text})
    stack = repo / "stacks" / f"Pulumi.{site}.yaml"
    assert "      version: 1.35.6\n" in text
    stack.write_text(text.replace("      version: 1.35.6\n", "      version: 1.35.7\n", 1))
    path = members_file(site)
    try:
        with store.editing(path) as members:  # as `aisite health` leaves a quarantine the cluster took
            store.hold(members, "gpu02", "health", state="quarantined", pending="", at="t0", message="rail")
        doc = json.loads(run_cli("diff", str(stack), "--json").stdout)["maintenance"]
        assert doc["out_of_service"] == ["gpu02"] and doc["changed_while_out"] == ["gpu02"]
        assert doc["waves"] == [["cp01"], ["stor01"], ["stor02"], ["stor03"]]
        # The lab's budget is one GPU (its GPU nodes have one each): the quarantined node holds it.
        assert doc["max_unavailable_gpus"] == 1
        assert doc["blocked"] == {n: "2 GPUs out of service, over the site's budget of 1" for n in ("gpu01", "infer01")}
        printed = run_cli("diff", str(stack)).stdout
        assert "1 already out: gpu02" in printed and "- wave 1: cp01" in printed
        assert "- changed while out of service: gpu02" in printed and "- blocked: gpu01: 2 GPUs" in printed
        # `aisite status`: the same one state, every member of the site, the quarantined node's hold and its GPU.
        status = json.loads(run_cli("status", str(stack), "--json").stdout)
        states = {m["name"]: (m["state"], m["by"], m["message"]) for m in status["members"]}
        assert states == {n: ("in-service", "", "") for n in states} | {"gpu02": ("quarantined", "health", "rail")}
        assert len(states) == 11 and status["gpus_out"] == 1 and status["not_in_site"] == []
        # The table's title wraps where it is wider than the table (the site's name holds the xdist worker's).
        shown = " ".join(run_cli("status", str(stack)).stdout.split())
        assert "10 of 11 nodes and switches in service, 1 GPUs out" in shown and "quarantined" in shown
        path.write_text('{"gpu02": {"holds": {"health": {"state": "gone fishing"}}}}')  # not as this version writes
        bad = run_cli("status", str(stack))
        assert bad.returncode == 1 and "health cannot hold a member in 'gone fishing'" in bad.stderr, bad.stderr
        assert "Traceback" not in bad.stderr and run_cli("diff", str(stack)).returncode == 1
    finally:
        import shutil

        shutil.rmtree(path.parent, ignore_errors=True)


@pytest.mark.parametrize(
    ("copy_to", "ok"),
    [
        ("/mnt/backups/etcd", True),
        ("backup01.dc1.example:/srv/etcd", True),
        ("/srv/etcd; rm -rf /", False),  # never a shell word
        ("-e ssh evil:/x", False),  # never an rsync option
        ("host:relative/path", False),
        ("/srv/$(id)", False),
    ],
)
def test_etcd_backups_copy_only_to_a_plain_path_or_host_path(lab: dict[str, Any], copy_to: str, ok: bool) -> None:
    from aisite.errors import SiteError

    lab["kubernetes"]["etcd_backup"] = {"copy_to": copy_to, "keep": 7, "schedule": "daily"}
    if ok:
        assert _plan(lab).kubernetes.etcd_backup.copy_to == copy_to
    else:
        with pytest.raises(SiteError, match=r"site\.kubernetes\.etcd_backup\.copy_to"):
            _plan(lab)


# The rollout's runner against a scripted cluster: what kubeadm, a drain and a reboot would do is a step the script
# answers; the budget, the order of steps, failures, pauses and resumption are the runner's.


class ScriptedCluster:
    def __init__(self, budget: Budget, fail: dict[tuple[str, str], int] | None = None) -> None:
        self.budget = budget
        self.fail = dict(fail or {})  # (step, member) -> times it fails
        self.calls: list[tuple[str, list[str]]] = []
        self.cordoned: set[str] = set()
        self.quarantined: list[str] = []

    def __call__(self, step: str, members: list[str], state: Any) -> dict[str, str]:
        self.calls.append((step, list(members)))
        if step == "cordon":
            self.cordoned |= set(members)
        # Whatever is out at any step (cordoned, quarantined) is within the one budget.
        assert self.budget.problem([*self.cordoned, *self.quarantined]) is None, (step, members)
        errors = {}
        for m in members:
            if self.fail.get((step, m), 0) > 0:
                self.fail[(step, m)] -= 1
                errors[m] = f"{step} failed on {m}"
        if step == "uncordon":
            self.cordoned -= {m for m in members if m not in errors}
        return errors


def _driver_change(h100pod: dict[str, Any]) -> tuple[Plan, Any]:
    data = copy.deepcopy(h100pod)
    data["gpu_nodes"][0]["driver_branch"] = 570
    new = _plan(h100pod)
    return new, rollout(_plan(data), new)


def _run(state: Any, cluster: ScriptedCluster, new: Plan, paused: Any = lambda: False) -> tuple[Any, list[str]]:
    from aisite.maintenance.run import run

    saved: list[str] = []
    state = run(
        state,
        cluster,
        budget=site_budget(new),
        elsewhere=lambda: cluster.quarantined,
        paused=paused,
        save=lambda s: saved.append(s.status),
        now=lambda: "t",
    )
    return state, saved


def test_a_rollout_takes_every_member_through_its_steps_within_the_budget(h100pod: dict[str, Any]) -> None:
    from aisite.maintenance.run import start

    new, r = _driver_change(h100pod)
    state, why = start(r, new.site, "HEAD -> working tree", "t")
    assert why == [] and state is not None
    cluster = ScriptedCluster(site_budget(new))
    state, saved = _run(state, cluster, new)
    assert state.status == "done" and all(m.pending == "done" for m in state.members.values())
    # Each member: cordon, drain, apply, reboot (a driver branch needs one), verify, uncordon; in its wave's order.
    for name in ("dgx001", "dgx017"):
        assert [s for s, ms in cluster.calls if name in ms] == [
            "cordon",
            "drain",
            "apply",
            "reboot",
            "verify",
            "uncordon",
        ]
    assert cluster.calls[0] == ("cordon", ["dgx001"])  # the canary alone first
    assert len(saved) >= 6 * len(state.waves)  # saved after every step
    assert cluster.cordoned == set()


def test_a_failed_step_stops_the_rollout_and_resuming_retries_only_that_step(h100pod: dict[str, Any]) -> None:
    from aisite.maintenance.run import start

    new, r = _driver_change(h100pod)
    state, _ = start(r, new.site, "c", "t")
    cluster = ScriptedCluster(site_budget(new), {("verify", "dgx003"): 1})
    state, _ = _run(state, cluster, new)
    assert state.status == "failed" and state.message.startswith("wave 2, verify failed on dgx003")
    assert state.members["dgx003"].pending == "verify" and state.members["dgx003"].error
    assert state.members["dgx002"].pending == "uncordon"  # the wave stopped before any was given back
    assert all(m.pending == "cordon" for n, m in state.members.items() if n >= "dgx006")  # later waves untouched
    before = len(cluster.calls)
    state, _ = _run(state, cluster, new)
    assert state.status == "done"
    # Only the failed step again, then the wave given back together: nothing applied twice.
    assert cluster.calls[before : before + 2] == [
        ("verify", ["dgx003"]),
        ("uncordon", ["dgx002", "dgx003", "dgx004", "dgx005"]),
    ]
    assert state.members["dgx003"].history[-3:] == [
        "t verify: failed: verify failed on dgx003",
        "t verify: ok",
        "t uncordon: ok",
    ]


def test_a_pause_stops_between_steps_and_resume_goes_on(h100pod: dict[str, Any]) -> None:
    from aisite.maintenance.run import start

    new, r = _driver_change(h100pod)
    state, _ = start(r, new.site, "c", "t")
    cluster = ScriptedCluster(site_budget(new))
    calls = iter(range(1000))
    state, _ = _run(state, cluster, new, paused=lambda: next(calls) == 8)  # in wave 2, after its cordon and drain
    assert state.status == "paused" and state.message == "wave 2, before apply"
    assert state.out_of_service() == ["dgx002", "dgx003", "dgx004", "dgx005"]
    state, _ = _run(state, cluster, new)
    assert state.status == "done"


def test_the_budget_is_asked_before_a_wave_is_taken_out(h100pod: dict[str, Any]) -> None:
    from aisite.maintenance.run import start

    new, r = _driver_change(h100pod)
    state, _ = start(r, new.site, "c", "t")
    cluster = ScriptedCluster(site_budget(new))
    cluster.quarantined = ["dgx030", "dgx031", "dgx032", "dgx029"]  # 32 GPUs out: nothing else may go
    state, _ = _run(state, cluster, new)
    assert state.status == "waiting" and cluster.calls == []
    assert state.message == "wave 1: 40 GPUs out of service, over the site's budget of 32"


def test_start_refuses_what_no_rollout_makes(lab: dict[str, Any]) -> None:
    from aisite.maintenance.run import start

    old = _plan(lab)
    lab["kubernetes"]["version"] = "1.34.3"
    state, why = start(rollout(old, _plan(lab)), "lab", "c", "t")
    assert state is None and why == ["kubernetes.version 1.35.6 -> 1.34.3: a downgrade; kubeadm upgrades only forward"]
    assert start(rollout(old, old), "lab", "c", "t")[1] == ["nothing in this change needs a member out of service"]


def test_an_operator_skips_a_member_not_yet_out_or_one_that_failed(h100pod: dict[str, Any]) -> None:
    from aisite.maintenance.run import start
    from aisite.maintenance.state import advance, load, save, skip

    new, r = _driver_change(h100pod)
    state, _ = start(r, new.site, "c", "t")
    assert state is not None
    assert skip(state, "dgx010", "t") == "" and state.members["dgx010"].pending == "skipped"
    advance(state.members["dgx001"], "", "t")  # cordoned, drain pending
    assert "between steps" in skip(state, "dgx001", "t")
    advance(state.members["dgx001"], "drain timed out", "t")
    assert (
        skip(state, "dgx001", "t") == ""
        and "left at drain after: drain timed out" in state.members["dgx001"].history[-1]
    )
    assert skip(state, "nope", "t") == "nope is not in this rollout"
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"rollout-{os.getpid()}.json"
    save(path, state)
    assert load(path) == state
    path.unlink()


def test_ansible_steps_verify_fails_on_a_problem_the_baseline_did_not_have(lab: dict[str, Any]) -> None:
    from aisite.deploy import HostRecap, RunResult
    from aisite.maintenance.state import MemberState, RolloutState
    from aisite.maintenance.steps import AnsibleSteps

    plan = _plan(lab)
    clock = {"check": "clock", "subject": "chrony", "message": "not synchronised"}
    rail = {"check": "rail", "subject": "rail1", "message": "down"}
    driver = {"check": "gpu-driver", "subject": "node", "message": "driver 570.1 is loaded, the plan has R580"}
    answers = iter([[clock], [clock, rail], [clock, driver], [clock, driver]])
    runs: list[tuple[str, str | None, dict[str, Any]]] = []

    def runner(playbook: str, limit: str | None, extravars: Any) -> RunResult:
        runs.append((playbook, limit, dict(extravars)))
        stats: dict[str, Any] = {}
        if playbook.endswith("health-status.yml"):
            stats = {"health_states": {"gpu01": {"node": "gpu01", "problems": next(answers)}}}
        return RunResult("successful", 0, {"gpu01": HostRecap(ok=1)}, stats=stats)

    steps = AnsibleSteps(plan, runner)
    state = RolloutState("lab", "c", "t", [["gpu01"]], {"gpu01": MemberState(["x"], False)})
    assert steps("cordon", ["gpu01"], state) == {}
    assert state.members["gpu01"].baseline == ["clock chrony"]  # known before: not the change's fault
    assert runs[1][0] == "maintenance.yml" and runs[1][2]["maintenance_action"] == "cordon"
    assert steps("verify", ["gpu01"], state) == {"gpu01": "new health problems: rail rail1"}
    assert runs[2] == ("health-status.yml", "gpu01", {"health_now": True})
    # The driver the change installs must be loaded after it, even where it was wrong before the change.
    assert steps("cordon", ["gpu01"], state) == {} and "gpu-driver node" in state.members["gpu01"].baseline
    assert steps("verify", ["gpu01"], state) == {"gpu01": "new health problems: gpu-driver node"}


def test_a_node_out_for_maintenance_takes_the_place_a_quarantine_would(lab: dict[str, Any], tmp_path: Path) -> None:
    from aisite.health.site import run_pass

    lab["health"] = {"max_quarantined": 5}
    plan = _plan(lab)  # the lab's budget: one GPU
    ok = {n.name: {"node": n.name, "problems": []} for n in plan.nodes}
    bad = ok | {"gpu02": {"node": "gpu02", "problems": [{"check": "rail", "subject": "rail0", "message": "down"}]}}
    members = tmp_path / "members.json"
    with store.editing(members) as m:  # gpu01 is out in a rollout
        store.hold(m, "gpu01", "maintenance", state="maintenance", pending="drain", at="t")
    held = run_pass(plan, bad, tmp_path / "a", members)
    assert [(a.node, a.kind) for a in held.actions] == [("gpu02", "held")]
    assert "site's disruption budget: 2 GPUs out of service" in held.actions[0].reason
    assert store.held_out(members) == ["gpu01"]  # gpu02, held in service by the budget, is not out
    with store.editing(members) as m:
        store.release(m, "gpu01", "maintenance", at="t")
    taken = run_pass(plan, bad, tmp_path / "b", members)
    assert [(a.node, a.kind) for a in taken.actions] == [("gpu02", "quarantine")]


def test_the_maintenance_commands_say_what_they_cannot_do(tmp_path: Path) -> None:
    """The CLI around a recorded rollout: nothing to roll, nothing to resume or skip, a pause flag, a status; a
    recorded rollout is shown and a skip of a member already cordoned is refused, nothing changed."""
    import shutil

    from aisite.maintenance.state import MemberState, RolloutState, load, save
    from aisite.paths import maintenance_dir, members_file
    from tests.conftest import ROOT, make_site_repo, run_cli

    site = f"mainttest-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-cli"
    text = (ROOT / "stacks" / "Pulumi.lab.yaml").read_text().replace("name: lab\n", f"name: {site}\n")
    repo = make_site_repo(tmp_path / "site", {f"Pulumi.{site}.yaml": text})
    stack = str(repo / "stacks" / f"Pulumi.{site}.yaml")
    folder = maintenance_dir(site)
    try:
        r = run_cli("maintenance", "start", stack)
        assert r.returncode == 2 and "cannot start: nothing in this change needs a member out of service" in r.stderr
        # --dry-run: a Kubernetes upgrade's waves and reasons, and nothing recorded or cordoned.
        Path(stack).write_text(text.replace("      version: 1.35.6\n", "      version: 1.35.7\n", 1))
        dry = run_cli("maintenance", "start", stack, "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        intent = json.loads(dry.stdout)
        assert intent["dry_run"] and intent["waves"][0] == ["cp01"]
        assert "kubernetes" in " ".join(intent["members"]["cp01"]["reasons"]).lower()
        assert not (folder / "rollout.json").exists() and not members_file(site).exists()
        shown = run_cli("maintenance", "start", stack, "--dry-run").stdout
        assert "wave 1: cp01:" in shown and "dry run: nothing recorded" in shown
        Path(stack).write_text(text)
        assert json.loads(run_cli("maintenance", "status", stack, "--json").stdout)["rollout"] is None
        assert run_cli("maintenance", "resume", stack).returncode == 2
        assert "no rollout recorded" in run_cli("maintenance", "skip", stack, "gpu01").stderr
        assert run_cli("maintenance", "pause", stack).returncode == 0 and (folder / "paused").is_file()
        state = RolloutState(site, "c", "t", [["gpu01"]], {"gpu01": MemberState(["x"], True, pending="apply")})
        save(folder / "rollout.json", state)
        shown = json.loads(run_cli("maintenance", "status", stack, "--json").stdout)["rollout"]
        assert shown["members"]["gpu01"]["pending"] == "apply"
        refused = run_cli("maintenance", "skip", stack, "gpu01")
        assert refused.returncode == 2 and "between steps (apply pending)" in refused.stderr
        assert load(folder / "rollout.json") == state
        busy = run_cli("maintenance", "start", stack)
        assert busy.returncode == 2 and "a rollout is recorded (c, running): resume it" in busy.stderr
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)


def test_a_member_without_a_health_check_is_not_cordoned_and_the_others_are(lab: dict[str, Any]) -> None:
    from aisite.deploy import HostRecap, RunResult
    from aisite.maintenance.state import MemberState, RolloutState
    from aisite.maintenance.steps import AnsibleSteps

    plan = _plan(lab)
    runs: list[dict[str, Any]] = []

    def runner(playbook: str, limit: str | None, extravars: Any) -> RunResult:
        runs.append(dict(extravars))
        stats = {"health_states": {"gpu01": {"node": "gpu01", "problems": []}, "gpu02": None}}
        return RunResult("successful", 0, {"gpu01": HostRecap(ok=1), "gpu02": HostRecap(ok=1)}, stats=stats)

    members = {n: MemberState(["x"], False) for n in ("gpu01", "gpu02")}
    state = RolloutState("lab", "c", "t", [["gpu01", "gpu02"]], members)
    errors = AnsibleSteps(plan, runner)("cordon", ["gpu01", "gpu02"], state)
    assert errors == {"gpu02": "no health check to read (role node_health)"}
    assert runs[-1]["maintenance_action"] == "cordon" and runs[-1]["maintenance_nodes"] == ["gpu01"]


def test_a_budget_smaller_than_a_node_is_warned(h100pod: dict[str, Any]) -> None:
    from aisite.cautions import site_warnings

    data = copy.deepcopy(h100pod) | {"maintenance": {"max_unavailable_gpus": 4}}
    site = parse_site(data)
    found = [str(w) for w in site_warnings(site, build_plan(site))]
    assert any(w.startswith("site.maintenance.max_unavailable_gpus: 4 is fewer than one node's 8 GPUs") for w in found)
    site = parse_site(h100pod)
    assert not any("maintenance" in str(w) for w in site_warnings(site, build_plan(site)))


def test_a_rollouts_apply_upgrades_kubernetes_and_keeps_a_switch_drained(lab: dict[str, Any]) -> None:
    """A rollout's apply tells the cluster layer to upgrade a member on an older Kubernetes (the role then runs
    kubeadm's procedure: molecule scenario kubernetes/upgrade; `deploy` without it stops on that member) and the
    fabric layer to keep a drained switch's graceful shutdown through its reload; each layer on its members alone.
    A switch's cordon, drain, verify and uncordon run playbooks/maintenance-switch.yml on it. What applied is
    recorded, so it is not run again."""
    import shutil

    from aisite.deploy import HostRecap, RunResult, applied_hosts
    from aisite.maintenance.state import MemberState, RolloutState
    from aisite.maintenance.steps import AnsibleSteps
    from aisite.paths import site_dir

    site = f"mainttest-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-apply"
    plan = _plan(copy.deepcopy(lab) | {"name": site})
    runs: list[tuple[str, str | None, dict[str, Any]]] = []

    def runner(playbook: str, limit: str | None, extravars: Any) -> RunResult:
        runs.append((playbook, limit, dict(extravars)))
        stats = {"health_states": {"cp01": {"node": "cp01", "problems": []}}}
        return RunResult("successful", 0, {h: HostRecap(ok=1) for h in ("cp01", "spine01")}, stats=stats)

    members = {n: MemberState(["change"], False) for n in ("cp01", "spine01")}
    state = RolloutState(site, "c", "t", [["cp01", "spine01"]], members)
    steps = AnsibleSteps(plan, runner)
    try:
        assert steps("apply", ["cp01", "spine01"], state) == {}
        by_layer = {p: (limit, extra) for p, limit, extra in runs}
        assert by_layer["cluster.yml"] == ("cp01", {"kubernetes_upgrade": True})
        assert by_layer["fabric.yml"] == ("spine01", {"fabric_frr_graceful_shutdown": True})
        assert all(extra == {} for p, (_, extra) in by_layer.items() if p not in ("cluster.yml", "fabric.yml"))
        assert "cp01" in applied_hosts(site)["cluster"] and "spine01" in applied_hosts(site)["fabric"]
        for step in ("cordon", "drain", "verify", "uncordon"):
            runs.clear()
            assert steps(step, ["cp01", "spine01"], state) == {}
            assert ("maintenance-switch.yml", "spine01", {"maintenance_action": step}) in runs
    finally:
        shutil.rmtree(site_dir(site), ignore_errors=True)


def test_deploy_holds_back_what_needs_members_out_of_service_and_rolls_it(h100pod: dict[str, Any]) -> None:
    """aisite.maintenance.hold: against the stack last applied, the members a change needs out of service are left
    out of deploy's runs and rolled; without a record nothing is held; a rollout under way keeps its members and
    makes a new change wait; a change no rollout makes (a skipped minor) waits, said."""
    from aisite.maintenance.hold import hold_back
    from aisite.maintenance.run import start

    new, r = _driver_change(h100pod)
    old = _plan(copy.deepcopy(h100pod) | {"gpu_nodes": [dict(h100pod["gpu_nodes"][0], driver_branch=570)]})
    assert hold_back(None, new, None).members == {}  # nothing recorded: nothing to compare with
    assert hold_back(new, new, None).members == {}  # the same stack again
    hold = hold_back(old, new, None)
    gpus = sorted(n.name for n in new.by_role("gpu"))
    assert sorted(hold.members) == gpus and hold.settled and hold.rollout is not None
    assert set(hold.members.values()) == {f"NVIDIA driver R570 -> R{new.by_role('gpu')[0].gpu.driver_branch}"}
    assert hold.rollout.waves == r.waves and len(hold.rollout.waves[0]) == 1  # the canary first
    assert hold.to_dict()["waves"] == r.waves
    # A member with nothing applied (new, reinstalled) serves nothing: it takes the change at once.
    fresh = hold_back(old, new, None, in_service=gpus[1:])
    assert sorted(fresh.members) == gpus[1:] and gpus[0] not in {m for w in fresh.rollout.waves for m in w}  # type: ignore[union-attr]
    # Half through it (its canary done), the rollout's unfinished members stay held; a new change waits for it.
    state, _ = start(hold.rollout, new.site, "deploy", "t")
    assert state is not None
    first = state.waves[0][0]
    state.members[first].pending, state.status = "done", "failed"
    again = hold_back(new, new, state)
    assert sorted(again.members) == [n for n in gpus if n != first] and again.settled and again.rollout is None
    assert again.under_way and "in the rollout under way (deploy: failed)" in again.members[gpus[-1]]
    bumped = copy.deepcopy(h100pod)
    bumped["kubernetes"]["version"] = "1.35.7"
    waiting = hold_back(new, _plan(bumped), state)
    assert first in waiting.members and waiting.rollout is None and not waiting.settled
    assert waiting.problems == ["a rollout is under way: the new change waits until it is done (maintenance resume)"]
    # A Kubernetes step kubeadm refuses holds every node back, said; nothing rolls.
    downgraded = copy.deepcopy(h100pod)
    downgraded["kubernetes"]["version"] = "1.34.3"
    refused = hold_back(new, _plan(downgraded), None)
    assert refused.rollout is None and refused.problems == [
        "kubernetes.version 1.35.6 -> 1.34.3: a downgrade; kubeadm upgrades only forward"
    ]
    assert set(refused.members) == {n.name for n in new.nodes}
