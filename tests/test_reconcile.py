"""What changed, `aisite diff` and the parts of `aisite reconcile` that need no lab: real git repositories, real
SSH-signed commits, the real lock and the push hook. Passes that apply a commit run in tests/lab/."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from aisite.changes import layer_states, resolve_pattern, site_layer_inputs
from aisite.diff import site_diff
from aisite.loader import parse_site
from aisite.plan import build_plan
from aisite.playbooks import LAYERS
from aisite.reconcile import run, state
from aisite.reconcile.hook import post_receive
from aisite.reconcile.nodes import convergence
from aisite.reconcile.nodes import write_metrics as write_nodes_metrics
from aisite.render.inventory import inventory, load_inventory
from tests.conftest import ROOT, commit_file, git, make_site_repo, run_cli, ssh_signer, stack_data

pytestmark = pytest.mark.slow
# The reconciler's state lives under .aisite/reconcile/<stack>/: a stack of its own per xdist worker, whose tests
# run one after another, so parallel workers never share a lock, a clone or a status file.
STACK = f"rectest-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
LAB_TEXT = (ROOT / "stacks" / "Pulumi.lab.yaml").read_text().replace("name: lab\n", f"name: {STACK}\n")


def _states(data: dict) -> dict:
    return layer_states(LAYERS, *site_layer_inputs(build_plan(parse_site(data))))


def test_one_node_setting_is_pending_on_that_node_only(lab: dict) -> None:
    before = _states(lab)
    lab["gpu_nodes"][0]["nodes"][0] = {"labels": {"example.com/pool": "a"}}
    after = _states(lab)
    pending = {name: s.pending(before[name].hosts) for name, s in after.items()}
    assert pending == {
        "oob": [],
        "fabric": [],
        "hosts": ["gpu01"],
        "cluster": ["gpu01"],
        "platform": [],
        "workloads": [],
    }
    assert after["hosts"].trigger != before["hosts"].trigger and after["oob"].trigger == before["oob"].trigger


NODES = ["cp01", "gpu01", "gpu02", "infer01", "stor01", "stor02", "stor03"]
BMCS = [f"{n}-bmc" for n in NODES]
SWITCHES = ["leaf01", "leaf02", "spine01", "spine02"]
# A change, one at a time, and exactly the layers and hosts it leaves pending: a layer's state is what it reads.
SCOPES = {
    "a workload's batch size": (
        lambda d: d["workloads"][1].update(batch_size=8),
        {"workloads": ["cp01", "localhost"]},
    ),
    "a tenant's groups": (
        lambda d: d["kubernetes"]["tenants"][0].update(groups=["team-a", "ops"]),
        {"platform": ["localhost"], "workloads": ["cp01", "localhost"]},
    ),
    "a chart value (MIG strategy)": (
        lambda d: d["kubernetes"].update(mig_strategy="mixed"),
        {"platform": ["localhost"]},
    ),
    # An address of the management network no node holds: reserved from now on, it moves nobody.
    "an NTP server": (lambda d: d.update(ntp_servers=["10.250.1.254"]), {"oob": BMCS, "hosts": NODES}),
    # hosts: the LLDP check hands the whole node to its filter.
    "one node's label": (
        lambda d: d["gpu_nodes"][0]["nodes"][0].update(labels={"example.com/pool": "a"}),
        {"hosts": ["gpu01"], "cluster": ["gpu01"]},
    ),
    "a rail subnet": (
        lambda d: d["networks"].update(rails=["10.250.16.0/24", "10.250.18.0/24"]),
        {"fabric": SWITCHES, "hosts": NODES, "platform": ["localhost"]},
    ),
    "a BMC's power setting": (
        lambda d: d["gpu_nodes"][0]["nodes"][1]["bmc"].update(power="off"),
        {"oob": ["gpu02-bmc"], "hosts": ["gpu02"]},
    ),
}


@pytest.mark.parametrize("change", SCOPES)
def test_a_change_runs_only_where_it_lands(change: str) -> None:
    """Each layer's state per host hashes only the variables its playbook and roles read (aisite.changes): a
    benchmark's batch size no longer re-runs BMCs, switches and hosts."""
    data = stack_data("lab")
    before = _states(data)
    edit, expected = SCOPES[change]
    edit(data)
    after = _states(data)
    pending = {name: s.pending(before[name].hosts) for name, s in after.items() if s.pending(before[name].hosts)}
    assert pending == expected


def test_layer_reads_follow_attributes_aliases_and_whole_uses() -> None:
    from aisite.changes import layer_reads

    names = {"aisite_kubernetes", "aisite_node", "k8s_workloads", "ansible_host", "aisite_gitops"}
    cluster = layer_reads("cluster", names)
    # kubeadm.yaml.j2 reads it through `{% set k = aisite_kubernetes %}`; every attribute, none whole.
    assert (
        cluster["aisite_kubernetes"] is not None and {"pod_cidr", "endpoint", "version"} <= cluster["aisite_kubernetes"]
    )
    assert "k8s_workloads" not in cluster and cluster["ansible_host"] is None
    assert set(layer_reads("workloads", names)) == {"k8s_workloads", "ansible_host"}
    assert layer_reads("reconciler", names)["aisite_gitops"] is not None


def test_layer_targets_follow_the_plays() -> None:
    states = _states(stack_data("lab"))
    assert list(states["oob"].hosts) == [f"{n}-bmc" for n in NODES]
    assert list(states["fabric"].hosts) == ["leaf01", "leaf02", "spine01", "spine02"]
    assert list(states["platform"].hosts) == ["localhost"]
    assert set(states["hosts"].hosts) == set(NODES)


