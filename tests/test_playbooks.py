"""Layer triggers: the hash that makes Pulumi re-run a layer's Ansible changes with its inventory and its roles."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from aisite import changes, playbooks
from aisite.accept.lab import ROCE_DEFAULTS


def test_site_playbook_imports_every_layer_and_the_roles_are_found() -> None:
    assert playbooks.playbook_roles(playbooks.PLAYBOOKS / "site.yml") == [
        "preflight",
        "bmc",
        "fabric_frr",
        "lldp",
        "fabric_cumulus",
        "fabric_sonic",
        "fabric_onyx",
        "common",
        "roce_host",
        "nvidia",
        "storage",
        "ceph",
        "node_health",
        "kubernetes",  # the cluster layer reads every node with it first
        "containerd",
        "etcd_backup",
        "kubernetes_certs",
        "packages",  # included by the roles' own tasks
        "file_state",
    ]
    for layer in ("oob", "fabric", "hosts", "cluster", "workloads"):
        for role in playbooks.playbook_roles(playbooks.PLAYBOOKS / f"{layer}.yml"):
            assert (playbooks.ROLES / role / "tasks" / "main.yml").is_file()


def test_layer_code_follows_role_files_but_not_molecule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    roles = tmp_path / "roles"
    shutil.copytree(playbooks.ROLES, roles)
    monkeypatch.setattr(playbooks, "ROLES", roles)
    monkeypatch.setattr(changes, "ROLES", roles)
    before = changes.layer_code("hosts")
    assert before == changes.layer_code("hosts")
    assert before != changes.layer_code("hosts", "rendered content")
    (roles / "preflight" / "molecule").mkdir(exist_ok=True)
    (roles / "preflight" / "molecule" / "note.yml").write_text("x: 1\n")
    assert changes.layer_code("hosts") == before
    tasks = roles / "preflight" / "tasks" / "hosts.yml"
    tasks.write_text(tasks.read_text() + "\n")
    after = changes.layer_code("hosts")
    assert after != before
    # A role reached only through another role's include_role counts too.
    oob = changes.layer_code("oob")
    shared = roles / "packages" / "tasks" / "main.yml"
    shared.write_text(shared.read_text() + "\n")
    assert changes.layer_code("hosts") != after
    assert changes.layer_code("oob") == oob  # the BMC role installs nothing through it


def test_layer_code_follows_the_projects_plugins_where_the_layer_uses_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    collection = tmp_path / "site"  # only its plugins: the collection is the whole checkout
    shutil.copytree(playbooks.PLUGINS, collection / "plugins")
    monkeypatch.setattr(changes, "COLLECTION", collection)
    monkeypatch.setattr(changes, "PLUGINS", collection / "plugins")
    hosts, oob = changes.layer_code("hosts"), changes.layer_code("oob")
    plugin = collection / "plugins" / "action" / "guarded_file.py"
    plugin.write_text(plugin.read_text() + "\n")
    assert changes.layer_code("hosts") != hosts  # its roles write their files with aisite.site.guarded_file
    assert changes.layer_code("oob") == oob  # the BMC role does not
    # Its roles are named by their full names (aisite.site.bmc): no use of the plugins.
    assert "aisite.site.bmc" in (playbooks.PLAYBOOKS / "oob.yml").read_text()
    # A filter is followed to the file that defines it: the BMC role reads ipmitool's output with one.
    cluster = changes.layer_code("cluster")
    hosts = changes.layer_code("hosts")
    filters = collection / "plugins" / "filter" / "ipmitool.py"
    filters.write_text(filters.read_text() + "\n")
    assert changes.layer_code("oob") != oob
    assert changes.layer_code("cluster") == cluster and changes.layer_code("hosts") == hosts


def test_what_the_package_reads_of_the_roles_is_where_it_looks() -> None:
    # The lab's acceptance compares the nodes' sysctls with roce_host's defaults (read from the collection).
    assert ROCE_DEFAULTS.is_relative_to(playbooks.ROLES)
    assert yaml.safe_load(ROCE_DEFAULTS.read_text())["roce_host_rail_sysctls"]
