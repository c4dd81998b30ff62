"""The reconciler on the lab, driven by a git repository of the site: a one-host commit applied to that host only,
invalid and unsigned commits refused, drift found and reverted, passes that never overlap, and a pass killed
mid-run completed by the next. It leaves the lab as its stack says."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from aisite.plan import Plan
from aisite.reconcile import state as reconcile_state
from tests.conftest import ROOT, commit_file, make_site_repo, run_cli, ssh_signer
from tests.lab.common import BMC_ENV, SITE, kubeadm_labels, podman, reconcile, rotating, wait_for


@pytest.fixture(scope="module")
def site_repo(
    up: subprocess.CompletedProcess[str], stack_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The site's repository (this project with the lab's stack), a fresh reconciler's first pass of it done: a
    changed one (what the lab runs is what the deploy above recorded as applied, and this commit holds the same
    stack), so it runs no layer and records the commit as applied."""
    assert up.returncode == 0, up.stderr
    shutil.rmtree(reconcile_state.workdir(SITE), ignore_errors=True)
    repo = make_site_repo(tmp_path_factory.mktemp("repo"), {stack_file.name: stack_file.read_text()})
    rc, rec = reconcile(repo)
    assert rc == 0 and rec["mode"] == "changed" and rec["outcome"] in ("applied", "unchanged"), rec
    assert rec["errors"] == [] and rec["changed"] == {} and not any(rec["layers"].values()), rec
    yield repo
    shutil.rmtree(reconcile_state.workdir(SITE), ignore_errors=True)


def label_commit(repo: Path, index: int, value: str, message: str) -> str:
    """Set a label on GPU node `index` (a setting of that node alone) and commit it."""
    path = repo / "stacks" / f"Pulumi.{SITE}.yaml"
    data = yaml.safe_load(path.read_text())
    site = data["config"]["aisite:site"]
    site["gpu_nodes"][0]["nodes"][index]["labels"] = {"example.com/pool": value}
    return commit_file(repo, f"stacks/Pulumi.{SITE}.yaml", yaml.safe_dump(data, sort_keys=False), message)


@rotating("reconcile")
def test_a_commit_changing_one_host_is_applied_to_that_host_only(site_repo: Path, plan: Plan) -> None:
    gpu01, gpu02 = [n.name for n in plan.by_role("gpu")][:2]
    before = kubeadm_labels(gpu02)
    commit = label_commit(site_repo, 0, "a", "gpu01 joins pool a")
    rc, rec = reconcile(site_repo)
    assert rc == 0 and rec["outcome"] == "applied" and rec["commit"] == commit, rec
    assert rec["layers"] == {"hosts": [gpu01], "cluster": [gpu01]}
    assert set(rec["changed"]) == {gpu01}
    assert "example.com/pool=a" in kubeadm_labels(gpu01) and kubeadm_labels(gpu02) == before
    status = json.loads(run_cli("reconcile", "status", "--stack", SITE, "--json").stdout)
    assert status["applied_commit"] == commit and status["last_success"] > rec["started"]
    metrics = (reconcile_state.workdir(SITE) / "aisite_reconcile.prom").read_text()
    assert f'aisite_reconcile_applied_info{{commit="{commit}",stack="{SITE}"}} 1.0' in metrics
    # Nothing left to do: a pass with nothing to change runs no playbook.
    rc, rec = reconcile(site_repo)
    assert rc == 0 and rec["outcome"] == "unchanged" and rec["layers"] == {}, rec


