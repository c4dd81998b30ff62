"""Cordon now, drain when the job ends (issue 37): a rollout's drain waits for the Kueue workloads on its nodes,
preempts and requeues through Kueue what still runs at the site's time, and only then evicts the rest. Against a
scripted cluster (the logic, on a fake clock) and, for the Kubernetes client's requests themselves, against a
loopback HTTP server answering as the API server does; no API server or Kueue runs here."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from aisite.loader import parse_site
from aisite.maintenance.jobs import (
    PREEMPTED_LABEL,
    WORKLOAD_ANNOTATION,
    KubeCluster,
    NoKueueError,
    Workload,
    drain_jobs,
)
from aisite.plan import build_plan
from tests.conftest import loopback_kubeconfig, stack_data


@dataclass
class Scripted:
    """A cluster on a fake clock: each workload runs on its nodes until `ends` (None: never on its own); a
    deactivated one's pods leave `evict_s` later (None: never)."""

    jobs: dict[Workload, tuple[set[str], float | None]]
    evict_s: float | None = 5.0
    now: float = 0.0
    inactive: dict[Workload, str] = field(default_factory=dict)  # -> the node in its label
    gone_at: dict[Workload, float] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    fail_patch: bool = False
    kueue: bool = True
    theirs: set[Workload] = field(default_factory=set)  # deactivated by someone else

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        assert s >= 0
        self.now += max(s, 0.001)

    def workloads_on(self, node: str) -> set[Workload]:
        if not self.kueue:
            raise NoKueueError("the cluster serves no kueue.x-k8s.io/v1beta2 Workload API")
        found = set()
        for w, (nodes, ends) in self.jobs.items():
            ended = ends is not None and self.now >= ends
            evicted = w in self.gone_at and self.now >= self.gone_at[w]
            if node in nodes and not ended and not evicted:
                found.add(w)
        return found

    def preempted(self) -> dict[Workload, str]:
        return dict(self.inactive)

    def is_active(self, workload: Workload) -> bool:
        return workload not in self.inactive and workload not in self.theirs

    def set_active(self, workload: Workload, active: bool, node: str = "") -> None:
        self.calls.append(f"{'activate' if active else 'deactivate'} {workload}")
        if self.fail_patch:
            raise RuntimeError("admission webhook denied the request")
        if active:
            self.inactive.pop(workload, None)
        else:
            self.inactive[workload] = node
            if self.evict_s is not None:
                self.gone_at[workload] = self.now + self.evict_s


A, B, C = Workload("team-a", "train-a"), Workload("team-b", "train-b"), Workload("team-a", "other")


def test_jobs_that_end_within_the_wait_are_never_preempted() -> None:
    c = Scripted({A: ({"gpu01"}, 120.0), B: ({"gpu02"}, 1000.0), C: ({"gpu03"}, None)})
    notes: list[str] = []
    d = drain_jobs(c, ["gpu01"], 600, clock=c.clock, sleep=c.sleep, note=notes.append)
    assert d.ended == ["team-a/train-a"] and d.preempted == [] and d.errors == {} and c.calls == []
    assert 120 <= c.now < 131  # it stopped waiting once the job had ended
    assert notes and "waiting for 1 Kueue workload(s) to end (team-a/train-a)" in notes[0]


def test_a_job_still_running_at_the_site_time_is_preempted_through_kueue_and_requeued_once_it_left() -> None:
    c = Scripted({A: ({"gpu01", "gpu02"}, None), B: ({"gpu02"}, 30.0), C: ({"gpu03"}, None)})
    d = drain_jobs(c, ["gpu01", "gpu02"], 300, clock=c.clock, sleep=c.sleep)
    assert d.ended == ["team-b/train-b"]
    assert d.preempted == ["team-a/train-a (still running after 300 s)"]
    # Deactivated once (for the first node holding it), requeued after its pods had left; the job elsewhere untouched.
    assert c.calls == ["deactivate team-a/train-a", "activate team-a/train-a"]
    assert d.requeued == ["team-a/train-a (preempted for gpu01)"] and c.inactive == {}
    assert d.errors == {} and 305 <= c.now < 320