def test_resolve_pattern_reads_names_and_groups() -> None:
    inv = inventory(build_plan(parse_site(stack_data("lab"))))
    assert resolve_pattern("gpu_nodes:leaf01", inv) == ["gpu01", "gpu02", "infer01", "leaf01"]
    assert resolve_pattern("gpu02,cp01", inv) == ["cp01", "gpu02"]
    assert resolve_pattern("localhost", inv) == ["localhost"]
    assert resolve_pattern("fabric_os_sonic", inv) == []  # no SONiC switch: an empty group is not in the inventory
    for unread in ("gpu*", "all:!gpu01", "gpu_nodes:&leaf"):
        assert resolve_pattern(unread, inv) is None


@settings(max_examples=12, deadline=None)  # each example plans the lab twice (~0.3 s)
@given(st.sampled_from(["gpu01", "gpu02", "cp01", "stor01"]), st.text("abc", min_size=1, max_size=5))
def test_a_label_on_one_node_never_touches_another(node: str, value: str) -> None:
    data = stack_data("lab")
    before = _states(data)
    group, index = ("gpu_nodes", int(node[-1]) - 1) if node.startswith("gpu") else (None, 0)
    if group:
        spec = data[group][0]["nodes"][index]
    else:
        spec = data["control_plane" if node == "cp01" else "storage_nodes"].setdefault("nodes", [{}])[0]
    spec["labels"] = {"example.com/x": value}  # beside the node's other settings (gpu02's IPMI BMC)
    after = _states(data)
    touched = {h for name, s in after.items() for h in s.pending(before[name].hosts)}
    assert touched == {node}


def test_diff_shows_a_moved_rail_subnet_as_addresses_routes_and_ports(lab: dict) -> None:
    old = build_plan(parse_site(lab))
    lab["networks"]["rails"] = ["10.250.16.0/24", "10.250.18.0/24"]
    new = build_plan(parse_site(lab))
    d = site_diff(old, new, LAYERS).to_dict()["sections"]
    moved = {(c["key"], c["old"], c["new"]) for c in d["addresses"]}
    assert moved == {
        ("gpu01 rail1", "10.250.17.27/27", "10.250.18.27/27"),
        ("gpu02 rail1", "10.250.17.28/27", "10.250.18.28/27"),
    }
    routes = {c["key"]: c["new"] for c in d["routes"]}
    assert routes["leaf02 rail 1 subnet"] == "10.250.18.0/27 (gateway 10.250.18.1)"
    assert routes["gpu01 table 101"].startswith("10.250.18.0/27 dev rail1 src 10.250.18.27")
    ports = {c["key"]: c["new"] for c in d["switch_ports"]}
    assert ports == {p: "rail 1 10.250.18.0/27 gateway 10.250.18.1" for p in ("leaf02 swp1", "leaf02 swp2")}
    # The rail's pool, field by field (as `kubectl diff` shows it), and nothing else of the cluster's objects.
    pool = {c["key"]: (c["old"], c["new"]) for c in d["kubernetes"]}
    assert {k.split(" .", 1)[0] for k in pool} == {"IPPool nvidia-network-operator/rail1-su0"}
    assert pool["IPPool nvidia-network-operator/rail1-su0 .spec.subnet"] == ("10.250.17.0/27", "10.250.18.0/27")
    assert pool["IPPool nvidia-network-operator/rail1-su0 .spec.gateway"] == ("10.250.17.1", "10.250.18.1")
    assert not d["cables"] and not d["bgp_sessions"]  # nothing was recabled, no session moved