@rotating("reconcile")
def test_invalid_and_unsigned_commits_change_nothing_on_the_lab(site_repo: Path, plan: Plan, tmp_path: Path) -> None:
    gpu01 = plan.by_role("gpu")[0].name
    applied = json.loads(run_cli("reconcile", "status", "--stack", SITE, "--json").stdout)["applied_commit"]
    before = kubeadm_labels(gpu01)
    path = f"stacks/Pulumi.{SITE}.yaml"
    text = (site_repo / path).read_text()
    commit_file(site_repo, path, text.replace("gpus: 1\n", "gpus: many\n"), "An invalid site")
    rc, rec = reconcile(site_repo)
    assert rc == 1 and rec["outcome"] == "refused" and rec["layers"] == {}, rec
    assert any("gpus" in e for e in rec["errors"]), rec["errors"]
    key, line = ssh_signer(tmp_path, "admin@example.com")
    signers = tmp_path / "allowed_signers"
    signers.write_text(line + "\n")
    commit_file(site_repo, path, text, "Valid again, but unsigned")
    rc, rec = reconcile(site_repo, "--allowed-signers", str(signers))
    assert rc == 1 and rec["outcome"] == "refused" and "is not signed" in rec["errors"][0], rec
    status = json.loads(run_cli("reconcile", "status", "--stack", SITE, "--json").stdout)
    assert status["applied_commit"] == applied and kubeadm_labels(gpu01) == before
    commit_file(site_repo, path, text + "\n", "Signed by the admin", key)
    rc, rec = reconcile(site_repo, "--allowed-signers", str(signers))
    assert rc == 0 and rec["signer"].startswith('Good "git" signature for admin@example.com'), rec


@rotating("reconcile")
def test_drift_is_reported_by_check_and_reverted_by_the_next_pass(site_repo: Path, plan: Plan) -> None:
    gpu02 = f"aisite-{SITE}-{plan.by_role('gpu')[1].name}"
    want = podman("exec", gpu02, "cat", "/etc/nccl.conf")
    podman("exec", gpu02, "sed", "-i", "s/^NCCL_IB_TC=.*/NCCL_IB_TC=0/", "/etc/nccl.conf")
    host = plan.by_role("gpu")[1].name
    # The check of the layer and node an operator changed by hand (a whole-site check is the same deploy --check
    # over every layer and host: the second whole-site run above is its cost, and CI's budget pays it once).
    rc, rec = reconcile(site_repo, "--check", "--layer", "hosts", "--limit", host)
    assert rc == 1 and rec["outcome"] == "drift" and rec["layers"] == {"hosts": [host]}, rec
    assert rec["notes"] == [f"checked only layer hosts on {host}"], rec["notes"]
    assert list(rec["drifted"]) == [host], rec["drifted"]
    assert any("NCCL" in task for task in rec["drifted"][host]), rec["drifted"]
    assert "NCCL_IB_TC=0" in podman("exec", gpu02, "cat", "/etc/nccl.conf")  # a check changes nothing
    rc, rec = reconcile(site_repo)
    assert rc == 0 and rec["outcome"] == "applied" and host in rec["layers"]["hosts"], rec
    assert podman("exec", gpu02, "cat", "/etc/nccl.conf") == want


