"""The fabric_cumulus role's apply path, run for real by ansible-playbook against a stand-in `nv` on this machine
(no Cumulus switch runs here): the rendered file is staged with `nv config replace`, applied only when `nv config
diff` shows a change, and never when the change touches eth0, the port aisite reaches the switch through."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from aisite.loader import load_site
from aisite.plan import build_plan
from aisite.render.inventory import inventory_yaml
from tests.conftest import ROOT

# Records each call; `nv config diff` prints what the test put in diff.txt.
FAKE_NV = """#!/bin/sh
echo "$*" >> "$NV_DIR/calls"
if [ "$1 $2" = "config diff" ]; then cat "$NV_DIR/diff.txt"; fi
"""


def run_role(tmp: Path, diff: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    nv_dir = tmp / "nv"
    nv_dir.mkdir(exist_ok=True)
    (nv_dir / "calls").write_text("")
    (nv_dir / "diff.txt").write_text(diff)
    nv = nv_dir / "nv"
    nv.write_text(FAKE_NV)
    nv.chmod(nv.stat().st_mode | stat.S_IEXEC)
    (tmp / "inventory.yml").write_text(inventory_yaml(build_plan(load_site("h100pod"))))
    (tmp / "play.yml").write_text(
        yaml.safe_dump(
            [
                {
                    "name": "NVUE | Apply",
                    "hosts": "mgmt01",
                    "gather_facts": False,
                    "roles": [{"role": "aisite.site.fabric_cumulus"}],
                }
            ]
        )
    )
    env = os.environ | {"PATH": f"{nv_dir}:{os.environ['PATH']}", "NV_DIR": str(nv_dir)}
    env["ANSIBLE_CONFIG"] = str(ROOT / "ansible.cfg")
    overrides = {
        "ansible_connection": "local",
        "ansible_become": False,
        "ansible_python_interpreter": sys.executable,
        "fabric_cumulus_config_path": str(tmp / "etc" / "fabric-nvue.yaml"),
    }
    r = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp / "inventory.yml"), str(tmp / "play.yml"),
         "-e", json.dumps(overrides), *extra],
        capture_output=True, text=True, env=env, cwd=ROOT, check=False, timeout=300,
    )  # fmt: skip
    return r, (nv_dir / "calls").read_text().splitlines()


@pytest.mark.parametrize(
    ("diff", "applied"),
    [
        # a port described with a peer's eth0 is not a change to this switch's eth0
        ("- set:\n    interface:\n      swp3:\n        description: leaf01:eth0\n", True),
        ("", False),  # nothing changed: nothing applied
    ],
)
def test_a_change_is_staged_compared_and_applied(tmp_path: Path, diff: str, applied: bool) -> None:
    r, calls = run_role(tmp_path, diff)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert calls[:2] == [f"config replace {tmp_path / 'etc' / 'fabric-nvue.yaml'}", "config diff"]
    assert ("config apply -y" in calls) == applied
    rendered = yaml.safe_load((tmp_path / "etc" / "fabric-nvue.yaml").read_text())[0]["set"]
    assert rendered["system"]["hostname"] == "mgmt01" and "10" in rendered["bridge"]["domain"]["br_default"]["vlan"]


def test_a_change_to_eth0_is_refused_and_nothing_applied(tmp_path: Path) -> None:
    eth0 = "- unset:\n    interface:\n      eth0:\n        ip:\n          address:\n            10.20.0.21/24: {}\n"
    r, calls = run_role(tmp_path, eth0)
    assert r.returncode != 0
    assert "applying would change eth0" in r.stdout and "nothing was applied" in r.stdout
    assert "config apply -y" not in calls
    r, calls = run_role(tmp_path, eth0, "-e", "fabric_cumulus_eth0_change_ok=true")
    assert r.returncode == 0 and "config apply -y" in calls
