"""node_health's module (aisite.site.node_health_files), run as Ansible runs it: the health
check's directories and files in one module run, each written only where it differs, validated before it replaces
anything, and nothing written in check mode."""

from __future__ import annotations

import grp
import json
import os
import pwd
from pathlib import Path
from typing import Any

from aisite.playbooks import PLUGINS
from tests.adhoc import run_module

LIBRARY = PLUGINS / "modules"
OWNER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name
VALID_JSON = 'python3 -c "import json, sys; json.load(open(sys.argv[1]))" %s'


def files(tmp: Path, settings: str = '{"rails": []}', mode: str = "0644") -> dict[str, Any]:
    own = {"owner": OWNER, "group": GROUP}
    return {
        "directories": [{"path": str(tmp / d), "mode": "0755", **own} for d in ("opt", "etc", "etc/units")],
        "files": [
            {"dest": str(tmp / "opt/node.py"), "content": "print({'node': 1})\n", "mode": mode, **own},
            {
                "dest": str(tmp / "etc/expected.json"),
                "content": settings,
                "mode": "0644",
                "validate": VALID_JSON,
                **own,
            },
        ],
    }


def run(args: dict[str, Any], check: bool = False, diff: bool = False) -> dict[str, Any]:
    return run_module("node_health_files", args, check, library=LIBRARY, diff=diff)


def test_writes_what_differs_once_then_nothing(tmp_path: Path) -> None:
    first = run(files(tmp_path))
    assert first["changed"] is True, first
    paths = [str(tmp_path / p) for p in ("opt", "etc", "etc/units", "opt/node.py", "etc/expected.json")]
    assert first["changed_paths"] == paths
    # Content as given, byte for byte.
    assert (tmp_path / "opt/node.py").read_text() == "print({'node': 1})\n"
    assert json.loads((tmp_path / "etc/expected.json").read_text()) == {"rails": []}
    assert (tmp_path / "etc/units").stat().st_mode & 0o7777 == 0o755
    # A directory made under a strict umask still gets the mode asked.
    strict = files(tmp_path / "strict")
    strict["directories"] = [
        {**d, "path": str(tmp_path / "strict" / "a" / "b"), "mode": "0751"} for d in strict["directories"][:1]
    ]
    strict["files"] = []
    old_umask = os.umask(0o077)
    try:
        assert run(strict)["changed"] is True
    finally:
        os.umask(old_umask)
    assert (tmp_path / "strict/a/b").stat().st_mode & 0o7777 == 0o751
    again = run(files(tmp_path))
    assert again["changed"] is False and again["changed_paths"] == [], again
    # One file's mode differs: that file alone changes, its content left as it was.
    mode = run(files(tmp_path, mode="0600"))
    assert mode["changed_paths"] == [str(tmp_path / "opt/node.py")], mode
    assert (tmp_path / "opt/node.py").stat().st_mode & 0o7777 == 0o600
    # One file's content differs: that file alone is written.
    settings = run(files(tmp_path, settings='{"rails": ["r0"]}', mode="0600"))
    assert settings["changed_paths"] == [str(tmp_path / "etc/expected.json")], settings


def test_content_that_fails_validation_replaces_nothing(tmp_path: Path) -> None:
    assert run(files(tmp_path))["changed"] is True
    bad = run(files(tmp_path, settings="{not json"))
    assert bad.get("failed") is True and "failed validation" in bad["msg"], bad
    assert json.loads((tmp_path / "etc/expected.json").read_text()) == {"rails": []}
    assert sorted(p.name for p in (tmp_path / "etc").iterdir()) == ["expected.json", "units"]  # no temporary left


def test_check_mode_says_what_would_change_and_writes_nothing(tmp_path: Path) -> None:
    checked = run(files(tmp_path), check=True, diff=True)
    assert checked["changed"] is True and len(checked["changed_paths"]) == 5, checked
    assert {d["after_header"] for d in checked["diff"]} == {
        str(tmp_path / "opt/node.py"),
        str(tmp_path / "etc/expected.json"),
    }
    assert list(tmp_path.iterdir()) == []


def test_a_bad_mode_or_a_directory_in_the_way_is_refused(tmp_path: Path) -> None:
    bad = run(files(tmp_path, mode="644x"))
    assert bad.get("failed") is True and "mode must be octal digits" in bad["msg"], bad
    (tmp_path / "opt" / "node.py").mkdir(parents=True, exist_ok=True)
    blocked = run(files(tmp_path))
    assert blocked.get("failed") is True and "is a directory" in blocked["msg"], blocked
