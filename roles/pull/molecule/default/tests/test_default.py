"""The node's own pass: installed (ansible-core in its virtualenv, the units), a signed tip applied and recorded
(state.json, the textfile metrics), a second pass changing nothing, an unsigned tip refused with nothing applied."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import ansible.release

STATE = "/var/lib/aisite-pull/state.json"
PROM = "/var/lib/node_exporter/textfile_collector/aisite_pull.prom"
# What a failed pass said: its log and the unit's journal.
LOGS = "cat /var/lib/aisite-pull/last.log; journalctl -u aisite-pull --no-pager | tail -40"


def state(host):  # type: ignore[no-untyped-def]
    return json.loads(host.file(STATE).content_string)


def tip(host):  # type: ignore[no-untyped-def]
    return host.check_output("git --git-dir=/srv/site.git rev-parse main")


def test_ansible_core_and_the_units_are_installed(host) -> None:  # type: ignore[no-untyped-def]
    core = host.check_output("/opt/aisite-pull/bin/ansible-pull --version").splitlines()[0]
    assert core == f"ansible-pull [core {ansible.release.__version__}]"  # the controller's own
    timer = host.service("aisite-pull.timer")
    assert timer.is_enabled and timer.is_running
    env = host.file("/etc/aisite/pull.env").content_string
    assert "AISITE_PULL_LAYERS=hosts\n" in env and "AISITE_PULL_SIGNERS=/etc/aisite/pull-allowed_signers\n" in env
    assert host.file("/usr/local/sbin/aisite-verify-commit").mode == 0o755


def test_the_collections_are_the_controllers_own(host) -> None:  # type: ignore[no-untyped-def]
    root = "/usr/share/ansible/collections/ansible_collections"
    for name in ("ansible.posix", "community.general"):
        ns, coll = name.split(".")
        mine = json.loads(host.file(f"{root}/{ns}/{coll}/MANIFEST.json").content_string)["collection_info"]
        here = importlib.util.find_spec(f"ansible_collections.{ns}.{coll}")
        assert here is not None and here.submodule_search_locations
        ctl = Path(next(iter(here.submodule_search_locations))) / "MANIFEST.json"
        assert mine["version"] == json.loads(ctl.read_text())["collection_info"]["version"], name
    # ansible-doc in the node's virtualenv finds a module of each: the node's ansible loads them.
    for module in ("ansible.posix.authorized_key", "community.general.modprobe"):
        assert host.run(f"/opt/aisite-pull/bin/ansible-doc -t module {module} >/dev/null").rc == 0, module


def test_a_pass_applies_the_signed_tip_and_records_it(host) -> None:  # type: ignore[no-untyped-def]
    r = host.run("systemctl start aisite-pull.service")
    assert r.rc == 0, host.run(LOGS).stdout
    assert host.file("/etc/aisite-pulled").content_string.strip() == "one"
    s = state(host)
    assert s["status"] == "applied" and s["commit"] == s["applied_commit"] == tip(host)
    assert s["changed"] >= 1 and s["failed"] == 0 and s["seconds"] > 0
    assert 0 < s["cpu_seconds"] < 10 * s["seconds"]  # its own and its children's (git, ansible-pull's playbook)
    prom = host.file(PROM).content_string
    node = s["node"]
    assert f'aisite_pull_last_pass_success{{node="{node}"}} 1' in prom
    assert f'aisite_pull_applied_commit_info{{node="{node}",commit="{tip(host)}"}} 1' in prom
    assert f'aisite_pull_last_pass_changed_tasks{{node="{node}"}} {s["changed"]}' in prom
    assert f'aisite_pull_last_pass_cpu_seconds{{node="{node}"}} {s["cpu_seconds"]}' in prom


def test_a_second_pass_changes_nothing(host) -> None:  # type: ignore[no-untyped-def]
    r = host.run("systemctl start aisite-pull.service")
    assert r.rc == 0, host.run(LOGS).stdout
    s = state(host)
    assert s["status"] == "applied" and s["changed"] == 0 and s["failed"] == 0


def test_an_unsigned_tip_is_refused_and_nothing_of_it_applied(host) -> None:  # type: ignore[no-untyped-def]
    signed = tip(host)
    host.run_test(
        "set -e; rm -rf /tmp/w && git clone -q -b main /srv/site.git /tmp/w"
        " && sed -i 's/pulled_value: one/pulled_value: two/' /tmp/w/manifests/molecule/inventory/hosts.yml"
        " && git -C /tmp/w -c user.name=x -c user.email=x@example.com commit -q -am 'Unsigned: value two'"
        " && git -C /tmp/w push -q origin main"
    )
    try:
        r = host.run("systemctl start aisite-pull.service")
        assert r.rc != 0
        s = state(host)
        assert s["status"] == "refused" and "is not signed" in s["message"], s
        assert s["applied_commit"] == signed and s["commit"] == ""
        assert host.file("/etc/aisite-pulled").content_string.strip() == "one"
        node = s["node"]
        assert f'aisite_pull_last_pass_success{{node="{node}"}} 0' in host.file(PROM).content_string
    finally:
        host.run_test(f"git --git-dir=/srv/site.git update-ref refs/heads/main {signed}")
