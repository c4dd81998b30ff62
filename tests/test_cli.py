"""The `aisite` command as a user runs it: exit codes, stderr format, nothing written on bad input, deploy recap."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from aisite.apply import Request, select_runs
from aisite.changes import layer_state, layer_states
from aisite.deploy import applied_hosts
from aisite.layer_run import LayerRun
from aisite.loader import load_site
from aisite.paths import deploys_dir, site_dir
from aisite.plan import build_plan
from aisite.playbooks import LAYERS
from aisite.render.inventory import inventory, inventory_text, inventory_yaml, load_inventory
from tests.conftest import ROOT, pulling, run_cli, stack_data

LAB_SECRET = "lab-secret-Zq9"


def write_stack(tmp_path: Path, data: dict[str, object]) -> Path:
    path = tmp_path / "Pulumi.broken.yaml"
    path.write_text(yaml.safe_dump({"config": {"aisite:site": data}}))
    return path


def test_validate_accepts_every_shipped_stack() -> None:
    for stack in ("lab", "dc1", "h100pod"):
        r = run_cli("validate", stack)
        assert r.returncode == 0, r.stderr
        assert f"site {stack}" in r.stdout


def test_version_and_short_help_on_every_level() -> None:
    import importlib.metadata

    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"aisite {importlib.metadata.version('aisite')}"
    for argv in (["-h"], ["maintenance", "-h"], ["lab", "up", "-h"]):
        r = run_cli(*argv)
        assert r.returncode == 0 and "Usage: aisite" in r.stdout, (argv, r.stdout, r.stderr)
    assert "--install-completion" in run_cli("--help").stdout


def test_validate_json() -> None:
    r = run_cli("validate", "dc1", "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["valid"] is True
    assert doc["summary"]["nodes"] == {"control-plane": 3, "gpu": 3, "storage": 3}
    assert doc["summary"]["gpus"] == 4 + 2 * 16


def test_invalid_stack_exits_2_with_every_problem_on_stderr(tmp_path: Path) -> None:
    data = stack_data("lab")
    data["control_plane"]["count"] = 2
    data["gpu_nodes"][0]["model"] = "dgx-9"
    data["oob"]["credentials"] = "nope"
    path = write_stack(tmp_path, data)
    r = run_cli("validate", str(path))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith(f"error: {path}: ")
    # pydantic shape errors come first and stop the cross-field checks, so the model error is reported alone ...
    assert any(line.startswith("site.gpu_nodes[0].model: unknown GPU server model 'dgx-9'") for line in lines)
    data["gpu_nodes"][0]["model"] = "generic"
    r = run_cli("validate", str(write_stack(tmp_path, data)))
    lines = r.stderr.strip().splitlines()
    # ... and once shapes pass, every cross-field problem is listed, one `path: message` per line.
    assert any(line.startswith("site.control_plane.count: ") for line in lines)
    assert any(line.startswith("site.oob.credentials: secret 'nope'") for line in lines)
    assert r.stdout == ""


def test_render_writes_nothing_for_an_invalid_stack(tmp_path: Path) -> None:
    data = stack_data("lab")
    data["networks"]["storage"] = data["networks"]["management"]
    out = tmp_path / "out"
    r = run_cli("render", str(write_stack(tmp_path, data)), "--out", str(out))
    assert r.returncode == 2
    assert "site.networks.storage: 10.250.1.0/24 overlaps site.networks.management" in r.stderr
    assert not out.exists()


def test_missing_stack_and_bad_yaml(tmp_path: Path) -> None:
    r = run_cli("validate", "nosuchsite")
    assert r.returncode == 2 and "no such stack file" in r.stderr and "lab" in r.stderr
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text("config:\n  aisite:site: [unclosed\n")
    r = run_cli("validate", str(bad))
    assert r.returncode == 2 and f"{bad}:3:" in r.stderr and "not valid YAML" in r.stderr


def test_render_writes_inventory_plan_and_manifests(tmp_path: Path) -> None:
    out = tmp_path / "render"
    r = run_cli("render", "lab", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == [
        ".aisite-render",
        "cabling/cables.csv",
        "cabling/fabric.svg",
        "gitops/gitrepository.yaml",
        "gitops/namespace.yaml",
        "gitops/rbac.yaml",
        "gitops/stack.yaml",
        "inventory.yml",
        "manifests/acceptance.yaml",
        "manifests/admission.yaml",
        "manifests/charts/ceph-csi-cephfs.values.yaml",
        "manifests/charts/csi-driver-nfs.values.yaml",
        "manifests/charts/gpu-operator.values.yaml",
        "manifests/charts/index.yaml",
        "manifests/charts/kueue.values.yaml",
        "manifests/charts/network-operator.values.yaml",
        "manifests/kueue.yaml",
        "manifests/namespaces.yaml",
        "manifests/rails.yaml",
        "manifests/storage.yaml",
        "manifests/tenant-team-a.yaml",
        "manifests/tenant-team-b.yaml",
        "manifests/workloads/iperf3.yaml",
        "manifests/workloads/nccl-allreduce.yaml",
        "manifests/workloads/resnet50-train.yaml",
        "manifests/workloads/serving-classifier.yaml",
        "manifests/workloads/team-a.yaml",
        "plan.json",
        "slurm/topology.conf",
    ]
    # What `make manifests` commits for the site is what render writes.
    for p in (out / "manifests").rglob("*.yaml"):
        assert p.read_text() == (ROOT / "manifests" / "lab" / p.relative_to(out / "manifests")).read_text()
    plan = json.loads((out / "plan.json").read_text())
    assert [n["name"] for n in plan["nodes"]] == ["cp01", "gpu01", "gpu02", "infer01", "stor01", "stor02", "stor03"]


def test_plan_json_matches_the_human_table() -> None:
    doc = json.loads(run_cli("plan", "h100pod", "--json").stdout)
    assert len([n for n in doc["nodes"] if n["role"] == "gpu"]) == 32
    assert {r["leaf"] for r in doc["nodes"][3]["rails"]} == {f"leaf{i:02d}" for i in range(1, 9)}
    human = run_cli("plan", "h100pod")
    assert human.returncode == 0
    assert "256 GPUs" in human.stdout and "dgx032" in human.stdout and "DSCP 26 -> TC 3 (ToS 106)" in human.stdout


def test_deploy_runs_a_layer_through_ansible_runner_and_prints_the_recap() -> None:
    """The workloads layer is controller-side (preflight checks, then the jobs for an API server the lab does not
    have), so no lab is needed (and nothing is contacted: the other layers reach for BMCs, switches and nodes); the
    whole site.yml against a running lab is tested in tests/lab/."""
    r = run_cli("deploy", "lab", "--layer", "workloads", "--json", env={"AISITE_LAB_BMC_PASSWORD": LAB_SECRET})
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["status"] == "successful"
    assert set(doc["recap"]) == {"cp01", "localhost"}
    # No cluster here: the job files are named as skipped, with why; none is applied.
    (reason,) = doc["skipped"]["localhost"]["workloads"]
    assert (
        "5 job files (workloads/team-a.yaml, workloads/nccl-allreduce.yaml" in reason and "no Kubernetes API" in reason
    )
    assert doc["recap"]["localhost"]["changed"] == 0
    assert all(h["failed"] == 0 and h["ok"] > 0 for h in doc["recap"].values())
    assert LAB_SECRET not in r.stdout + r.stderr
    human = run_cli("deploy", "lab", "--layer", "workloads", env={"AISITE_LAB_BMC_PASSWORD": LAB_SECRET})
    assert human.returncode == 0, human.stderr
    assert "Recap" in human.stdout and "cp01" in human.stdout and "workloads.yml: successful" in human.stdout
    # The last run of the layer is kept for people and later steps (CI reads the lab's), with no secret in it.
    record = ROOT / ".aisite" / "lab" / "deploys" / "workloads.json"
    kept = json.loads(record.read_text())
    assert kept["status"] == "successful" and kept["playbook"] == "workloads.yml" and kept["check"] is False
    assert set(kept["recap"]) == {"cp01", "localhost"} and LAB_SECRET not in record.read_text()
    # A line per task.
    assert "Workloads | Preflight on the control plane | Preflight | Check every workload names a declared tenant" in (
        human.stderr
    )


def test_deploy_without_the_secret_is_invalid_input() -> None:
    r = run_cli("deploy", "lab")
    assert r.returncode == 2
    assert "site.secrets.lab-bmc.password_from: secret 'lab-bmc' was not found" in r.stderr


def test_a_secret_the_ipmi_bmcs_would_refuse_stops_every_command_before_it_runs() -> None:
    """24 bytes (what `make lab` once generated): IPMI 2.0 takes 20. Exit 2 before any play, container or probe."""
    env = {"AISITE_LAB_BMC_PASSWORD": "Q" * 24}
    want = (
        "site.secrets.lab-bmc: the password is 24 bytes; IPMI 2.0 BMCs accept at most 20 "
        "(used by gpu02-bmc (10.250.0.4), infer01-bmc (10.250.0.240), stor01-bmc (10.250.0.5), "
        "stor02-bmc (10.250.0.6), stor03-bmc (10.250.0.7))"
    )
    for args in (("deploy", "lab"), ("deploy", "lab", "--layer", "oob"), ("lab", "up"), ("oob", "discover", "lab")):
        r = run_cli(*args, env=env)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.splitlines()[1:] == [want], (args, r.stderr)
        assert "Recap" not in r.stdout and not re.search(r"\.yml: \w+", r.stderr + r.stdout), (args, r.stdout)
        assert "Q" * 24 not in r.stderr


def test_deploy_rejects_an_unknown_layer() -> None:
    r = run_cli("deploy", "lab", "--layer", "nope")
    assert r.returncode == 2 and "unknown layer 'nope'" in r.stderr


def test_a_failing_play_exits_1_and_names_the_host() -> None:
    """The preflight role stops a layer whose host variables are inconsistent (here: a rail MTU off the plan).
    Every host is pointed at a closed port on loopback: its checks run on the controller, and a running lab (CI's)
    is never reached (the rest of the hosts layer ran on it for 8 minutes, beside the lab's own tests)."""
    from aisite.loader import load_site
    from aisite.plan import build_plan

    text = inventory_yaml(build_plan(load_site("lab")))
    inv = load_inventory(text)
    inv["all"]["children"]["gpu_nodes"]["hosts"]["gpu02"]["aisite_node"]["rails"][1]["mtu"] = 1500
    for group in inv["all"]["children"].values():
        for host in (group.get("hosts") or {}).values():
            host.update(ansible_host="127.0.0.1", ansible_port=1)
    state = layer_state("hosts", inv)
    # As a Pulumi layer hands it over (aisite.layer_run), recorded under a site of its own, not the lab's.
    run = LayerRun(
        site="playtest", layer="hosts", inventory=inventory_text(inv), states=state.hosts, pending=["gpu01", "gpu02"]
    )
    try:
        r = run_cli("play", stdin=run.model_dump_json())
        assert r.returncode == 1
        assert "gpu02: Preflight | Check rails use the host MTU and distinct tables" in r.stderr
        assert "gpu01: ok=" in r.stdout and "gpu02: ok=" in r.stdout and "gpu03: ok=" not in r.stdout
        record = json.loads((deploys_dir("playtest") / "pulumi-hosts.json").read_text())
        assert record["status"] == "failed" and record["runs"] == [{"layer": "hosts", "hosts": ["gpu01", "gpu02"]}]
        assert applied_hosts("playtest") == {}  # a failed run applied nothing
    finally:
        shutil.rmtree(site_dir("playtest"), ignore_errors=True)


def test_play_refuses_a_bad_document_with_every_problem() -> None:
    doc = {"site": "Lab!", "layer": "platform", "inventory": "", "states": {"h": "x"}, "pending": [], "extra": 1}
    r = run_cli("play", stdin=json.dumps(doc))
    assert r.returncode == 2, r.stderr
    for path in ("stdin.site", "stdin.layer", "stdin.states.h", "stdin.extra"):
        assert f"{path}: " in r.stderr, (path, r.stderr)
    doc = {"site": "lab", "layer": "hosts", "inventory": "", "states": {"gpu01": "a" * 64}, "pending": ["gpu09"]}
    r = run_cli("play", stdin=json.dumps(doc))
    assert r.returncode == 2 and "pending hosts the layer does not target: gpu09" in r.stderr, r.stderr


def test_play_with_nothing_pending_runs_nothing() -> None:
    run = LayerRun(site="playtest", layer="oob", inventory="all: {}\n", states={"gpu01": "a" * 64}, pending=[])
    r = run_cli("play", stdin=run.model_dump_json())
    assert r.returncode == 0 and "oob: nothing to run" in r.stdout, r.stderr
    assert not site_dir("playtest").exists()


def test_unwritable_output_is_a_failure_not_a_traceback(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = run_cli("render", "lab", "--out", str(blocker / "sub"))
    assert r.returncode == 1
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr


def test_deploy_leaves_no_inventory_or_artifacts_behind(tmp_path: Path) -> None:
    env = {"AISITE_LAB_BMC_PASSWORD": LAB_SECRET, "TMPDIR": str(tmp_path)}
    r = run_cli("deploy", "lab", "--layer", "workloads", env=env)
    assert r.returncode == 0, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_lab_refuses_a_real_site() -> None:
    """dc1's ranges belong to real hosts: the lab never puts them on this machine's bridges."""
    for cmd in ("up", "status", "down"):
        r = run_cli("lab", cmd, "dc1")
        assert r.returncode == 2, r.stderr
        assert "describes real hosts" in r.stderr


def test_deploy_changed_runs_only_the_hosts_whose_state_moved(tmp_path: Path) -> None:
    """Hosts whose state in a layer is the one recorded as applied are skipped; a --limit narrows among the
    pending ones; what a successful run reached is recorded; a check's drift is forgotten from the record."""
    from aisite.changes import layer_states, site_layer_inputs
    from aisite.deploy import applied_hosts, forget_applied, record_applied
    from aisite.loader import load_site
    from aisite.plan import build_plan
    from aisite.playbooks import LAYERS

    stack = tmp_path / "Pulumi.chgtest.yaml"
    stack.write_text((ROOT / "stacks" / "Pulumi.lab.yaml").read_text().replace("name: lab\n", "name: chgtest\n"))
    states = layer_states(LAYERS, *site_layer_inputs(build_plan(load_site(stack))))
    env = {"AISITE_LAB_BMC_PASSWORD": LAB_SECRET}
    try:
        # Every layer as if applied, but the workloads layer on localhost (controller-only: runs without a lab).
        record_applied("chgtest", {n: s.hosts for n, s in states.items()}, {"workloads": ["localhost"]})
        assert set(applied_hosts("chgtest")["workloads"]) == {"cp01"}
        r = run_cli("deploy", str(stack), "--changed", "--limit", "cp01", "--json", env=env)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["layers"] == [], "cp01 is applied: nothing to run among it"
        r = run_cli("deploy", str(stack), "--changed", "--json", env=env)
        doc = json.loads(r.stdout)
        # Only localhost is pending; Ansible cannot be limited to it alone, so the layer runs whole.
        assert r.returncode == 0 and doc["runs"] == [{"layer": "workloads", "hosts": ["cp01", "localhost"]}], doc
        assert set(doc["recap"]) == {"cp01", "localhost"}
        assert applied_hosts("chgtest")["workloads"] == states["workloads"].hosts
        again = run_cli("deploy", str(stack), "--changed", env=env)
        assert again.returncode == 0 and "nothing to run" in again.stdout, again.stdout + again.stderr
        assert run_cli("deploy", str(stack), "--changed", "--layer", "oob", env=env).returncode == 2
        bad = run_cli("deploy", str(stack), "--changed", "--limit", "gpu*", env=env)
        assert bad.returncode == 2 and "host and group names" in bad.stderr
        # A host made afresh (a lab container recreated, a node reprovisioned) has nothing applied any more.
        forget_applied("chgtest", ["cp01"])
        assert all("cp01" not in hosts for hosts in applied_hosts("chgtest").values())
        assert "gpu01" in applied_hosts("chgtest")["hosts"]
        forget_applied("chgtest")  # the lab taken down
        assert applied_hosts("chgtest") == {}
    finally:
        shutil.rmtree(ROOT / ".aisite" / "chgtest", ignore_errors=True)


def test_deploy_holds_back_a_driver_change_and_rolls_it_from_the_canary(tmp_path: Path) -> None:
    """Against the stack the last whole-site deploy applied (a driver branch older than the working tree's), deploy
    runs no GPU node's layers itself and starts the rollout (here it stops at the canary's cordon: no lab runs);
    the next deploy keeps the rollout's members out and says so; a narrowed deploy rolls nothing."""
    from aisite.changes import layer_states, site_layer_inputs
    from aisite.deploy import record_applied
    from aisite.loader import load_site
    from aisite.maintenance.hold import record_applied_stack
    from aisite.paths import applied_stack_file, maintenance_dir
    from aisite.plan import build_plan
    from aisite.playbooks import LAYERS

    # On loopback addresses no lab uses: the rollout this starts must reach no host (with a lab up, Ansible's SSH
    # would otherwise reuse its master connection to the lab's node at the same address, and change it).
    text = (ROOT / "stacks" / "Pulumi.lab.yaml").read_text().replace("name: lab\n", "name: holdtest\n")
    text = text.replace("10.250.", "127.250.").replace("10.251.", "127.251.")
    stack = tmp_path / "Pulumi.holdtest.yaml"
    stack.write_text(text)
    data = yaml.safe_load(text)
    for group in data["config"]["aisite:site"]["gpu_nodes"]:
        group["driver_branch"] = 570
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / stack.name).write_text(yaml.safe_dump(data, sort_keys=False))
    plan, old = build_plan(load_site(stack)), build_plan(load_site(tmp_path / "old" / stack.name))
    gpus = [n.name for n in plan.by_role("gpu")]
    env = {"AISITE_LAB_BMC_PASSWORD": LAB_SECRET}
    try:
        # Every host as the old stack left it: the GPU nodes' host layer is pending under the new one.
        states = layer_states(LAYERS, *site_layer_inputs(old))
        record_applied("holdtest", {n: s.hosts for n, s in states.items()}, {})
        pending = layer_states(LAYERS, *site_layer_inputs(plan))["hosts"].pending(states["hosts"].hosts)
        assert set(pending) == set(gpus)
        record_applied_stack("holdtest", yaml.safe_dump(data, sort_keys=False))
        r = run_cli("deploy", str(stack), "--changed", "--json", env=env)
        assert r.returncode == 1, r.stdout + r.stderr
        doc = json.loads(r.stdout)
        branch = plan.by_role("gpu")[0].gpu.driver_branch  # type: ignore[union-attr]
        assert doc["held_back"]["held_back"] == dict.fromkeys(gpus, f"NVIDIA driver R570 -> R{branch}")
        [canary] = doc["held_back"]["waves"][0]  # one node first: the lab's budget is one GPU node
        assert canary in gpus and doc["held_back"]["problems"] == []
        assert doc["runs"] == [], doc["runs"]  # every pending host is held back
        rollout = doc["rollout"]["rollout"]
        assert rollout["status"] == "failed" and rollout["message"].startswith(f"wave 1, cordon failed on {canary}")
        assert rollout["change"] == f"deploy of {stack} (held back from it)"
        assert (maintenance_dir("holdtest") / "rollout.json").is_file()
        # The members are the rollout's now: the stack is recorded as applied, and the next deploy leaves them out.
        assert applied_stack_file("holdtest").read_text() == text
        again = run_cli("deploy", str(stack), "--changed", "--json", env=env)
        held = json.loads(again.stdout)["held_back"]
        assert again.returncode == 0 and held["problems"] == [], again.stdout + again.stderr
        assert set(held["held_back"]) == set(gpus)
        assert all(why.startswith("in the rollout under way (deploy of") for why in held["held_back"].values())
        # A narrowed deploy rolls nothing: the change waits, said (a controller layer holds nothing back).
        (maintenance_dir("holdtest") / "rollout.json").unlink()
        record_applied_stack("holdtest", yaml.safe_dump(data, sort_keys=False))
        layer = run_cli("deploy", str(stack), "--layer", "workloads", "--json", env=env)
        assert layer.returncode == 0 and json.loads(layer.stdout)["held_back"]["held_back"] == {}  # not a member layer
        hosts = run_cli("deploy", str(stack), "--changed", "--limit", "cp01", "--json", env=env)
        held = json.loads(hosts.stdout)["held_back"]
        assert hosts.returncode == 1 and held["problems"] == [
            "a deploy narrowed by --layer or --limit does not roll: deploy the whole site"
        ]
        assert not (maintenance_dir("holdtest") / "rollout.json").exists()
    finally:
        shutil.rmtree(ROOT / ".aisite" / "holdtest", ignore_errors=True)


def test_deploy_platform_without_a_cluster_says_so_and_changes_nothing() -> None:
    """The lab has no API server (no kubeadm): the platform layer reports that, per chart and file, and passes."""
    r = run_cli("deploy", "lab", "--layer", "platform", "--json", env={"AISITE_LAB_BMC_PASSWORD": LAB_SECRET})
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["layers"] == ["platform"] and doc["changes"] == [] and set(doc["recap"]) == {"localhost"}
    (reason,) = doc["skipped"]["localhost"]["platform"]
    assert "no Kubernetes API server" in reason and "gpu-operator, network-operator, kueue, csi-driver-nfs" in reason
    assert "the lab reaches the Debian archive only" in reason


def test_the_layers_the_nodes_pull_are_left_to_them(tmp_path: Path) -> None:
    """gitops.pull_layers: a whole-site deploy, --check and --changed run every other layer, each alone, and not
    the pulled ones; `--layer hosts` still pushes it (a site bootstrapping its nodes). A site that pulls nothing
    deploys as before, the whole site in one run."""
    stack = tmp_path / "Pulumi.lab.yaml"
    stack.write_text(pulling((ROOT / "stacks" / "Pulumi.lab.yaml").read_text(), "[hosts]"))
    plan = build_plan(load_site(stack))
    inv = inventory(plan)
    states = layer_states(LAYERS, inv, {})
    pulled = ("hosts",)
    others = [[n] for n in LAYERS if n != "hosts"]
    assert [names for names, _ in select_runs(states, inv, Request(), {}, pulled)] == others
    assert [names for names, _ in select_runs(states, inv, Request(check=True), {}, pulled)] == others
    changed = select_runs(states, inv, Request(changed=True), {}, pulled)  # nothing applied: all pending
    assert [names for names, _ in changed] == others
    assert select_runs(states, inv, Request(layer="hosts"), {}, pulled) == [(["hosts"], None)]
    assert select_runs(states, inv, Request(limit="gpu01"), {}) == [(list(LAYERS), "gpu01")]


def test_help_names_each_values_kind_as_a_terminal_does_on_every_command() -> None:
    """No `<bool>` or `<str>` (typer's markup-like kinds) in any command's help; a flag shows no kind at all."""
    import typer
    from typer.testing import CliRunner

    from aisite.cli import app

    runner = CliRunner()
    paths: list[list[str]] = [[]]
    group: Any = typer.main.get_command(app)  # typer's own click: its classes are not click's
    for name, cmd in group.commands.items():
        paths.append([name])
        paths += [[name, sub] for sub in getattr(cmd, "commands", {})]
    assert len(paths) > 30
    for path in paths:
        r = runner.invoke(app, [*path, "-h"], terminal_width=120)
        assert r.exit_code == 0, (path, r.output)
        assert not re.search(r"<(bool|str|int|float|path|datetime|list\[\w+\])>", r.output), (path, r.output)
    r = runner.invoke(app, ["reconcile", "-h"], terminal_width=120)
    assert re.search(r"--interval +FLOAT ", r.output) and re.search(r"--once +One pass", r.output), r.output


def test_every_commands_help_says_first_whether_it_reaches_a_host_or_changes_anything() -> None:
    """aisite.cli.effects leads each help with one sentence from its table; one that acts names its dry run."""
    import typer.main

    from aisite.cli import app
    from aisite.cli.effects import ACTS, EFFECTS

    seen: list[str] = []

    def walk(command: Any, path: str) -> None:
        if hasattr(command, "list_commands"):
            for name in command.list_commands(None):
                walk(command.get_command(None, name), f"{path} {name}".strip())
            return
        seen.append(path)
        assert (command.help or "").startswith(EFFECTS[path] + "\n"), path

    walk(typer.main.get_command(app), "")
    assert sorted(seen) == sorted(EFFECTS)
    for name in ("health", "provision", "maintenance start"):
        assert "--dry-run" in EFFECTS[name] and "--dry-run" in run_cli(*name.split(), "--help").stdout
    assert EFFECTS["deploy"].startswith(ACTS) and "--check" in EFFECTS["deploy"]
    shown = " ".join(run_cli("status", "--help").stdout.split())
    assert "reaches no host, changes nothing" in shown and "--health" in shown


def test_completion_offers_the_site_repositorys_stacks_and_the_layers() -> None:
    """Shell completion as bash asks it (the `_AISITE_COMPLETE` protocol click and typer use)."""

    def complete(words: str) -> list[str]:
        at = len(words.split()) - (0 if words.endswith(" ") else 1)
        r = run_cli(env={"_AISITE_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(at)})
        assert r.returncode == 0, r.stderr
        return r.stdout.split()

    assert complete("aisite validate l") == ["lab", "lab3"]
    assert complete("aisite reconcile status h") == ["h100pod"]
    assert complete("aisite deploy lab --layer p") == ["platform", "pull"]
    assert complete("aisite deploy lab --layer ") == [
        "oob",
        "fabric",
        "hosts",
        "cluster",
        "platform",
        "workloads",
        "reconciler",
        "pull",
    ]