def test_a_workload_left_inactive_by_a_drain_that_died_is_requeued_by_the_next() -> None:
    c = Scripted({A: ({"gpu01"}, None)}, inactive={A: "gpu01"}, gone_at={A: 0.0})
    d = drain_jobs(c, ["gpu05"], 600, clock=c.clock, sleep=c.sleep)
    assert d.requeued == ["team-a/train-a (preempted for gpu01)"] and c.calls == ["activate team-a/train-a"]
    assert c.now == 0  # nothing ran on gpu05: no wait


def test_a_workload_someone_else_deactivated_is_waited_for_and_never_activated_by_the_drain() -> None:
    c = Scripted({A: ({"gpu01"}, None)}, theirs={A}, gone_at={A: 400.0})
    d = drain_jobs(c, ["gpu01"], 300, clock=c.clock, sleep=c.sleep)
    assert c.calls == [] and d.preempted == [] and d.requeued == [] and d.errors == {}
    assert d.said == ["team-a/train-a: already inactive (not by this drain); waiting for its pods to leave"]
    assert 400 <= c.now < 411  # its pods were waited for before the drain evicts the rest


def test_what_cannot_be_preempted_or_will_not_leave_fails_its_node_and_not_the_others() -> None:
    c = Scripted({A: ({"gpu01"}, None)}, fail_patch=True)
    d = drain_jobs(c, ["gpu01", "gpu02"], 60, clock=c.clock, sleep=c.sleep)
    assert d.errors == {"gpu01": "could not preempt team-a/train-a through Kueue: admission webhook denied the request"}
    c = Scripted({A: ({"gpu01"}, None)}, evict_s=None)
    d = drain_jobs(c, ["gpu01"], 60, clock=c.clock, sleep=c.sleep, evict_wait_s=120)
    assert d.errors == {
        "gpu01": "Kueue workload(s) team-a/train-a stopped through Kueue, still on the node after 120 s"
    }
    assert c.calls == ["deactivate team-a/train-a"]  # still there: not requeued onto the queue yet


def test_a_cluster_without_kueue_is_said_and_an_api_failure_fails_every_node() -> None:
    c = Scripted({}, kueue=False)
    d = drain_jobs(c, ["gpu01"], 60, clock=c.clock, sleep=c.sleep)
    assert d.errors == {} and "no Kueue workloads to wait for" in d.said[0]

    class Down(Scripted):
        def workloads_on(self, node: str) -> set[Workload]:
            raise ConnectionRefusedError("connection refused")

    d = drain_jobs(Down({}), ["gpu01", "gpu02"], 60)
    assert set(d.errors) == {"gpu01", "gpu02"} and "ConnectionRefusedError" in d.errors["gpu01"]


def test_the_drain_step_evicts_only_nodes_whose_jobs_have_gone() -> None:
    from aisite.deploy import HostRecap, RunResult
    from aisite.maintenance.jobs import Drained
    from aisite.maintenance.state import MemberState, RolloutState
    from aisite.maintenance.steps import AnsibleSteps

    plan = build_plan(parse_site(stack_data("lab")))
    runs: list[dict[str, Any]] = []

    def runner(playbook: str, limit: str | None, extravars: Any) -> RunResult:
        runs.append(dict(extravars))
        return RunResult("successful", 0, {"localhost": HostRecap(ok=1)})

    asked: list[list[str]] = []

    def waits(nodes: list[str]) -> Drained:
        asked.append(nodes)
        return Drained(ended=["team-a/x"], preempted=["team-a/y (still running after 3600 s)"], errors={"gpu02": "no"})

    members = {n: MemberState(["x"], False) for n in ("gpu01", "gpu02")}
    state = RolloutState("lab", "c", "t", [["gpu01", "gpu02"]], members)
    steps = AnsibleSteps(plan, runner, jobs=waits)
    assert steps("drain", ["gpu01", "gpu02"], state) == {"gpu02": "no"}
    assert asked == [["gpu01", "gpu02"]]
    assert runs == [
        {"maintenance_action": "drain", "maintenance_nodes": ["gpu01"], "maintenance_drain_timeout_s": 3600}
    ]
    assert steps.drained == [
        "ended on its own: team-a/x",
        "preempted through Kueue: team-a/y (still running after 3600 s)",
    ]