def test_diff_command_compares_a_revision_with_the_working_tree(tmp_path: Path) -> None:
    repo = make_site_repo(tmp_path / "site", {f"Pulumi.{STACK}.yaml": LAB_TEXT})
    stack = repo / "stacks" / f"Pulumi.{STACK}.yaml"
    r = run_cli("diff", str(stack), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["empty"], r.stdout + r.stderr
    stack.write_text(LAB_TEXT.replace("          - {}\n", "          - {labels: {example.com/pool: a}}\n"))
    r = run_cli("diff", str(stack), "--json")
    doc = json.loads(r.stdout)
    assert doc["layers"] == {"hosts": ["gpu01"], "cluster": ["gpu01"]}
    assert doc["sections"]["nodes"] == [
        {"kind": "added", "key": "gpu01.labels.example.com/pool", "old": None, "new": "a"}
    ]
    text = run_cli("diff", str(stack)).stdout
    assert "- hosts: gpu01" in text and "+ `gpu01.labels.example.com/pool`: a" in text
    bad = run_cli("diff", str(stack), "--against", "no-such-rev")
    assert bad.returncode == 2 and "'no-such-rev' is not a commit" in bad.stderr


@pytest.fixture
def site_repo(tmp_path: Path) -> Iterator[Path]:
    shutil.rmtree(state.workdir(STACK), ignore_errors=True)
    yield make_site_repo(tmp_path / "site", {f"Pulumi.{STACK}.yaml": LAB_TEXT})
    shutil.rmtree(state.workdir(STACK), ignore_errors=True)


def _reconcile(repo: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli("reconcile", STACK, "--repo", str(repo), "--once", "--json", *extra)


def test_a_site_repository_of_the_checkout_keeps_the_collections_link(site_repo: Path) -> None:
    """The repository's top is the collection; its place under collections/ is a link to the top, which a site
    repository made of the checkout keeps (a commit's own aisite finds its roles through it)."""
    from aisite.roots import COLLECTION_PATH

    link = site_repo / COLLECTION_PATH
    assert link.is_symlink() and (link / "roles" / "common" / "tasks" / "main.yml").is_file()
    assert link.resolve() == site_repo.resolve()


def test_an_invalid_commit_is_refused_with_its_errors_and_nothing_runs(site_repo: Path) -> None:
    bad = LAB_TEXT.replace("count: 2\n", "count: two\n", 1)
    commit = commit_file(site_repo, f"stacks/Pulumi.{STACK}.yaml", bad, "Two GPU nodes, in words")
    r = _reconcile(site_repo)
    assert r.returncode == 1
    rec = json.loads(r.stdout)
    assert rec["outcome"] == "refused" and rec["commit"] == commit and rec["layers"] == {}
    assert any("gpu_nodes[0].count" in e for e in rec["errors"]), rec["errors"]
    st = json.loads(run_cli("reconcile", "status", STACK, "--json").stdout)
    assert st["applied_commit"] is None and st["failures_total"] == 1 and st["passes"][-1]["outcome"] == "refused"
    metrics = (state.workdir(STACK) / "aisite_reconcile.prom").read_text()
    assert f'aisite_reconcile_failures_total{{stack="{STACK}"}} 1.0' in metrics
    assert f'aisite_reconcile_last_pass_ok{{stack="{STACK}"}} 0.0' in metrics
    assert not (ROOT / ".aisite" / STACK / "deploys").exists()  # no deploy ran


def test_signatures_unsigned_and_unknown_signers_are_refused(site_repo: Path, tmp_path: Path) -> None:
    admin_key, admin_line = ssh_signer(tmp_path, "admin@example.com")
    other_key, _ = ssh_signer(tmp_path, "mallory@example.com")
    signers = tmp_path / "allowed_signers"
    signers.write_text(admin_line + "\n")
    stack = f"stacks/Pulumi.{STACK}.yaml"
    commit_file(site_repo, stack, LAB_TEXT + "\n", "Unsigned")
    r = _reconcile(site_repo, "--allowed-signers", str(signers))
    rec = json.loads(r.stdout)
    assert r.returncode == 1 and rec["outcome"] == "refused" and "is not signed" in rec["errors"][0], rec
    commit_file(site_repo, stack, LAB_TEXT + "\n\n", "Signed by a key the site does not list", other_key)
    rec = json.loads(_reconcile(site_repo, "--allowed-signers", str(signers)).stdout)
    assert rec["outcome"] == "refused" and "signature not accepted" in rec["errors"][0], rec
    # The admin's signature is accepted; the site it brings is invalid, so it is refused by validation instead.
    commit_file(site_repo, stack, LAB_TEXT.replace("count: 2\n", "count: -1\n", 1), "Signed, invalid", admin_key)
    rec = json.loads(_reconcile(site_repo, "--allowed-signers", str(signers)).stdout)
    assert rec["signer"].startswith('Good "git" signature for admin@example.com'), rec
    assert rec["outcome"] == "refused" and any("count" in e for e in rec["errors"])
    assert json.loads(run_cli("reconcile", "status", STACK, "--json").stdout)["failures_total"] == 3


def test_a_second_reconcile_leaves_while_one_runs(site_repo: Path) -> None:
    with state.lock(STACK, wait=False):
        r = _reconcile(site_repo)
    assert r.returncode == 75 and json.loads(r.stdout)["outcome"] == "busy"
    assert f"another reconcile of stack {STACK!r} is running (pid" in r.stderr
    assert not (state.workdir(STACK) / "status.json").exists()  # it did nothing, recorded nothing


def test_the_push_hook_runs_a_pass_for_its_branch_only(site_repo: Path, tmp_path: Path) -> None:
    bare = tmp_path / "site.git"
    git(tmp_path, "clone", "--quiet", "--bare", str(site_repo), str(bare))
    hook = bare / "hooks" / "post-receive"
    hook.write_text(post_receive(STACK, "main"))
    hook.chmod(0o755)
    assert f"{sys.executable} -m aisite --site-dir {ROOT} reconcile {STACK} " in hook.read_text()
    git(site_repo, "remote", "add", "origin", str(bare))
    commit_file(site_repo, f"stacks/Pulumi.{STACK}.yaml", LAB_TEXT.replace("count: 2\n", "count: two\n", 1), "Bad")
    git(site_repo, "push", "--quiet", "origin", "main:other")  # another branch: no pass
    assert not (state.workdir(STACK) / "status.json").exists()
    push = subprocess.run(["git", "push", "origin", "main"], cwd=site_repo, capture_output=True, text=True, check=False)
    assert push.returncode == 0, push.stderr  # the push itself is accepted; the pass reports to the pusher
    assert "remote:" in push.stderr and "refused" in push.stderr, push.stderr
    st = json.loads(run_cli("reconcile", "status", STACK, "--json").stdout)
    assert st["repo"] == str(bare) and st["passes"][-1]["outcome"] == "refused"


def test_reconcile_options_are_checked_before_anything_runs(tmp_path: Path) -> None:
    r = run_cli("reconcile", "--stack", STACK, "--once", "--watch", "--engine", "terraform")
    assert r.returncode == 2
    for msg in ("--repo: required", "--once and --watch: choose one", "--engine: 'terraform'"):
        assert msg in r.stderr
    r = run_cli("reconcile", "--repo", "x", "--stack", STACK, "--layer", "hosts", "--limit", "gpu01;reboot")
    assert r.returncode == 2
    for msg in ("--layer and --limit: only with --check", "--limit: 'gpu01;reboot' is not host or group names"):
        assert msg in r.stderr
    r = run_cli("reconcile", "--repo", "x", "--stack", STACK, "--signing-key", str(tmp_path / "none"))
    assert r.returncode == 2 and f"--signing-key: {tmp_path / 'none'}: no such file" in r.stderr, r.stderr
    r = run_cli("reconcile", "--repo", "x", "--stack", STACK, "--check", "--layer", "moon")
    assert r.returncode == 2 and "--layer: 'moon' is not one of oob, fabric" in r.stderr
    # The stack first, as in every command (an option's value before it is not taken for it); or none at all.
    r = run_cli("reconcile", "--branch", "main", STACK, "--repo", "x", "--check", "--layer", "moon")
    assert r.returncode == 2 and "--layer: 'moon'" in r.stderr and "STACK" not in r.stderr, r.stderr
    r = run_cli("reconcile", "--repo", "x", "--once")
    assert r.returncode == 2 and "STACK: required" in r.stderr
    r = run_cli("reconcile", "status")
    assert r.returncode == 2 and "STACK: required" in r.stderr
    r = run_cli("reconcile", "status", STACK, "--stack", "other")
    assert r.returncode == 2 and "give one" in r.stderr
    assert not state.workdir(STACK).exists()


def test_a_check_of_part_of_the_site_asks_deploy_for_that_part_only(
    site_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--check --layer L --limit H: the checkout's deploy is asked for that layer on those hosts (in check mode),
    and the pass says so; drift it reports is recorded as any check's."""
    shutil.rmtree(state.workdir(STACK), ignore_errors=True)
    calls: list[tuple[str, ...]] = []

    def fake(clone: Path, *args: str, fd: int, forward: list[Any]) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        doc: dict[str, Any] = {"valid": True}
        if args[0] == "deploy":
            doc = {"status": "successful", "runs": [{"layer": "hosts", "hosts": ["gpu01"]}], "recap": {}}
            doc["changes"] = ["gpu01: NCCL | Configuration"]
        return subprocess.CompletedProcess(args, 0, json.dumps(doc), "")

    monkeypatch.setattr(run, "_aisite", fake)
    cfg = run.Config(str(site_repo), "main", STACK, check_layer="hosts", check_limit="gpu01")
    rec = run.reconcile_pass(cfg, "check")
    assert calls[-1] == ("deploy", STACK, "--json", "--check", "--layer", "hosts", "--limit", "gpu01"), calls
    assert rec.outcome == "drift" and rec.drifted == {"gpu01": ["NCCL | Configuration"]}, rec
    assert rec.notes == ["checked only layer hosts on gpu01"]
    shutil.rmtree(state.workdir(STACK), ignore_errors=True)


def test_a_pass_that_applies_records_the_tasks_each_host_changed(
    site_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a full pass changed is named per host and task (a second whole-site run that changed a task on one
    host was once known by its count alone), and nothing of it is called drift."""
    shutil.rmtree(state.workdir(STACK), ignore_errors=True)

    def fake(clone: Path, *args: str, fd: int, forward: list[Any]) -> subprocess.CompletedProcess[str]:
        doc: dict[str, Any] = {"valid": True}
        if args[0] == "deploy":
            doc = {"status": "successful", "runs": [{"layer": "hosts", "hosts": ["stor01", "gpu01"]}]}
            doc["recap"] = {"stor01": {"changed": 2}, "gpu01": {"changed": 0}}
            doc["changes"] = ["stor01: Ceph | Pools", "stor01: NFS | Exports"]
        return subprocess.CompletedProcess(args, 0, json.dumps(doc), "")

    monkeypatch.setattr(run, "_aisite", fake)
    rec = run.reconcile_pass(run.Config(str(site_repo), "main", STACK), "full")
    assert rec.outcome == "applied" and rec.changed == {"stor01": 2}, rec
    assert rec.changed_tasks == {"stor01": ["Ceph | Pools", "NFS | Exports"]} and rec.drifted == {}, rec
    status = json.loads((state.workdir(STACK) / "status.json").read_text())
    assert status["passes"][-1]["changed_tasks"] == rec.changed_tasks
    shutil.rmtree(state.workdir(STACK), ignore_errors=True)


def test_a_deploy_answering_in_another_contract_is_not_read_as_this_one(
    site_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reconciler reads `aisite deploy --json` of the commit it applies as a versioned contract
    (aisite.apply.CONTRACT): an answer in another version fails the pass and says both, rather than being read
    with this version's meaning."""
    from aisite.apply import CONTRACT

    shutil.rmtree(state.workdir(STACK), ignore_errors=True)
    contract = {"value": "aisite.deploy/v9"}

    def fake(clone: Path, *args: str, fd: int, forward: list[Any]) -> subprocess.CompletedProcess[str]:
        doc: dict[str, Any] = {"valid": True}
        if args[0] == "deploy":
            doc = {"contract": contract["value"], "status": "successful", "runs": [], "recap": {}, "changes": []}
        return subprocess.CompletedProcess(args, 0, json.dumps(doc), "")

    monkeypatch.setattr(run, "_aisite", fake)
    rec = run.reconcile_pass(run.Config(str(site_repo), "main", STACK), "changed")
    assert rec.outcome == "failed", rec
    assert any("aisite.deploy/v9" in e and CONTRACT in e for e in rec.errors), rec.errors
    contract["value"] = CONTRACT
    rec = run.reconcile_pass(run.Config(str(site_repo), "main", STACK), "changed")
    assert rec.outcome == "unchanged", rec
    shutil.rmtree(state.workdir(STACK), ignore_errors=True)


def test_a_pass_that_applies_runs_the_automatic_promotions_and_records_them(
    site_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the commit's stack makes a promotion automatic, the pass that applied it runs the commit's own
    `aisite promote --automatic`, pushing each step to the site's branch and signing with the reconciler's key, on a
    branch of the work clone; what it did is in the pass, the status and the metrics. A promotion that fails is an
    error of the pass, not a failed apply."""
    shutil.rmtree(state.workdir(STACK), ignore_errors=True)
    calls: list[tuple[str, ...]] = []
    promoted: dict[str, Any] = {"outcomes": [
        {"serving": "classifier", "candidate": "v2", "state": "promoted", "note": "",
         "commits": [{"step": "canary", "commit": "a" * 40}, {"step": "promoted", "commit": "b" * 40}]},
        {"serving": "ranker", "candidate": "", "state": "idle", "note": "no checkpoint newer than those judged"},
    ]}  # fmt: skip
    answer: list[subprocess.CompletedProcess[str]] = []

    def fake(clone: Path, *args: str, fd: int, forward: list[Any]) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        doc: dict[str, Any] = {"valid": True, "summary": {"automatic_promotions": ["classifier", "ranker"]}}
        if args[0] == "deploy":
            doc = {"status": "successful", "runs": [{"layer": "workloads", "hosts": ["cp01"]}], "recap": {}}
        if args[0] == "promote":
            assert git(clone, "symbolic-ref", "--short", "HEAD") == run.PROMOTE_BRANCH  # a branch to commit on
            assert git(clone, "remote", "get-url", "origin") == str(site_repo)  # the repository it pushes to
            return answer.pop(0)
        return subprocess.CompletedProcess(args, 0, json.dumps(doc), "")

    monkeypatch.setattr(run, "_aisite", fake)
    key = tmp_path / "promotion_key"
    cfg = run.Config(str(site_repo), "main", STACK, signing_key=key)
    answer.append(subprocess.CompletedProcess((), 0, json.dumps(promoted), ""))
    rec = run.reconcile_pass(cfg, "changed")
    assert calls[-1] == ("promote", STACK, "--automatic", "--push", "main", "--json", "--signing-key", str(key))
    assert rec.outcome == "applied" and rec.errors == [], rec
    assert [(p["serving"], p["state"], p["commits"]) for p in rec.promotions] == [
        ("classifier", "promoted", ["a" * 40, "b" * 40]),
        ("ranker", "idle", []),
    ]
    # A check pass never promotes; a promotion that fails is the pass's error.
    calls.clear()
    run.reconcile_pass(cfg, "check")
    assert [c[0] for c in calls] == ["validate", "deploy"]
    answer.append(subprocess.CompletedProcess((), 1, "", "error: promote: gpu02: connection refused"))
    rec = run.reconcile_pass(cfg, "changed")
    assert rec.outcome == "applied" and rec.promotions[0]["state"] == "failed", rec
    assert rec.errors == ["automatic promotion: aisite promote exited 1: error: promote: gpu02: connection refused"]
    answer.append(subprocess.CompletedProcess((), 0, '{"outcomes": [', ""))  # cut short
    rec = run.reconcile_pass(cfg, "changed")
    assert rec.outcome == "applied" and rec.errors == ["automatic promotion: aisite promote exited 0: no message"]
    status = json.loads((state.workdir(STACK) / "status.json").read_text())
    assert status["promotions_total"] == {"promoted": 1, "failed": 2}
    metrics = (state.workdir(STACK) / "aisite_reconcile.prom").read_text()
    assert f'aisite_reconcile_promotions_total{{stack="{STACK}",state="promoted"}} 1.0' in metrics
    assert f'aisite_reconcile_promotions_total{{stack="{STACK}",state="failed"}} 2.0' in metrics
    shutil.rmtree(state.workdir(STACK), ignore_errors=True)


def test_the_pulumi_engine_without_its_cli_says_so(site_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("pulumi"):
        pytest.skip("the Pulumi CLI is installed here: this checks the message given where it is not")
    r = _reconcile(site_repo, "--engine", "pulumi")
    rec = json.loads(r.stdout)
    assert r.returncode == 1 and "the Pulumi CLI is not installed on this machine" in rec["errors"][0]


def _aisite_lines(doc: object) -> list[str]:
    """Every `.venv/bin/aisite ...` command of a CI template's scripts (run: steps, script: lists)."""
    found: list[str] = []
    if isinstance(doc, dict):
        for value in doc.values():
            found += _aisite_lines(value)
    elif isinstance(doc, list):
        for value in doc:
            found += _aisite_lines(value)
    elif isinstance(doc, str) and doc.startswith(".venv/bin/aisite "):
        found.append(doc)
    return found


@pytest.mark.parametrize("template", ["github-actions.yml", "gitlab-ci.yml"])
def test_ci_templates_review_a_change_with_validate_and_diff(template: str, site_repo: Path) -> None:
    """The review steps of the site repository's CI templates (validate, diff, render), run as written on a change
    to one node."""
    doc = yaml.safe_load((ROOT / "templates" / "ci" / template).read_text())
    lines = _aisite_lines(doc)
    assert [line.split()[1] for line in lines] == ["validate", "diff", "render"], lines
    git(site_repo, "update-ref", "refs/remotes/origin/main", "HEAD")  # what the pipeline fetched of the target
    stack = site_repo / "stacks" / f"Pulumi.{STACK}.yaml"
    stack.write_text(LAB_TEXT.replace("          - {}\n", "          - {labels: {example.com/pool: a}}\n"))
    env = {"STACK": STACK, "GITHUB_BASE_REF": "main", "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main"}
    outputs = []
    for line in lines:
        # The checkout's own aisite, as the template's `.venv` (made in the site repository) would run it.
        cmd = line.replace(".venv/bin/aisite", f"{sys.executable} -m aisite").split(" > ")[0].split(" | ")[0]
        r = subprocess.run(
            ["bash", "-c", cmd], cwd=site_repo, env=os.environ | env, capture_output=True, text=True, check=False
        )
        assert r.returncode == 0, (cmd, r.stderr)
        outputs.append(r.stdout)
    assert "- hosts: gpu01" in outputs[1] and "gpu01.labels.example.com/pool" in outputs[1]
    inv = load_inventory((site_repo / "rendered" / "inventory.yml").read_text())
    assert inv["all"]["children"]["gpu_nodes"]["hosts"]["gpu01"]["aisite_node"]["labels"]["example.com/pool"] == "a"


def test_watch_polls_until_stopped_and_records_every_pass(site_repo: Path) -> None:
    commit_file(site_repo, f"stacks/Pulumi.{STACK}.yaml", LAB_TEXT.replace("count: 2\n", "count: two\n", 1), "Bad")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AISITE_")}
    cmd = [sys.executable, "-m", "aisite", "reconcile", "--repo", str(site_repo), "--stack", STACK, "--watch"]
    proc = subprocess.Popen([*cmd, "--interval", "0.5"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    status = state.workdir(STACK) / "status.json"
    try:
        deadline = time.monotonic() + 60

        # Passes are recorded as they start ("running"): wait for two that ended.
        def ended() -> int:
            return sum(p["outcome"] != "running" for p in json.loads(status.read_text())["passes"])

        while not (status.is_file() and ended() >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, "the watch stopped or made no second pass"
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    passes = json.loads(status.read_text())["passes"]
    assert passes[0]["outcome"] == passes[1]["outcome"] == "refused"
    assert passes[1]["started"] > passes[0]["started"] + 0.4
    # SIGTERM ends the watch; a pass it reached is recorded as interrupted, not left running.
    assert all(p["outcome"] == "refused" or "interrupted" in p["errors"][-1] for p in passes[2:]), passes
    assert proc.returncode != 0 or passes[-1]["outcome"] == "refused"


# ------------------------------------------------------------------------------------------- the chain of trust
def _signed_commit(repo: Path, key: Path, message: str, text: str) -> str:
    return commit_file(repo, f"stacks/Pulumi.{STACK}.yaml", text, message, key)


def _applied(commit: str) -> None:
    """As if a pass had converged the site to `commit` (applying one needs the lab: tests/lab/)."""
    state.save_status(state.Status(STACK, applied_commit=commit))


def test_an_openpgp_signature_is_refused_even_when_its_key_is_in_the_keyring(
    site_repo: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if not shutil.which("gpg"):
        pytest.skip("gpg is not installed (scripts/setup.sh installs gnupg): cannot make an OpenPGP-signed commit")
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    env = os.environ | {"GNUPGHOME": str(home)}
    # gpg starts an agent for this home: stopped with the test, not left running.
    kill = ["gpgconf", "--kill", "gpg-agent"]
    request.addfinalizer(lambda: subprocess.run(kill, env=env, check=False, capture_output=True) and None)
    subprocess.run(
        ["gpg", "--batch", "--passphrase", "", "--quick-gen-key", "admin@example.com", "ed25519", "sign", "never"],
        env=env,
        check=True,
        capture_output=True,
    )
    _, admin_line = ssh_signer(tmp_path, "admin@example.com")
    signers = tmp_path / "allowed_signers"
    signers.write_text(admin_line + "\n")
    (site_repo / f"stacks/Pulumi.{STACK}.yaml").write_text(LAB_TEXT + "\n")
    git(site_repo, "add", "-A")
    r = subprocess.run(
        [
            "git",
            "-c",
            "gpg.format=openpgp",
            "-c",
            "user.signingkey=admin@example.com",
            "commit",
            "-q",
            "-S",
            "-m",
            "PGP",
        ],
        cwd=site_repo,
        env=env | {"GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "admin@example.com"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    # The key is in the reconciler's own keyring, and git itself calls the signature good there...
    assert subprocess.run(["git", "verify-commit", "HEAD"], cwd=site_repo, env=env, check=False).returncode == 0
    # ...but only SSH signatures by a listed key count.
    r = run_cli(
        "reconcile",
        "--repo",
        str(site_repo),
        "--stack",
        STACK,
        "--once",
        "--json",
        "--allowed-signers",
        str(signers),
        env={"GNUPGHOME": str(home)},
    )
    rec = json.loads(r.stdout)
    assert r.returncode == 1 and rec["outcome"] == "refused" and rec["signer"] is None, rec
    assert "has an OpenPGP signature: only SSH signatures" in rec["errors"][0], rec


def test_a_rewound_branch_is_refused_and_a_named_rewind_is_recorded(site_repo: Path) -> None:
    older = commit_file(
        site_repo, f"stacks/Pulumi.{STACK}.yaml", LAB_TEXT.replace("count: 2\n", "count: two\n", 1), "Old"
    )
    newer = commit_file(site_repo, f"stacks/Pulumi.{STACK}.yaml", LAB_TEXT, "New")
    _applied(newer)
    git(site_repo, "reset", "--quiet", "--hard", older)  # main pushed back to an older commit
    r = _reconcile(site_repo)
    rec = json.loads(r.stdout)
    assert r.returncode == 1 and rec["outcome"] == "refused", rec
    assert f"does not descend from the applied commit {newer[:12]}" in rec["errors"][0]
    assert f"--allow-rewind {older}" in rec["errors"][0]
    st = json.loads(run_cli("reconcile", "status", STACK, "--json").stdout)
    assert st["applied_commit"] == newer and st["not_descendant_total"] == 1
    metrics = (state.workdir(STACK) / "aisite_reconcile.prom").read_text()
    assert f'aisite_reconcile_not_descendant_total{{stack="{STACK}"}} 1.0' in metrics
    # An operator names the commit: it passes the descent check (and is then refused by validation, as it is
    # invalid), recorded as a move back.
    assert _reconcile(site_repo, "--allow-rewind", "abc").returncode == 2
    rec = json.loads(_reconcile(site_repo, "--allow-rewind", older).stdout)
    assert rec["rewound_from"] == newer and any("gpu_nodes[0].count" in e for e in rec["errors"]), rec


def test_a_signed_commit_from_another_branch_that_skips_the_applied_one_is_refused(
    site_repo: Path, tmp_path: Path
) -> None:
    key, line = ssh_signer(tmp_path, "admin@example.com")
    signers = tmp_path / "allowed_signers"
    signers.write_text(line + "\n")
    base = git(site_repo, "rev-parse", "HEAD")
    applied = _signed_commit(site_repo, key, "Applied", LAB_TEXT + "\n")
    _applied(applied)
    git(site_repo, "checkout", "--quiet", "-b", "feature", base)
    feature = _signed_commit(site_repo, key, "Only ever on a feature branch", LAB_TEXT + "\n\n")
    git(site_repo, "branch", "--quiet", "-f", "main", feature)  # pushed as main
    rec = json.loads(_reconcile(site_repo, "--allowed-signers", str(signers)).stdout)
    assert rec["commit"] == feature and rec["signer"].startswith('Good "git" signature for admin@example.com')
    assert rec["outcome"] == "refused" and "does not descend from the applied commit" in rec["errors"][0], rec
    # A signed descendant of the applied commit is let through to validation and beyond.
    git(site_repo, "checkout", "--quiet", "main")
    git(site_repo, "reset", "--quiet", "--hard", applied)
    child = _signed_commit(site_repo, key, "Descends", LAB_TEXT.replace("count: 2\n", "count: two\n", 1))
    rec = json.loads(_reconcile(site_repo, "--allowed-signers", str(signers)).stdout)
    assert rec["commit"] == child and any("gpu_nodes[0].count" in e for e in rec["errors"]), rec


@pytest.mark.parametrize("text", ["", '{"stack": "x", "passes": [', "[]", '{"passes": 3}'])
def test_a_corrupted_status_file_is_moved_aside_and_the_next_pass_is_full(site_repo: Path, text: str) -> None:
    path = state.workdir(STACK) / "status.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    written = text.replace('"x"', f'"{STACK}"')
    path.write_text(written)
    r = run_cli("reconcile", "status", STACK, "--json")
    assert r.returncode == 0 and "the status file was unreadable" in r.stderr and "moved aside" in r.stderr
    assert json.loads(r.stdout)["full_pass_due"] is True
    kept = list(path.parent.glob("status.json.corrupt-*"))
    assert len(kept) == 1 and kept[0].read_text() == written  # kept for inspection
    metrics = (state.workdir(STACK) / "aisite_reconcile.prom").read_text()
    assert f'aisite_reconcile_last_pass_ok{{stack="{STACK}"}} 0.0' in metrics
    assert f'aisite_reconcile_status_corrupt_total{{stack="{STACK}"}} 1.0' in metrics
    commit_file(site_repo, f"stacks/Pulumi.{STACK}.yaml", LAB_TEXT.replace("count: 2\n", "count: two\n", 1), "Bad")
    rec = json.loads(_reconcile(site_repo).stdout)
    assert rec["mode"] == "full" and "the status file had been lost" in rec["notes"][0], rec


def test_a_killed_pass_is_recorded_as_interrupted_and_its_lock_taken_over(site_repo: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    st = state.Status(STACK, passes=[state.PassRecord(commit="0" * 40, started=time.time() - 60, mode="changed")])
    state.save_status(st)  # a pass recorded as running, whose reconcile was killed
    (state.workdir(STACK) / "lock").write_text(f"pid {gone.pid} since 2026-01-01T00:00:00Z\n")
    commit_file(site_repo, f"stacks/Pulumi.{STACK}.yaml", LAB_TEXT.replace("count: 2\n", "count: two\n", 1), "Bad")
    r = _reconcile(site_repo)
    assert f"taking over the lock of stack {STACK!r} from pid {gone.pid}" in r.stderr
    st = json.loads(run_cli("reconcile", "status", STACK, "--json").stdout)
    assert [p["outcome"] for p in st["passes"]] == ["interrupted", "refused"]
    assert "stopped before recording its end" in st["passes"][0]["errors"][0]


def test_diff_shows_every_changed_setting(lab: dict) -> None:
    """Values that are no object of the plan (NTP servers, a RoCE value, a version, a workload's threshold) are
    listed one per line, so a reviewer sees what a commit changes and not only which layers run."""
    old = build_plan(parse_site(lab))
    lab["ntp_servers"] = ["10.250.1.9"]
    lab["fabric"]["roce"] = {"ecn_max_kb": 2000}
    lab["kubernetes"]["version"] = "1.34.3"
    new = build_plan(parse_site(lab))
    d = site_diff(old, new, LAYERS).to_dict()["sections"]["settings"]
    changed = {c["key"]: (c["old"], c["new"]) for c in d}
    assert changed["ntp_servers[0]"][1] == "10.250.1.9"
    assert changed["roce.ecn_max_bytes"] == ("1500000", "2000000")
    assert changed["kubernetes.version"] == ("1.35.6", "1.34.3")
    assert not any(k.startswith(("nodes", "switches", "cables")) for k in changed)
    assert site_diff(new, new, LAYERS).to_dict()["sections"]["settings"] == []


def test_the_nodes_convergence_is_judged_from_their_own_records() -> None:
    """Each node's last pass against the site's commit: converged, behind, failing (refused or failed, with how
    long since a success), never, unreachable; a record full of junk is read as what it is, never trusted."""
    tip, old = "a" * 40, "b" * 40
    now = 10_000.0
    records = {
        "n1": {"status": "applied", "applied_commit": tip, "ended": 9_990, "last_success": 9_990, "message": "ok"},
        "n2": {"status": "applied", "applied_commit": old, "ended": 9_000, "last_success": 9_000},
        "n3": {
            "status": "refused",
            "applied_commit": old,
            "ended": 9_950,
            "last_success": 4_000,
            "message": "unsigned",
        },
        "n4": None,
        "n6": {"status": "applied; rm -rf /", "applied_commit": ["x"], "ended": True, "message": "\x1b[2Jred\n" * 200},
    }
    rows = {r.node: r for r in convergence(["n1", "n2", "n3", "n4", "n5", "n6"], records, tip, now, ["n5"])}
    assert [rows[n].state for n in ("n1", "n2", "n3", "n4", "n5", "n6")] == [
        "converged",
        "behind",
        "failing",
        "never",
        "unreachable",
        "failing",
    ]
    assert rows["n1"].last_pass_age_seconds == 10.0 and rows["n3"].since_success_seconds == 6_000.0
    assert rows["n3"].message == "unsigned" and rows["n2"].applied_commit == old
    junk = rows["n6"]
    assert junk.last_outcome == "unknown" and junk.applied_commit == "" and junk.last_pass_age_seconds is None
    assert "\x1b" not in junk.message and "\n" not in junk.message and len(junk.message) <= 400
    # The crashers: markup as a commit, a time past a float; neither crashes, neither is believed.
    hostile = {"n7": {"status": "applied", "applied_commit": "[/x]", "ended": 10**400, "last_success": 1e308}}
    (row,) = convergence(["n7"], hostile, tip, now)
    assert (row.state, row.applied_commit, row.last_pass_age_seconds, row.since_success_seconds) == (
        "failing",
        "",
        None,
        None,
    )
    # Without a known tip, an applied pass counts as converged.
    assert convergence(["n2"], records, None, now)[0].state == "converged"


def test_the_nodes_convergence_is_kept_as_metrics(tmp_path: Path) -> None:
    """What `reconcile nodes` found, for Prometheus next to the reconciler's metrics: a count per state, and each
    node not converged by name with the seconds since its last success; read back with Prometheus's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    tip, old = "a" * 40, "b" * 40
    records = {
        "n1": {"status": "applied", "applied_commit": tip, "ended": 90, "last_success": 90},
        "n2": {"status": "applied", "applied_commit": old, "ended": 50, "last_success": 40},
        "n3": {"status": "failed", "applied_commit": old, "ended": 95, "last_success": 0},
    }
    rows = convergence(["n1", "n2", "n3", "n4"], records, tip, 100.0, ["n4"])
    path = write_nodes_metrics("dc1", rows, 100.0, tmp_path / "m.prom")
    samples = {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "stack"))): s.value
        for family in text_string_to_metric_families(path.read_text())
        for s in family.samples
    }
    counts = {dict(k[1])["state"]: v for k, v in samples.items() if k[0] == "aisite_reconcile_nodes"}
    assert counts == {"converged": 1, "behind": 1, "failing": 1, "never": 0, "unreachable": 1}
    off = {dict(k[1])["node"]: dict(k[1])["state"] for k in samples if k[0] == "aisite_reconcile_node_not_converged"}
    assert off == {"n2": "behind", "n3": "failing", "n4": "unreachable"}
    since = {dict(k[1])["node"]: v for k, v in samples.items() if k[0] == "aisite_reconcile_node_since_success_seconds"}
    assert since == {"n2": 60.0}  # n3 never succeeded, n4 said nothing
    assert samples[("aisite_reconcile_nodes_checked_timestamp_seconds", ())] == 100.0


def test_the_pull_floor_is_a_tip_the_controller_verified(tmp_path: Path) -> None:
    """`deploy --layer pull` installs, as the nodes' floor, the branch's tip only when it is signed by an allowed
    signer: unsigned, or with no signers, there is no floor (and nothing is deployed)."""
    from aisite.repo import GitError, verified_tip
    from tests.conftest import git, make_site_repo, ssh_signer

    key, line = ssh_signer(tmp_path, "floor@example.com")
    repo = make_site_repo(tmp_path / "repo")
    (repo / "f").write_text("1\n")
    git(repo, "add", "-A")
    git(repo, "-c", "gpg.format=ssh", "-c", f"user.signingkey={key}", "commit", "-S", "--quiet", "-m", "signed")
    signed = git(repo, "rev-parse", "HEAD")
    assert verified_tip(str(repo), "main", [line]) == signed
    with pytest.raises(GitError, match="no allowed signers"):
        verified_tip(str(repo), "main", [])
    (repo / "f").write_text("2\n")
    git(repo, "commit", "-aqm", "unsigned")
    with pytest.raises(GitError, match="not signed"):
        verified_tip(str(repo), "main", [line])
