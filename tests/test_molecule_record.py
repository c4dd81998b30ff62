"""scripts/molecule_record.py: which molecule scenarios `make test` runs again. A scenario is skipped only when the
files it can read are byte for byte those it passed on; a change to its role, to a role it includes, to the shared
molecule base, or (for the reconciler, which runs the project) to the project's code makes it run."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The module, pointed at a clone of this project's HEAD (edited freely), with no pass recorded yet: the
    committed record names every scenario, and these tests record their own."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    (clone / ".ci" / "molecule-passed.json").unlink(missing_ok=True)
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import molecule_record

    monkeypatch.setattr(molecule_record, "ROOT", clone)
    monkeypatch.setattr(molecule_record, "RECORD", clone / ".ci" / "molecule-passed.json")
    return molecule_record


def _edit(root: Path, path: str) -> None:
    f = root / path
    f.write_text(f.read_text() + "\n# edited\n")


def test_a_scenario_reads_its_role_and_the_roles_it_includes(record: ModuleType) -> None:
    # ceph installs its packages with role packages; the kubernetes upgrade scenario includes file_state too.
    assert record.role_closure("ceph") == ["ceph", "packages"]
    assert {"file_state", "kubernetes", "packages"} <= set(record.role_closure("kubernetes/upgrade"))
    names = {str(p.relative_to(record.ROOT)) for p in record.inputs("ceph")}
    roles = f"{record.ROLES}/"
    assert f"{roles}ceph/tasks/main.yml" in names and f"{roles}packages/tasks/main.yml" in names
    assert f"{roles}ceph/molecule/default/converge.yml" in names and ".config/molecule/config.yml" in names
    assert "plugins/action/guarded_file.py" in names and f"{roles}conftest.py" in names
    # Not the collection's other roles, nor its playbooks: a change there runs other scenarios, not this one.
    assert not any(n.startswith((f"{roles}kubernetes/", "playbooks/", "aisite/plan/", "tests/")) for n in names), names
    reconciler = {str(p.relative_to(record.ROOT)) for p in record.inputs("reconciler")}
    assert "aisite/plan/__init__.py" in reconciler and "playbooks/site.yml" in reconciler
    # The project it installs, but of the roles' scenarios only its own.
    assert f"{roles}reconciler/molecule/default/converge.yml" in reconciler
    assert not any(n.startswith(f"{roles}pull/molecule/") for n in reconciler), reconciler


def test_a_change_to_what_a_scenario_reads_runs_it_again_and_nothing_else_does(
    record: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    for run in ("ceph", "node_health", "reconciler"):
        assert record.main(["passed", run, "100"]) == 0
    capsys.readouterr()
    assert record.main(["unchanged", "ceph"]) == 0
    said = capsys.readouterr().out
    assert f"passed on {dt.date.today().isoformat()}" in said and "100 s" in said, said
    assert record.main(["unchanged", "lldp"]) == 1  # never recorded
    _edit(record.ROOT, f"{record.ROLES}/packages/tasks/main.yml")  # a role ceph includes
    assert record.main(["unchanged", "ceph"]) == 1
    assert record.main(["unchanged", "node_health"]) == 0
    assert record.main(["unchanged", "reconciler"]) == 1  # the project's roles are its inputs
    assert record.main(["passed", "reconciler", "100"]) == 0
    _edit(record.ROOT, f"{record.ROLES}/pull/molecule/default/prepare.yml")  # another role's scenario
    assert record.main(["unchanged", "reconciler"]) == 0
    _edit(record.ROOT, "aisite/health/judge.py")  # reached by a link in roles/node_health/files
    assert record.main(["unchanged", "node_health"]) == 1
    _edit(record.ROOT, ".config/molecule/config.yml")
    assert record.main(["passed", "lldp", "5"]) == 0 and record.main(["unchanged", "lldp"]) == 0
    _edit(record.ROOT, ".config/molecule/config.yml")
    assert record.main(["unchanged", "lldp"]) == 1


def test_the_stalest_passes_are_named_to_run_again(record: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    today = dt.date.today()
    data = {
        run: {"inputs": "x", "passed": (today - dt.timedelta(days=days)).isoformat(), "commit": "c", "seconds": 1}
        for run, days in (("ceph", 40), ("lldp", 20), ("common", 3))
    }
    record.RECORD.parent.mkdir(exist_ok=True)
    record.RECORD.write_text(json.dumps(data))
    assert record.main(["stalest", "14", "1", "common", "lldp", "ceph"]) == 0
    assert capsys.readouterr().out.split() == ["ceph"]
    assert record.main(["stalest", "14", "5", "common", "lldp", "ceph"]) == 0
    assert capsys.readouterr().out.split() == ["ceph", "lldp"]
    assert record.main(["stalest", "14", "5", "common", "lldp"]) == 0  # only among those asked
    assert capsys.readouterr().out.split() == ["lldp"]


def test_the_committed_record_names_only_scenarios_that_exist() -> None:
    data = json.loads((ROOT / ".ci" / "molecule-passed.json").read_text())
    for run in data:
        role, _, scenario = run.partition("/")
        assert (ROOT / "roles" / role / "molecule" / (scenario or "default") / "molecule.yml").is_file(), run
