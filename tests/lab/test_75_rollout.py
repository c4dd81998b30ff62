"""`deploy --changed` holding back a driver change and rolling it node by node through the maintenance steps."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import yaml

from aisite.paths import members_file
from aisite.plan import Plan
from tests.conftest import ROOT, run_cli
from tests.lab.common import BMC_ENV, SITE, rotating


@rotating("faults")
def test_deploy_holds_back_a_driver_change_and_rolls_it_node_by_node(
    up: subprocess.CompletedProcess[str], stack_file: Path, plan: Plan
) -> None:
    """The stack deploy last applied is recorded with the gpu group on driver R570, as if the working tree had just
    moved it to the lab's branch: `deploy --changed` runs none of gpu01's and gpu02's layers itself and rolls them
    in waves of one (the lab's budget: one GPU node), each through every step (the containers say they cannot
    reboot; their health check verifies them); the stack is then recorded and the next deploy holds nothing."""
    from aisite.maintenance.hold import record_applied_stack
    from aisite.paths import applied_stack_file

    for folder in ("health", "maintenance"):
        shutil.rmtree(ROOT / ".aisite" / SITE / folder, ignore_errors=True)
    members_file(SITE).unlink(missing_ok=True)
    data = yaml.safe_load(stack_file.read_text())
    group = next(g for g in data["config"]["aisite:site"]["gpu_nodes"] if g["name"] == "gpu")
    group["driver_branch"] = 570
    record_applied_stack(SITE, yaml.safe_dump(data, sort_keys=False))
    members = sorted(n.name for n in plan.nodes if n.group == "gpu")
    started = time.monotonic()
    r = run_cli("deploy", str(stack_file), "--changed", "--json", env=BMC_ENV)
    seconds = time.monotonic() - started
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert sorted(doc["held_back"]["held_back"]) == members and doc["held_back"]["problems"] == [], doc["held_back"]
    assert doc["held_back"]["waves"] == [[m] for m in members]
    assert not any(set(members) & set(run["hosts"]) for run in doc["runs"]), doc["runs"]
    rollout = doc["rollout"]["rollout"]
    assert rollout["status"] == "done" and rollout["waves"] == [[m] for m in members], rollout
    for m in members:
        steps = [h.split()[1] for h in rollout["members"][m]["history"]]
        assert steps == ["cordon:", "drain:", "apply:", "reboot:", "verify:", "uncordon:"], (m, steps)
    # Each was accepted quickly at verify: its node checks and a pair each way on both rails with the other.
    accepted = doc["rollout"]["accepted"]
    assert [a.split(":")[0] for a in accepted] == members, accepted
    for line in accepted:
        passed, total = line.split(": ", 1)[1].split(" checks passed")[0].split(" of ")
        assert passed == total and "(4 pairs, lowest pair " in line, line
    assert applied_stack_file(SITE).read_text() == stack_file.read_text()
    again = run_cli("deploy", str(stack_file), "--changed", "--json", env=BMC_ENV)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert json.loads(again.stdout)["held_back"]["held_back"] == {}
    print(f"deploy holding back and rolling {', '.join(members)}: {seconds:.1f} s")
