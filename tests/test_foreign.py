"""What nodes, BMCs and clusters send back is data: never a template on the controller, never paint on the
operator's terminal. The canary tests run the real playbooks through `run_playbook` (ansible-runner, ansible-core)
with a template that would touch a file in every field a node controls; the control test shows the canary does
fire when the marking is taken away, so the others could fail.

run_playbook's callers and what covers them here: `aisite health` (health-status.yml reads the nodes' records,
health-apply.yml gets the decision: both run with canaries), `reconcile nodes` (pull-status.yml: canaries),
`accept` on a site (accept-job.yml: canaries), `provision` (boot-arm.yml: canaries; boot-server.yml gets the
controller's own image paths and keys), `render --switch-configs` and `deploy` (the controller's own paths, file
names and CLI flags). Every one goes through the same marking (`extravars_text`, property-tested); discovery and the
reconcile records never reach Ansible (test_one_way_to_ansible holds ansible-runner to run_playbook)."""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from aisite import deploy, foreign
from aisite.deploy import extravars_text, run_playbook
from aisite.health.site import apply_vars, run_pass
from aisite.loader import load_site
from aisite.plan import Plan, build_plan
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def plan() -> Plan:
    return build_plan(load_site("lab"))


class Canaries:
    """Templates that would each touch a file of their own, were Ansible to evaluate them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.planted: list[str] = []

    def __call__(self, field: str) -> str:
        # Short enough to pass whole through the controller's bounds on a node's text (120 characters a field):
        # a canary cut short would prove nothing.
        name = re.sub(r"[^A-Za-z0-9]", "_", field)[:12]
        self.planted.append(name)
        return f"{{{{ lookup('pipe','touch {self.folder}/{name}') }}}}"

    def fired(self) -> list[str]:
        return sorted(p.name for p in self.folder.iterdir())


@pytest.fixture
def canary() -> Iterator[Canaries]:
    folder = Path(tempfile.mkdtemp(prefix="c", dir="/tmp"))
    yield Canaries(folder)
    shutil.rmtree(folder, ignore_errors=True)


def local_inventory(groups: list[str]) -> str:
    """One host, `gpu01`, reached over the local connection, in the given groups."""
    host = {"gpu01": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}
    return yaml.safe_dump({"all": {"children": {g: {"hosts": host} for g in groups}}})


def hostile_status(c: Canaries, node: str = "gpu01") -> dict[str, Any]:
    """A status.json with a canary in every field a node controls (the node name must stay its own, or the
    record is refused whole: that is tested in test_health)."""
    return {
        "node": node,
        "healthy": False,
        "reason": c("reason"),
        "at": c("at"),
        "problems": [
            {"check": "rail", "subject": c("subject"), "message": c("message")},
            {"check": "ecc", "subject": c("subject2"), "message": c("message2")},
        ],
        "checked": [c("checked")],
        "skipped": [c("skipped")],
        c("key"): c("value"),
    }


def test_extra_vars_are_written_unsafe_at_every_depth() -> None:
    """Every string in extra vars reaches Ansible tagged `!unsafe`, however deep; numbers and bools stay typed."""
    strings = st.text(min_size=0, max_size=12) | st.just("{{ x }}") | st.just("{% if %}")
    leaves = strings | st.integers(-(2**53), 2**53) | st.booleans() | st.none()
    values = st.recursive(
        leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(strings, inner, max_size=3)
    )

    tagged: list[str] = []

    class Loader(yaml.SafeLoader):
        pass

    def unsafe(loader: yaml.SafeLoader, node: yaml.Node) -> str:
        value = loader.construct_scalar(node)  # type: ignore[arg-type]
        tagged.append(str(value))
        return str(value)

    Loader.add_constructor("!unsafe", unsafe)

    def strings_in(value: Any) -> Iterator[str]:
        if isinstance(value, str):
            yield value
        elif isinstance(value, list):
            for v in value:
                yield from strings_in(v)
        elif isinstance(value, dict):
            for v in value.values():
                yield from strings_in(v)

    @given(values)
    def check(value: Any) -> None:
        tagged.clear()
        doc = {"aisite_data": value}
        back = yaml.load(extravars_text(doc), Loader=Loader)  # a SafeLoader with one more tag
        assert back == doc
        for s in strings_in(value):
            assert s in tagged or not any(m in s for m in ("{{", "{%", "{#")), s

    check()
    with pytest.raises(ValueError, match="not an identifier"):
        extravars_text({"{{ x }}": 1})


def test_health_apply_never_evaluates_what_a_node_reported(
    plan: Plan, canary: Canaries, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reproducer of the issue: a node's problems travel through `aisite health`'s decision into
    health-apply.yml, whose loops template every field. Run with and without a kubeconfig (the report task, and
    the cluster tasks' loops and labels): no canary fires."""
    records = {n.name: {"node": n.name, "problems": []} for n in plan.nodes} | {"gpu01": hostile_status(canary)}
    hp = run_pass(plan, records, tmp_path / "health", tmp_path / "members.json")
    assert [a.kind for a in hp.actions] == ["quarantine"]
    assert "{{ lookup" in hp.actions[0].reason  # the node's words are kept, as words
    inventory = local_inventory(["control_plane"])
    for kubeconfig in (tmp_path / "absent", tmp_path / "kubeconfig"):
        if kubeconfig.name == "kubeconfig":
            kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
        extra = apply_vars(hp) | {"aisite_kubeconfig": str(kubeconfig)}
        result = run_playbook("health-apply.yml", inventory, extravars=extra)
        assert result.recap, result.failures
        assert canary.fired() == [], result.failures


