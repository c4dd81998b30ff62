"""The whole-site deploy on the lab (`make lab`'s, as it recorded it, or one of the tests' own): every host and
layer ran, and what the lab cannot do is said per host and role; then a second whole-site run (the reconciler's
full first pass) that changes nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aisite.lab.topology import vm_nodes
from aisite.plan import Plan
from aisite.reconcile import state as reconcile_state
from tests.conftest import ROOT, make_site_repo, run_cli
from tests.lab.common import BMC_ENV, BMC_PASSWORD, REUSE, SITE, reconcile, rotating


def first_site_deploy(stack_file: Path) -> dict[str, Any]:
    """The first whole-site deploy: `make lab`'s, as it recorded it, or one of our own."""
    if REUSE:
        doc: dict[str, Any] = json.loads((ROOT / ".aisite" / SITE / "deploys" / "site.json").read_text())
        assert doc["playbook"] == "site.yml" and doc["limit"] is None and doc["check"] is False, doc
        print(f"building on make lab's deploy of {doc['started']} ({doc['seconds']} s)")
        return doc
    r = run_cli("deploy", str(stack_file), "--json", env=BMC_ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    assert BMC_PASSWORD not in r.stdout + r.stderr
    return dict(json.loads(r.stdout))


def test_deploy_runs_site_yml_on_the_lab(up: subprocess.CompletedProcess[str], stack_file: Path, plan: Plan) -> None:
    assert up.returncode == 0, up.stderr
    doc = first_site_deploy(stack_file)
    assert doc["status"] == "successful" and doc["rc"] == 0 and doc["failures"] == [], doc["failures"]
    fabric = {s.name for s in plan.switches if s.role in ("leaf", "spine")}
    # localhost: the platform play, which talks to the API server from the controller.
    hosts = {n.name for n in plan.nodes} | {f"{n.name}-bmc" for n in plan.nodes} | fabric | {"localhost"}
    assert set(doc["recap"]) == hosts
    assert all(h["failed"] == 0 and h["unreachable"] == 0 and h["ok"] > 0 for h in doc["recap"].values())
    # What the lab cannot do is said per host and role, not passed over.
    gpu = plan.by_role("gpu")[0].name
    assert "no RDMA device" in doc["skipped"][gpu]["roce_host"][0]
    assert "no NVIDIA GPU" in doc["skipped"][gpu]["nvidia"][0]
    assert "no kernel NFS client" in doc["skipped"][gpu]["storage"][0]
    for n in plan.nodes:  # kubeadm and friends cannot be installed here: said, with the source it could not reach
        assert (
            "the lab reaches the Debian archive only, not https://pkgs.k8s.io/"
            in doc["skipped"][n.name]["kubernetes"][0]
        )
    assert "no NVIDIA GPU found" in doc["skipped"][gpu]["containerd"][0]
    assert "no Kubernetes API server" in doc["skipped"]["localhost"]["platform"][0]
    for cp in plan.kubernetes.control_plane:  # no kubeadm: no etcd to snapshot, no certificates to renew
        assert "no kubeadm certificates here" in doc["skipped"][cp]["kubernetes_certs"][0]
    for vm in vm_nodes(plan):  # a real kernel: what a container's hosts layer only writes is applied on a VM
        said = json.dumps(doc["skipped"].get(vm, {}))
        assert "read-only here" not in said and "no kernel NFS client" not in said and "no /lib/modules" not in said


@pytest.fixture(scope="module")
def first_pass(
    up: subprocess.CompletedProcess[str], stack_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The reconciler's first pass of the site's repository (this project with the lab's stack) as a full one
    (`--full`: the whole site deployed from the repository, every layer on every host)."""
    assert up.returncode == 0, up.stderr
    shutil.rmtree(reconcile_state.workdir(SITE), ignore_errors=True)
    repo = make_site_repo(tmp_path_factory.mktemp("repo"), {stack_file.name: stack_file.read_text()})
    rc, rec = reconcile(repo, "--full")
    assert rc == 0, rec
    yield rec
    shutil.rmtree(reconcile_state.workdir(SITE), ignore_errors=True)


@rotating("second-run")
def test_a_second_whole_site_run_changes_nothing(first_pass: dict[str, Any], plan: Plan) -> None:
    """Right after the deploy above, the reconciler's first pass (`--full`: `aisite deploy` of the same stack, every
    layer on every host, from a clone of the site's repository) is the second whole-site run: it changes nothing
    anywhere."""
    rec = first_pass
    assert rec["mode"] == "full" and rec["outcome"] == "applied" and rec["errors"] == [], rec
    fabric = {s.name for s in plan.switches if s.role in ("leaf", "spine")}
    hosts = {n.name for n in plan.nodes} | {f"{n.name}-bmc" for n in plan.nodes} | fabric | {"localhost"}
    assert set().union(*rec["layers"].values()) == hosts, rec["layers"]
    assert rec["changed"] == {}, rec["changed_tasks"]