# --- the Kubernetes client's own requests, answered by a loopback server -------------------------------------


class Api(BaseHTTPRequestHandler):
    """Answers the few requests the drain makes as an API server with Kueue v1beta2 does; records them."""

    state: dict[str, Any]

    def log_message(self, *_args: Any) -> None:
        pass

    def _send(self, code: int, doc: object) -> None:
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        self.state["requests"].append(f"GET {url.path} {query}")
        if url.path == "/apis/kueue.x-k8s.io/v1beta2/workloads":
            if not self.state["kueue"]:
                self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404})
                return
            labelled = [
                {"metadata": {"namespace": ns, "name": n, "labels": {PREEMPTED_LABEL: node}}}
                for (ns, n), node in self.state["inactive"].items()
            ]
            items = labelled if query.get("labelSelector") == PREEMPTED_LABEL else []
            self._send(200, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadList", "items": items})
        elif url.path.startswith("/apis/kueue.x-k8s.io/v1beta2/namespaces/"):
            ns, name = url.path.split("/")[5], url.path.split("/")[7]
            active = (ns, name) not in self.state["inactive"]
            self._send(200, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "spec": {"active": active}})
        elif url.path == "/api/v1/pods":
            self._send(200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": self.state["pods"]})
        else:
            self._send(404, {"kind": "Status", "code": 404})

    def do_PATCH(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.state["requests"].append(f"PATCH {self.path} {self.headers['Content-Type']} {json.dumps(body)}")
        ns, name = self.path.split("/")[5], self.path.split("/")[7]
        if body["spec"]["active"] is False:
            self.state["inactive"][(ns, name)] = body["metadata"]["labels"][PREEMPTED_LABEL]
            self.state["pods"] = []  # Kueue stops the job: its pods go
        else:
            self.state["inactive"].pop((ns, name), None)
        self._send(200, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": name}})


def _pod(namespace: str, name: str, workload: str | None) -> dict[str, Any]:
    annotations = {WORKLOAD_ANNOTATION: workload} if workload is not None else {}
    return {"metadata": {"namespace": namespace, "name": name, "annotations": annotations}, "spec": {"containers": []}}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[dict[str, Any], Path]]:
    state: dict[str, Any] = {"requests": [], "kueue": True, "inactive": {}, "pods": []}
    handler = type("Handler", (Api,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = loopback_kubeconfig(tmp_path, server.server_port)
    yield state, kubeconfig
    server.shutdown()


def test_the_kubernetes_client_lists_the_nodes_pods_and_merge_patches_the_workload(
    api: tuple[dict[str, Any], Path],
) -> None:
    state, kubeconfig = api
    state["pods"] = [_pod("team-a", "train-a-0", "train-a"), _pod("kube-system", "dcgm", None)]
    d = drain_jobs(KubeCluster(kubeconfig, timeout=5), ["gpu01"], 0, sleep=lambda _s: None)
    assert d.errors == {} and d.preempted == ["team-a/train-a (still running after 0 s)"]
    assert d.requeued == ["team-a/train-a (preempted for gpu01)"]
    pods = "{'fieldSelector': 'spec.nodeName=gpu01,status.phase!=Succeeded,status.phase!=Failed'}"
    workloads = "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads/train-a application/merge-patch+json"
    label = json.dumps(PREEMPTED_LABEL)
    assert state["requests"] == [
        "GET /apis/kueue.x-k8s.io/v1beta2/workloads {'limit': '1'}",  # Kueue's API is served
        f"GET /api/v1/pods {pods}",
        "GET /apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads/train-a {}",
        f'PATCH {workloads} {{"spec": {{"active": false}}, "metadata": {{"labels": {{{label}: "gpu01"}}}}}}',
        f"GET /api/v1/pods {pods}",
        f"GET /apis/kueue.x-k8s.io/v1beta2/workloads {{'labelSelector': '{PREEMPTED_LABEL}'}}",
        f'PATCH {workloads} {{"spec": {{"active": true}}, "metadata": {{"labels": {{{label}: null}}}}}}',
    ]


def test_without_kueue_the_drain_says_so_and_a_hostile_workload_name_is_that_pods_problem(
    api: tuple[dict[str, Any], Path],
) -> None:
    state, kubeconfig = api
    state["kueue"] = False
    d = drain_jobs(KubeCluster(kubeconfig, timeout=5), ["gpu01"], 60, sleep=lambda _s: None)
    assert d.errors == {} and "serves no kueue.x-k8s.io/v1beta2 Workload API" in d.said[0]
    state["kueue"] = True
    # Issue 64: one pod's malformed annotation failed the whole wave. It is that pod's problem now, said; the other
    # pods' workloads are still waited for and preempted, and nothing is patched on the bad pod's word.
    state["pods"] = [_pod("team-a", "x", "../../api/v1/secrets"), _pod("team-a", "train-a-0", "train-a")]
    d = drain_jobs(KubeCluster(kubeconfig, timeout=5), ["gpu01"], 0, sleep=lambda _s: None)
    assert d.errors == {}, d.errors
    (said,) = [s for s in d.said if "would not allow" in s]
    assert said.startswith("pod team-a/x on gpu01 names a workload Kubernetes would not allow ('../../api/v1/secrets')")
    assert d.preempted == ["team-a/train-a (still running after 0 s)"]
    patched = [r for r in state["requests"] if r.startswith("PATCH")]
    assert patched and all("/workloads/train-a " in r for r in patched)


def test_the_controllers_kubernetes_modules_reach_for_the_api_server(tmp_path: Path) -> None:
    """kubernetes.core's modules (platform, workloads, quarantine, cordon and drain) import the Kubernetes client on
    the controller: a cordon against an API server that refuses gets that refusal, not "Failed to import the
    required Python library (kubernetes)" (what every one of them said before the client was a dependency)."""
    import socket

    from aisite.deploy import run_playbook
    from aisite.render.inventory import inventory, inventory_text

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = loopback_kubeconfig(tmp_path, port)
    plan = build_plan(parse_site(stack_data("lab")))
    extravars = {
        "maintenance_action": "cordon",
        "maintenance_nodes": ["gpu01"],
        "maintenance_drain_timeout_s": 10,
        "maintenance_kubeconfig": str(kubeconfig),
    }
    items: list[str] = []

    def on_event(event: dict[str, Any]) -> None:
        if event.get("event") == "runner_item_on_failed":
            items.append(str(event.get("event_data", {}).get("res", {}).get("msg", "")))

    text = inventory_text(inventory(plan))
    r = run_playbook("maintenance.yml", text, on_event=on_event, extravars=extravars)
    said = " ".join(items)
    assert not r.ok and len(items) == 1 and "Failed to import" not in said, said
    assert "Connection refused" in said or "Max retries exceeded" in said, said


def test_a_kubeconfig_the_client_cannot_read_fails_the_wave_and_raises_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aisite.maintenance import jobs

    monkeypatch.chdir(tmp_path)
    plan = build_plan(parse_site(stack_data("lab")))
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    monkeypatch.setattr(jobs, "kubeconfig_path", lambda site: bad)
    waits = jobs.for_rollout(plan, lambda _s: None)
    assert waits is not None
    d = waits(["gpu01", "gpu02"])
    assert set(d.errors) == {"gpu01", "gpu02"} and "kubeconfig" in d.errors["gpu01"], d.errors
    monkeypatch.setattr(jobs, "kubeconfig_path", lambda site: tmp_path / "absent")
    assert jobs.for_rollout(plan, lambda _s: None) is None  # no API server: the drain playbook says so
