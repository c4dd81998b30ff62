"""The cephx clients module (aisite.site.ceph_auth) run by Ansible against a real Ceph 16.2 monitor on loopback:
the plan's clients made with their capabilities, nothing to do the second time, changed capabilities set in
place, entities it was not given left alone; no key in what it returns; a hostile plan refused before any command."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.adhoc import run_module
from tests.ceph_local import LocalCeph, ceph_cluster

pytestmark = pytest.mark.skipif(
    shutil.which("ceph-mon") is None, reason="ceph-mon is not installed (scripts/setup.sh installs it)"
)

GPU = {
    "name": "client.gpu-nodes",
    "caps": [["mds", "allow r fsname=cephfs path=/datasets"], ["mon", "allow r fsname=cephfs"], ["osd", "allow r"]],
}
CSI = {"name": "client.csi-rbd", "caps": [["mgr", "profile rbd pool=vms"], ["mon", "profile rbd"]]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCeph]:
    with ceph_cluster(tmp_path_factory.mktemp("ceph")) as c:
        yield c


def _run(c: LocalCeph, identities: list[dict[str, Any]], check: bool = False) -> Any:
    return run_module("aisite.site.ceph_auth", {"identities": identities, "cluster": c.cmd[1:]}, check)


def _entity(c: LocalCeph, name: str) -> dict[str, Any]:
    out = subprocess.run([*c.cmd, "auth", "get", name, "-f", "json"], capture_output=True, text=True, check=True)
    (entity,) = json.loads(out.stdout)
    return dict(entity)


def test_clients_are_made_then_left_and_changed_caps_set_in_place(cluster: LocalCeph) -> None:
    dry = _run(cluster, [GPU, CSI], check=True)
    assert dry["changed"] and len(dry["actions"]) == 2, dry
    missing = subprocess.run([*cluster.cmd, "auth", "get", "client.gpu-nodes"], capture_output=True, check=False)
    assert missing.returncode == 2, "check mode made a client"

    first = _run(cluster, [GPU, CSI])
    assert not first.get("failed") and first["changed"], first
    gpu = _entity(cluster, "client.gpu-nodes")
    assert gpu["caps"] == dict(GPU["caps"]) and gpu["key"]  # type: ignore[arg-type]
    assert gpu["key"] not in json.dumps(first), "a key was returned"

    again = _run(cluster, [GPU, CSI])
    assert again["changed"] is False and again["actions"] == [], again

    subprocess.run([*cluster.cmd, "auth", "get-or-create", "client.someone", "mon", "allow r"], check=True)
    wider = {"name": "client.gpu-nodes", "caps": [*GPU["caps"][:2], ["osd", "allow rw"]]}
    changed = _run(cluster, [wider, CSI])
    assert changed["actions"] == [
        "auth caps client.gpu-nodes mds allow r fsname=cephfs path=/datasets mon allow r fsname=cephfs osd allow rw"
    ], changed
    after = _entity(cluster, "client.gpu-nodes")
    assert after["caps"]["osd"] == "allow rw" and after["key"] == gpu["key"], "the key stays; only its caps change"
    assert _entity(cluster, "client.someone")["caps"] == {"mon": "allow r"}, "an entity not given is left alone"


@pytest.mark.parametrize(
    ("identity", "message"),
    [
        ({"name": "client.a b", "caps": []}, "is not a client name"),
        ({"name": "osd.0", "caps": []}, "is not a client name"),
        ({"name": "client.x", "caps": [["rgw", "allow"]]}, "is not a [mds|mgr|mon|osd, capability] pair"),
        ({"name": "client.x", "caps": [["mon", "allow r'; ceph auth del client.admin"]]}, "is not one aisite writes"),
        ({"name": "client.x", "caps": [["mon", "allow r"], ["mon", "allow rw"]]}, "or given twice"),
    ],
)
def test_a_hostile_identity_is_refused_before_any_command(identity: dict[str, Any], message: str) -> None:
    # No cluster is reachable here: a command run would fail with another message.
    result = run_module("aisite.site.ceph_auth", {"identities": [identity], "cluster": ["-c", "/nonexistent"]})
    assert result.get("failed") and message in result["msg"], result
    assert "actions" not in result