def test_the_control_a_canary_fires_when_extra_vars_are_trusted(
    plan: Plan, canary: Canaries, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the marking (extra vars written as plain JSON, as ansible-runner would) the same pass runs the
    node's command: the canary tests above can fail."""
    records = {n.name: {"node": n.name, "problems": []} for n in plan.nodes} | {"gpu01": hostile_status(canary)}
    hp = run_pass(plan, records, tmp_path / "health", tmp_path / "members.json")
    monkeypatch.setattr(deploy, "extravars_text", lambda ev: json.dumps(dict(ev)))
    extra = apply_vars(hp) | {"aisite_kubeconfig": str(tmp_path / "absent")}
    run_playbook("health-apply.yml", local_inventory(["control_plane"]), extravars=extra)
    assert canary.fired(), "the control canary did not fire: the canary tests prove nothing"


@pytest.mark.parametrize(
    "case",
    [
        ("health-status.yml", "gpu_nodes", "health_status_file", "health_states"),
        ("pull-status.yml", "pull", "pull_status_file", "pull_states"),
    ],
)
def test_a_nodes_record_is_read_as_data(case: tuple[str, str, str, str], canary: Canaries, tmp_path: Path) -> None:
    """The playbooks that read what a node wrote (health status, pull state) return it as it was written, with
    nothing evaluated, and the controller's reading of it is bounded and printable."""
    doc = hostile_status(canary) | {"applied_commit": canary("commit"), "message": canary("msg"), "ended": 10**400}
    record = tmp_path / "record.json"
    record.write_text(json.dumps(doc))
    playbook, group, var, stat = case
    result = run_playbook(playbook, local_inventory([group]), extravars={var: str(record), "health_now": False})
    assert result.ok, result.failures
    assert canary.fired() == []
    # Text, parsed on the controller alone (bounded in size and depth), never by Ansible's from_json.
    text = result.stats[stat]["gpu01"]
    assert isinstance(text, str)
    back = foreign.record(text, "record")
    assert back["problems"] == doc["problems"] and back["applied_commit"] == doc["applied_commit"]
    # Nested 5,000 levels (issue 64: RecursionError), or over the bound: read as the node's own problem, and the
    # file over the bound is not even read (its size comes back).
    record.write_text('{"a":' * 5000 + "1" + "}" * 5000)
    result = run_playbook(playbook, local_inventory([group]), extravars={var: str(record), "health_now": False})
    assert result.ok, result.failures
    with pytest.raises(foreign.ForeignJSONError, match="record: nested 5000 levels, deeper than 64"):
        foreign.record(result.stats[stat]["gpu01"], "record")
    record.write_text(json.dumps({"node": "gpu01", "pad": "x" * foreign.RECORD_LIMIT}))
    result = run_playbook(playbook, local_inventory([group]), extravars={var: str(record), "health_now": False})
    size = result.stats[stat]["gpu01"]
    assert size == record.stat().st_size > foreign.RECORD_LIMIT
    with pytest.raises(foreign.ForeignJSONError, match=f"over the {foreign.RECORD_LIMIT} read"):
        foreign.record(size, "record")
    # The playbook's bound is the controller's.
    play = yaml.safe_load((ROOT / "playbooks" / playbook).read_text())
    assert play[0]["vars"][var.replace("_file", "_max_bytes")] == foreign.RECORD_LIMIT


def test_accept_jobs_objects_are_never_evaluated(plan: Plan, canary: Canaries) -> None:
    """Acceptance hands Ansible the objects of a measurement; the cluster's answers come back as module results.
    Neither is evaluated (no API server here: the run stops at the kubeconfig, after the objects are loaded)."""
    from aisite.accept.site import AnsibleCluster
    from aisite.accept.stages import MeasureError

    cluster = AnsibleCluster(plan, canary("namespace"))
    objects = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"k": canary("data")}}]
    with pytest.raises(MeasureError):
        cluster.run(objects, canary("pod"), 5)
    assert canary.fired() == []