def _background_pass(repo: Path, *extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AISITE_")} | BMC_ENV
    cmd = [sys.executable, "-m", "aisite", "reconcile", "--repo", str(repo), "--stack", SITE, "--once", "--json"]
    return subprocess.Popen(
        [*cmd, *extra], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _is_deploy_playbook(pid: int) -> bool:
    try:
        cmd = (Path("/proc") / str(pid) / "cmdline").read_bytes()
    except OSError:
        return False
    return b"ansible-playbook" in cmd and b"aisite-run-" in cmd


def _deploy_playbooks(root: int) -> set[int]:
    """The ansible-playbook processes of an aisite deploy (private data directory aisite-run-*) below `root`. Only
    its own: another test file's deploy may run beside this one on the other pytest worker (a pgrep over the whole
    machine once took one for the pass's and failed the overlap test in CI)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            if _is_deploy_playbook(child):
                found.add(child)
    return found


def ansible_running(pids: set[int]) -> bool:
    """Any of these ansible-playbook processes still runs."""
    return any(_is_deploy_playbook(pid) for pid in pids)


def _wait_for_deploy(proc: subprocess.Popen[str]) -> set[int]:
    """Until the pass's deploy has started Ansible; its ansible-playbook processes."""
    pids: set[int] = set()

    def running() -> bool:
        assert proc.poll() is None, proc.communicate()
        pids.update(_deploy_playbooks(proc.pid))
        return bool(pids)

    wait_for("the pass to start Ansible", running, 60)
    return pids


@rotating("reconcile")
def test_two_reconciles_never_overlap(site_repo: Path, plan: Plan) -> None:
    label_commit(site_repo, 1, "b", "gpu02 joins pool b")
    first = _background_pass(site_repo)
    try:
        _wait_for_deploy(first)
        rc, rec = reconcile(site_repo)
        assert rc == 75 and rec["outcome"] == "busy", rec
        waited = _background_pass(site_repo, "--wait")
        out, err = first.communicate(timeout=300)
        assert first.returncode == 0, out + err
        a = json.loads(out)
        out, err = waited.communicate(timeout=300)
        b = json.loads(out)
        assert a["outcome"] == "applied" and b["outcome"] == "unchanged", (a, b)
        assert b["started"] >= a["started"] + a["seconds"] - 1  # it waited for the first to end
    finally:
        first.kill()


@rotating("reconcile")
def test_a_reconcile_killed_mid_run_is_completed_by_the_next(site_repo: Path, plan: Plan) -> None:
    gpu02 = plan.by_role("gpu")[1].name
    commit = label_commit(site_repo, 1, "c", "gpu02 moves to pool c")
    proc = _background_pass(site_repo)
    playbooks = _wait_for_deploy(proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    rec = json.loads(out)
    assert proc.returncode == 1 and rec["outcome"] == "failed" and "interrupted" in rec["errors"][-1], (rec, err)
    # Nothing of it runs on: Ansible was cancelled with it.
    wait_for("Ansible to be gone", lambda: not ansible_running(playbooks), 30)
    rc, rec = reconcile(site_repo)
    assert rc == 0 and rec["outcome"] == "applied" and rec["commit"] == commit, rec
    assert gpu02 in rec["layers"]["cluster"]
    assert "example.com/pool=c" in kubeadm_labels(gpu02)
    status = json.loads(run_cli("reconcile", "status", "--stack", SITE, "--json").stdout)
    assert status["applied_commit"] == commit and [p["outcome"] for p in status["passes"][-2:]] == ["failed", "applied"]


@rotating("reconcile")
def test_a_reconcile_killed_outright_holds_off_the_next_until_its_deploy_ends(site_repo: Path, plan: Plan) -> None:
    """SIGKILL gives the pass no chance to stop its deploy: the deploy, which holds the lock with it, runs on; the
    next pass (--wait) starts only when it has ended, and finds the site converged."""
    gpu02 = plan.by_role("gpu")[1].name
    commit = label_commit(site_repo, 1, "d", "gpu02 moves to pool d")
    proc = _background_pass(site_repo)
    playbooks = _wait_for_deploy(proc)
    proc.kill()
    proc.communicate(timeout=30)
    assert ansible_running(playbooks), "the deploy went with the pass: nothing to hold off"
    rc, rec = reconcile(site_repo, "--wait")
    assert not ansible_running(playbooks)
    assert rc == 0 and rec["outcome"] in ("applied", "unchanged") and rec["commit"] == commit, rec
    assert "example.com/pool=d" in kubeadm_labels(gpu02)


@rotating("reconcile")
def test_the_sites_own_stack_committed_again_changes_only_the_nodes_labelled(
    site_repo: Path, stack_file: Path, plan: Plan
) -> None:
    """The lab's own stack committed back on top of the label commits: only the two labelled nodes run, and the
    lab is left as its stack says for the tests below."""
    gpu01, gpu02 = [n.name for n in plan.by_role("gpu")][:2]
    commit = commit_file(site_repo, f"stacks/Pulumi.{SITE}.yaml", stack_file.read_text(), "Back to the lab's own")
    rc, rec = reconcile(site_repo)
    assert rc == 0 and rec["outcome"] == "applied" and rec["commit"] == commit, rec
    assert {layer: sorted(hosts) for layer, hosts in rec["layers"].items()} == {
        "hosts": [gpu01, gpu02],
        "cluster": [gpu01, gpu02],
    }, rec["layers"]
    assert "example.com/pool" not in kubeadm_labels(gpu01) + kubeadm_labels(gpu02)
