"""Ceph's own health in `aisite health` (aisite.health.ceph): `ceph status` read strictly from a real Ceph 16.2
monitor on loopback and from a status recorded on the ceph role's molecule cluster, and whatever else the first
monitor might answer (another shape, another cluster, a failed command, too much) read as unreadable, never a
traceback and never a guess."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aisite.health.ceph import LIMIT, read_status, summary
from aisite.playbooks import PLAYBOOKS
from tests.ceph_local import ceph_cluster

FIXTURES = Path(__file__).parent / "fixtures" / "ceph"


def _answer(doc: Any, rc: int = 0) -> dict[str, Any]:
    return {"rc": rc, "stdout": json.dumps(doc), "stderr": ""}


def test_a_recorded_cluster_reads_with_its_warning_and_counts_and_healthy_without_it() -> None:
    """Recorded on the molecule cluster, whose monitor warned of this machine's disk (MON_DISK_LOW)."""
    doc = json.loads((FIXTURES / "status.json").read_text())
    h = read_status(_answer(doc), doc["fsid"])
    assert h.status == "HEALTH_WARN" and not h.healthy
    assert [(c.code, c.message) for c in h.checks] == [("MON_DISK_LOW", "mon stor01 is low on available space")]
    doc["health"] = {"status": "HEALTH_OK", "checks": {}, "mutes": []}
    h = read_status(_answer(doc), doc["fsid"])
    assert h.healthy and h.checks == [], h
    assert h.osds == (3, 3, 3) and h.pgs == doc["pgmap"]["num_pgs"] and h.pgs_not_clean == 0
    assert summary(h).startswith(f"Ceph: HEALTH_OK, OSDs 3/3 up, 3/3 in, PGs {h.pgs}/{h.pgs} clean")


def test_a_degraded_cluster_reads_with_its_checks_and_counts() -> None:
    """The recorded status as Ceph writes it while an OSD is down (the fields PGMap::print_summary adds)."""
    doc = json.loads((FIXTURES / "status.json").read_text())
    doc["health"] = {
        "status": "HEALTH_WARN",
        "checks": {
            "OSD_DOWN": {"severity": "HEALTH_WARN", "summary": {"message": "1 osds down", "count": 1}, "muted": False},
            "PG_DEGRADED": {
                "severity": "HEALTH_WARN",
                "summary": {"message": "Degraded data redundancy: 12/36 objects degraded", "count": 5},
                "muted": False,
            },
        },
        "mutes": [],
    }
    doc["osdmap"]["num_up_osds"] = 2
    doc["pgmap"] |= {"degraded_objects": 12, "degraded_total": 36, "degraded_ratio": 0.333}
    doc["pgmap"]["pgs_by_state"] = [
        {"state_name": "active+clean", "count": doc["pgmap"]["num_pgs"] - 5},
        {"state_name": "active+undersized+degraded", "count": 5},
    ]
    h = read_status(_answer(doc), doc["fsid"])
    assert not h.healthy and [c.code for c in h.checks] == ["OSD_DOWN", "PG_DEGRADED"]
    assert h.osds == (3, 2, 3) and h.pgs_not_clean == 5 and h.degraded_objects == 12
    assert "objects degraded 12" in summary(h) and "OSD_DOWN: 1 osds down" in summary(h)