def test_one_way_to_ansible() -> None:
    """ansible-runner is called in one place (run_playbook, which tags every extra var); no module runs
    ansible-playbook or ansible-pull itself on the controller, or hands Ansible vars another way."""
    callers = []
    for path in sorted((ROOT / "aisite").rglob("*.py")):
        text = path.read_text()
        rel = str(path.relative_to(ROOT))
        if "ansible_runner" in text:
            callers.append(rel)
        assert not re.search(r"""["']ansible-playbook["']""", text), rel
        assert "--extra-vars" not in text, rel
    assert callers == ["aisite/deploy.py"]


TERMINAL_PAINT = [
    "\x1b]52;c;ZWNobyBwd25lZA==\x07",  # OSC 52: write the clipboard
    "\x1b]0;owned\x07",  # OSC 0: window title
    "\x1b[2J\x1b[H",  # clear the screen
    "\x9b2J",  # the same as a C1 control
    "\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\",  # a hyperlink
    "a\rb\x08c\x00d\u202e",  # carriage return, backspace, NUL, a bidi override
]


@pytest.mark.parametrize("paint", TERMINAL_PAINT, ids=range(len(TERMINAL_PAINT)))
def test_foreign_text_cannot_paint_the_terminal(paint: str) -> None:
    shown = foreign.show(f"[/x][bold]{paint}", 80)
    assert not re.search(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e]", shown), repr(shown)
    from rich.console import Console

    console = Console(record=True, width=200, color_system=None)
    console.print(shown)  # no MarkupError
    assert "[/x][bold]" in console.export_text()


@given(st.text(max_size=3000))
def test_foreign_text_is_bounded_and_printable(text: str) -> None:
    out = foreign.clean(text, 100)
    assert len(out) <= 100 and all(c.isprintable() for c in out)


def test_numbers_from_nodes_are_finite_and_bounded() -> None:
    assert foreign.number(5, 0, 10) == 5.0
    for bad in (float("inf"), float("nan"), 1e308, 10**400, -1, True, "5", None):
        assert foreign.number(bad, 0, 1e6) is None, bad


def test_arming_the_boot_server_writes_names_and_keys_as_data(canary: Canaries, tmp_path: Path) -> None:
    """provision's run_playbook caller (boot-arm.yml, the role's arm tasks) on a local 'boot server': node names and
    MACs are the plan's, but they reach Ansible through the same marking; a canary in each is written as text, and
    the host key from the environment lands 0600 and never in the play's output."""
    from aisite.provision.run import new_host_key
    from aisite.provision.world import hostkey_env

    state = tmp_path / "state"
    (state / "armed").mkdir(parents=True)
    (state / "reports").mkdir()
    (state / "hostkeys").mkdir()
    key = new_host_key()
    node = canary("node")
    # (A MAC is a file name on the boot server: the plan's type keeps it one; the canary rides in the node name.)
    arm = [
        {"node": "gpu01", "mac": "02-00-00-00-00-01", "key_env": hostkey_env("gpu01")},
        {"node": node, "mac": "02-00-00-00-00-02"},
    ]
    events: list[str] = []
    result = run_playbook(
        "boot-arm.yml",
        local_inventory(["boot_server"]),
        {hostkey_env("gpu01"): key.private},
        extravars={"boot_server_arm": arm, "boot_server_state": str(state)},
        on_event=lambda e: events.append(json.dumps(e)),
    )
    assert result.ok, result.failures
    assert canary.fired() == []
    written = {p.name: json.loads(p.read_text())["node"] for p in (state / "armed").iterdir()}
    assert written["02-00-00-00-00-01.json"] == "gpu01" and node in written.values()
    keyfile = state / "hostkeys" / "gpu01"
    assert keyfile.read_text().strip() == key.private.strip() and keyfile.stat().st_mode & 0o777 == 0o600
    assert not any(key.private.splitlines()[1] in e for e in events)  # no_log: the private key is in no event
