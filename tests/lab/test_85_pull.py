"""Pull mode: each node's last pass read over SSH, then the nodes pulling their host and cluster layers from the
lab's git mirror, a signed one-node commit, an unsigned one refused, and a site that stops pulling."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from aisite.lab import images, mirror
from aisite.lab.podman import CONF
from aisite.loader import load_site
from aisite.paths import pull_wheels_dir
from aisite.plan import Plan, build_plan
from aisite.render import commit as render_commit
from tests.conftest import git, make_site_repo, pulling, run_cli, ssh_signer
from tests.lab.common import (
    BMC_ENV,
    SITE,
    _write_stack,
    check_hosts_baseline,
    containers,
    kubeadm_labels,
    podman,
    rotating,
)


def test_reconcile_nodes_reads_each_nodes_last_pass_over_ssh(
    up: subprocess.CompletedProcess[str], stack_file: Path, plan: Plan, tmp_path: Path
) -> None:
    """`aisite reconcile nodes` on the site with its hosts layer pulled: each node's state.json (written here as a
    node's pass would) read on the node over SSH and judged against the site's commit."""
    assert up.returncode == 0, up.stderr
    pulled = _write_stack(tmp_path, pulling(stack_file.read_text(), "[hosts]"))
    tip, old, now = "1" * 40, "2" * 40, time.time()
    gpu01, gpu02 = [n.name for n in plan.by_role("gpu")][:2]
    cp01 = plan.by_role("control-plane")[0].name
    records = {
        gpu01: {"status": "applied", "applied_commit": tip, "ended": now - 5, "last_success": now - 5},
        gpu02: {"status": "applied", "applied_commit": old, "ended": now - 50, "last_success": now - 50},
        cp01: {
            "status": "refused",
            "applied_commit": old,
            "ended": now - 3,
            "last_success": now - 900,
            "message": "refused: commit 111111111111 is not signed",
        },
    }
    env = os.environ | {"CONTAINERS_CONF": str(CONF)}
    write = "mkdir -p /var/lib/aisite-pull && cat > /var/lib/aisite-pull/state.json"
    try:
        for node, rec in records.items():
            subprocess.run(
                ["podman", "exec", "-i", f"aisite-{SITE}-{node}", "sh", "-c", write],
                input=json.dumps(rec),
                text=True,
                env=env,
                check=True,
            )
        r = run_cli("reconcile", "nodes", "--stack", str(pulled), "--tip", tip, "--json")
        assert r.returncode == 1, r.stderr  # not every node converged
        rows = {n["node"]: n for n in json.loads(r.stdout)["nodes"]}
        expected = {gpu01: "converged", gpu02: "behind", cp01: "failing"}
        expected |= {n.name: "never" for n in plan.nodes if n.name not in records}
        assert {n: row["state"] for n, row in rows.items()} == expected
        assert rows[cp01]["message"].endswith("is not signed") and 890 < rows[cp01]["since_success_seconds"] < 1000
    finally:
        for node in records:
            subprocess.run(
                ["podman", "exec", f"aisite-{SITE}-{node}", "rm", "-rf", "/var/lib/aisite-pull"], env=env, check=False
            )


# ------------------------------------------------------------------ pull: the nodes converge their host layers
PULLED = ["hosts", "cluster"]


def commit_site(repo: Path, stack_text: str, key: Path | None, message: str) -> str:
    """Commit the stack and what `aisite render` makes of it under manifests/<site>/ (the nodes' inventory among
    it), as a team commits a change; signed when a key is given."""
    stack = repo / "stacks" / f"Pulumi.{SITE}.yaml"
    stack.write_text(stack_text)
    render_commit.write(repo, render_commit.rendered(build_plan(load_site(stack))))  # as `make manifests`
    git(repo, "add", "-A")
    sign = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key}", "commit", "-S"] if key else ["commit"]
    git(repo, *sign, "--quiet", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def pull_passes(plan: Plan) -> dict[str, dict[str, Any]]:
    """One pass on every node at once (the unit the timer starts), and each node's record of it."""
    env = os.environ | {"CONTAINERS_CONF": str(CONF)}
    procs = [
        subprocess.Popen(
            ["podman", "exec", f"aisite-{SITE}-{n.name}", "systemctl", "start", "aisite-pull.service"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for n in plan.nodes
    ]
    for proc in procs:
        proc.wait(600)  # a refused or failed pass fails the unit: its record says why
    return {
        n.name: json.loads(podman("exec", f"aisite-{SITE}-{n.name}", "cat", "/var/lib/aisite-pull/state.json"))
        for n in plan.nodes
    }


def without_vms(data: dict[str, Any]) -> dict[str, Any]:
    """The stack without its nodes to install (the lab's VMs): an ansible-pull pass on a VM emulated in software
    takes minutes, so the pull tests are about the container nodes; the VMs stay as they are."""
    site = data["config"]["aisite:site"]
    site["gpu_nodes"] = [g for g in site["gpu_nodes"] if "install" not in g]
    site.pop("provisioning", None)
    # A node cannot pull Ceph's cluster-wide steps (validate refuses it): the storage nodes keep the cluster the
    # push deploy made.
    site["storage_nodes"].pop("ceph", None)
    return data


@pytest.fixture(scope="module")
def pulled(
    up: subprocess.CompletedProcess[str], stack_file: Path, plan: Plan, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, Path, Path]]:
    """The site with its hosts and cluster layers pulled by the nodes from the lab's git mirror (this machine's
    address on the management bridge), commits signed by a key of the test's; the pull layer deployed by the
    controller. Yields (stack, repository, signing key); the mirror stops with the module."""
    assert up.returncode == 0, up.stderr
    tmp = tmp_path_factory.mktemp("pull")
    # The lab's admin principal (a key of the test's): the one its served model's promotion policy names as signer.
    key, line = ssh_signer(tmp, "labadmin@aisite-lab")
    data = without_vms(yaml.safe_load(stack_file.read_text()))
    data["config"]["aisite:site"]["gitops"] |= {
        "pull_layers": PULLED,
        "pull_repository": mirror.url(plan),
        "pull_interval_seconds": 3600,  # no pass of the timer's own during the tests: they start each
        "allowed_signers": [line],
    }
    text = yaml.safe_dump(data, sort_keys=False)
    stack = _write_stack(tmp, text)
    (tmp / "repo").mkdir()
    repo = make_site_repo(tmp / "repo")
    commit_site(repo, text, key, "The nodes pull their host layers")
    # The wheels of ansible-core the nodes' virtualenv is made from (what `lab up` fetches for a pulling site; not
    # `lab up` itself: that stack has no VM, and up would remove the lab's).
    images.ensure_pull_wheels(pull_wheels_dir(SITE), print)
    with mirror.serving(plan, repo):
        r = run_cli("deploy", str(stack), "--layer", "pull", "--json", env=BMC_ENV)
        assert r.returncode == 0, r.stdout + r.stderr
        yield stack, repo, key


@rotating("pull")
def test_nodes_pull_their_host_layers_and_converge(pulled: tuple[Path, Path, Path], plan: Plan) -> None:
    """Drift on every node (chrony stopped, NCCL's settings gone from the GPU nodes) is put back by the nodes'
    own passes of the commit they verified, with the same checks as the controller's push; a second pass changes
    nothing; the controller reads every node converged, and node exporter's textfile has the pass."""
    stack, repo, _ = pulled
    plan = build_plan(load_site(stack))  # the pulled site: its container nodes (without_vms)
    tip = git(repo, "rev-parse", "HEAD")
    for n in plan.nodes:
        podman("exec", f"aisite-{SITE}-{n.name}", "systemctl", "stop", "chrony")
    for n in plan.by_role("gpu"):
        podman("exec", f"aisite-{SITE}-{n.name}", "rm", "/etc/nccl.conf")
    first = pull_passes(plan)
    for rec in first.values():
        assert rec["status"] == "applied" and rec["commit"] == rec["applied_commit"] == tip, rec
        assert rec["changed"] > 0 and rec["failed"] == 0, rec
        assert rec["layers"] == PULLED
    check_hosts_baseline(plan)
    second = pull_passes(plan)
    assert {n: r["changed"] for n, r in second.items()} == {n.name: 0 for n in plan.nodes}
    assert all(r["status"] == "applied" for r in second.values()), second
    r = run_cli("reconcile", "nodes", "--stack", str(stack), "--tip", tip, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert {row["node"]: row["state"] for row in doc["nodes"]} == {n.name: "converged" for n in plan.nodes}
    assert f'state="converged"}} {float(len(plan.nodes))}' in Path(doc["metrics"]).read_text()  # for Prometheus
    gpu = plan.by_role("gpu")[0].name
    prom = podman("exec", f"aisite-{SITE}-{gpu}", "cat", "/var/lib/node_exporter/textfile_collector/aisite_pull.prom")
    assert f'aisite_pull_last_pass_success{{node="{gpu}"}} 1' in prom
    assert f'aisite_pull_applied_commit_info{{node="{gpu}",commit="{tip}"}} 1' in prom


@rotating("pull")
def test_a_pulled_commit_changes_only_the_node_it_names_and_an_unsigned_one_nothing(
    pulled: tuple[Path, Path, Path], plan: Plan
) -> None:
    """A label on one GPU node, committed and signed: every node fetches and verifies it, the labelled node's
    cluster layer changes and no other node's anything. An unsigned commit on top is refused by every node, which
    keeps what it applied; the controller reads them all failing."""
    stack, repo, key = pulled
    plan = build_plan(load_site(stack))  # the pulled site: its container nodes (without_vms)
    gpu01, gpu02 = [n.name for n in plan.by_role("gpu")][:2]
    data = yaml.safe_load(stack.read_text())
    data["config"]["aisite:site"]["gpu_nodes"][0]["nodes"][0]["labels"] = {"example.com/pool": "pulled"}
    signed = commit_site(repo, yaml.safe_dump(data, sort_keys=False), key, "gpu01 joins pool pulled")
    recs = pull_passes(plan)
    assert all(r["status"] == "applied" and r["applied_commit"] == signed for r in recs.values()), recs
    assert {n: r["changed"] > 0 for n, r in recs.items()} == {n.name: n.name == gpu01 for n in plan.nodes}
    assert "example.com/pool=pulled" in kubeadm_labels(gpu01)
    assert "example.com/pool=pulled" not in kubeadm_labels(gpu02)
    data["config"]["aisite:site"]["gpu_nodes"][0]["nodes"][0]["labels"] = {"example.com/pool": "unsigned"}
    unsigned = commit_site(repo, yaml.safe_dump(data, sort_keys=False), None, "Unsigned")
    recs = pull_passes(plan)
    for rec in recs.values():
        assert rec["status"] == "refused" and rec["applied_commit"] == signed, rec
        assert "not signed" in rec["message"], rec
    assert "example.com/pool=unsigned" not in kubeadm_labels(gpu01)
    r = run_cli("reconcile", "nodes", "--stack", str(stack), "--tip", unsigned, "--json")
    assert r.returncode == 1
    assert {row["state"] for row in json.loads(r.stdout)["nodes"]} == {"failing"}


@rotating("pull")
def test_a_site_that_stops_pulling_stops_every_nodes_timer(
    pulled: tuple[Path, Path, Path], stack_file: Path, plan: Plan
) -> None:
    """The lab's own stack pulls nothing: its pull layer stops and disables the timer on every node (and leaves the
    lab as the other tests found it)."""
    env = os.environ | {"CONTAINERS_CONF": str(CONF)}

    def timers() -> dict[str, str]:
        out = {}
        for n in containers(plan):
            cmd = ["podman", "exec", f"aisite-{SITE}-{n.name}", "systemctl", "is-enabled", "aisite-pull.timer"]
            out[n.name] = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False).stdout.strip()
        return out

    assert set(timers().values()) == {"enabled"}
    r = run_cli("deploy", str(stack_file), "--layer", "pull", "--json", env=BMC_ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    assert set(timers().values()) == {"disabled"}