@pytest.mark.skipif(shutil.which("ceph-mon") is None, reason="ceph-mon is not installed (scripts/setup.sh installs it)")
def test_a_real_monitor_reads_healthy_then_warned_by_a_flag_an_operator_set(tmp_path: Path) -> None:
    def status(cmd: list[str]) -> Any:
        r = subprocess.run([*cmd, "status", "--format", "json"], capture_output=True, text=True, check=False)
        return read_status({"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr}, json.loads(r.stdout)["fsid"])

    with ceph_cluster(tmp_path) as c:
        before = status(c.cmd)
        subprocess.run([*c.cmd, "osd", "set", "noout"], capture_output=True, check=True)
        after = status(c.cmd)
    assert before.healthy and before.osds == (0, 0, 0), before
    assert after.status == "HEALTH_WARN" and not after.healthy and not after.error, after
    assert [c.code for c in after.checks] == ["OSDMAP_FLAGS"] and "noout" in after.checks[0].message


def _bad(doc: dict[str, Any]) -> list[tuple[Any, str]]:
    def edit(path: str, value: Any) -> dict[str, Any]:
        d = copy.deepcopy(doc)
        *parents, last = path.split(".")
        node = d
        for p in parents:
            node = node[p]
        node[last] = value
        return d

    return [
        (None, "no answer"),
        ({"rc": 1, "stdout": "", "stderr": "[errno 110] RADOS timed out"}, "ceph status exited 1: [errno 110]"),
        ({"rc": 0, "stdout": "x" * (LIMIT + 1), "stderr": ""}, "over"),
        ({"rc": 0, "stdout": "{not json", "stderr": ""}, "not JSON"),
        # Issue 64's reproducer: 30 KB nested 5,000 levels raised RecursionError, which stopped `aisite health`.
        ({"rc": 0, "stdout": '{"a":' * 5000 + "1" + "}" * 5000, "stderr": ""}, "nested 5000 levels"),
        (_answer(edit("health.status", "HEALTH_FINE")), "health.status"),
        (_answer(edit("osdmap.num_up_osds", "3")), "osdmap.num_up_osds"),
        (_answer(edit("pgmap.pgs_by_state", [{"state_name": "active; rm -rf /", "count": 1}])), "state_name"),
        (_answer(edit("fsid", "00000000-0000-0000-0000-000000000000")), "another cluster answered"),
    ]


def test_anything_else_the_monitor_answers_is_unreadable_and_unhealthy() -> None:
    doc = json.loads((FIXTURES / "status.json").read_text())
    for answer, message in _bad(doc):
        h = read_status(answer, doc["fsid"])
        assert h.status == "unreadable" and not h.healthy and message in h.error, (message, h)
    escape = copy.deepcopy(doc)
    escape["health"] = {
        "status": "HEALTH_WARN",
        "checks": {"X": {"severity": "HEALTH_WARN", "summary": {"message": "\x1b[2Jgone\n" + "y" * 5000}}},
    }
    assert len(escape["health"]["checks"]["X"]["summary"]["message"]) > 4096
    assert read_status(_answer(escape), doc["fsid"]).status == "unreadable", "a message over its bound"
    escape["health"]["checks"]["X"]["summary"]["message"] = "\x1b[2Jgone\nnext"
    (check,) = read_status(_answer(escape), doc["fsid"]).checks
    assert "\x1b" not in check.message and "\n" not in check.message, check


@pytest.mark.skipif(shutil.which("ceph-mon") is None, reason="ceph-mon is not installed (scripts/setup.sh installs it)")
def test_the_health_status_playbook_reads_the_first_monitors_status(tmp_path: Path) -> None:
    """playbooks/health-status.yml's Ceph play, run by Ansible against an inventory whose first monitor is this
    machine (its ceph CLI pointed at a real monitor on loopback through CEPH_CONF and CEPH_ARGS), returns what
    `aisite health` reads as that cluster's status."""
    inv = tmp_path / "inventory.json"
    inv.write_text(
        json.dumps(
            {
                "all": {
                    "children": {
                        "ceph": {
                            "hosts": {
                                "stor01": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
                            },
                            "vars": {"aisite_ceph": {"monitors": ["stor01"]}},
                        }
                    }
                }
            }
        )
    )
    root = Path(__file__).resolve().parent.parent
    (tmp_path / "ceph").mkdir()
    with ceph_cluster(tmp_path / "ceph") as c:
        conf, key = c.cmd[c.cmd.index("-c") + 1], c.cmd[c.cmd.index("-k") + 1]
        env = os.environ | {
            "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
            "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
            "ANSIBLE_SHOW_CUSTOM_STATS": "1",
            "CEPH_CONF": conf,
            "CEPH_ARGS": f"-k {key}",
        }
        fsid = json.loads(subprocess.run([*c.cmd, "fsid", "-f", "json"], capture_output=True, check=True).stdout)[
            "fsid"
        ]
        play = [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(inv),
            str(PLAYBOOKS / "health-status.yml"),
        ]
        r = subprocess.run(play, cwd=root, env=env, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    stats = json.loads(r.stdout)["global_custom_stats"]
    h = read_status(stats["ceph_status"], fsid)
    assert h.healthy and not h.error and h.osds == (0, 0, 0), h
