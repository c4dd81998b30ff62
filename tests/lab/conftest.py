"""The lab's shared fixtures: its stack (the lab's own, reusing `make lab`'s lab, or an `itest` copy on ranges of its
own), its plan, and the lab up for the whole session, taken down at its end.

The lab tests are one ordered scenario over one lab, split by layer into files numbered in the order they run
(pytest runs a directory's files by name): up, the site deploy, reconcile, provisioning, hosts and Ceph, bench and
health, the cluster, the BMCs, the rollout, the fabric, pull, then `down`, then the three-tier lab. They run on one
pytest worker (tests/conftest.py gives the whole directory one xdist scope); each file names the fixtures it builds
on, and says where it needs what an earlier file left.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from aisite.loader import load_site, resolve_stack
from aisite.plan import Plan, build_plan
from tests.conftest import ROOT, run_cli
from tests.lab.common import BMC_ENV, LAB_DIR, REUSE, SITE, _write_stack


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test here is a lab test; without root it is skipped, saying why (podman networks, veth)."""
    for item in items:
        if LAB_DIR not in item.path.parents:
            continue
        item.add_marker(pytest.mark.lab)
        if os.geteuid() != 0:
            item.add_marker(
                pytest.mark.skip(reason="the lab needs root (podman networks, veth between namespaces); not root here")
            )


@pytest.fixture(scope="session")
def stack_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lab stack itself (reusing `make lab`'s lab), or its `itest` copy on ranges of its own."""
    text = resolve_stack("lab").read_text()
    if not REUSE:
        text = text.replace("10.250.", "10.252.").replace("10.251.", "10.253.").replace("name: lab\n", "name: itest\n")
    return _write_stack(tmp_path_factory.mktemp("stack"), text)


@pytest.fixture(scope="session")
def oob_stack_file(stack_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same site with a BMC account to keep (sushy-tools has no AccountService: the role must say it skipped it).

    Only the out-of-band tests use it, so the whole-site deploys see the stack `make lab` deployed."""
    text = (
        stack_file.read_text()
        .replace(
            "    secrets:\n",
            "    secrets:\n      itest-ops:\n        username: ops\n"
            "        password_from: {env: AISITE_ITEST_OPS_PASSWORD}\n",
        )
        .replace("    oob:\n", "    oob:\n      accounts: [{secret: itest-ops, role: ReadOnly}]\n")
    )
    return _write_stack(tmp_path_factory.mktemp("oob-stack"), text)


@pytest.fixture(scope="session")
def plan(stack_file: Path) -> Plan:
    return build_plan(load_site(stack_file))


@pytest.fixture(scope="session")
def up(stack_file: Path, plan: Plan) -> Iterator[subprocess.CompletedProcess[str]]:
    result = run_cli("lab", "up", str(stack_file), env=BMC_ENV)
    if result.returncode == 0 and plan.provisioning and not REUSE:
        # Its VM node is installed over the network before anything reaches it (as `make lab` does).
        provisioned = run_cli("provision", str(stack_file), env=BMC_ENV)
        assert provisioned.returncode == 0, provisioned.stdout + provisioned.stderr
    try:
        yield result
    finally:
        run_cli("lab", "down", str(stack_file))
        if not REUSE:
            shutil.rmtree(ROOT / ".aisite" / SITE, ignore_errors=True)  # the BMC inventory the deploys wrote
