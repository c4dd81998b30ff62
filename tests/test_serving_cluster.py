"""Promotion on a site: the evaluation and the checkpoints' listing as Jobs, the canary applied server-side and
waited for, its figures read from each server pod through the API server, the candidate deleted after. The
Kubernetes client's own requests are answered by a loopback server that does what a cluster's controllers do
with them (pods per Deployment or InferenceService, Jobs run to their end, the servers' counters); no API server
or GPU runs here (README: what was not run)."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import validate

from aisite.loader import load_site, parse_site
from aisite.payloads.serve import Metrics
from aisite.plan import LABEL_PREFIX, build_plan
from aisite.platform import jobs
from aisite.platform.jobs import PAYLOAD_FILES
from aisite.platform.serving import evaluation_job, listing_job, serving_objects
from aisite.serving.auto import promote_pending
from aisite.serving.cluster import ClusterError, KubeRuntime, parse_listing
from aisite.serving.commits import Signing, push
from aisite.serving.policy import MAX_TEXT, PolicyInputError
from aisite.serving.promote import PromoteContext, PromoteError, end_canary, promote
from tests.conftest import ROOT, git, loopback_kubeconfig, run_cli, ssh_signer, stack_data

K8S_VERSION = "1.33.0"
ROLE = f"{LABEL_PREFIX}/role"


# ---------------------------------------------------------------------------------------------- what is rendered
@pytest.mark.parametrize("stack", ["dc1", "h100pod"])
def test_the_promotions_jobs_run_as_the_tenants_jobs(stack: str) -> None:
    """The evaluation and the listing run in the tenant's namespace, at its Pod Security, in its Kueue queue, with
    the payloads they run shipped and the storage read-only; valid for Kubernetes."""
    plan = build_plan(parse_site(stack_data(stack), stack))
    s = plan.serving[0]
    tenant = next(t for t in plan.tenants if t.name == s.tenant)
    for job in (evaluation_job(plan, s, "models/x/v2.pt", "eval/x"), listing_job(plan, s, f"models/{s.name}")):
        validate(job, K8S_VERSION, strict=True)
        assert job["metadata"]["namespace"] == s.namespace
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] and job["spec"]["suspend"] is True
        pod = job["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        assert c["command"][1].removeprefix("/opt/aisite/payloads/") in PAYLOAD_FILES
        assert all(m["readOnly"] for m in c["volumeMounts"])
        assert "nvidia.com/gpu" not in c["resources"]["limits"] and "resourceClaims" not in pod
        if tenant.pod_security == "restricted":
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert len(job["metadata"]["name"]) <= 63  # its pods carry it as a label value
    args = evaluation_job(plan, s, "models/x/v2.pt", "eval/x")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:6] == ["--model", s.model, "--checkpoint", "/datasets/models/x/v2.pt", "--data", "/datasets/eval/x"]
    # The payloads' ConfigMap holds what the Jobs run.
    support = jobs(plan)[f"workloads/{s.tenant}.yaml"][0]
    assert {"evaluate.py", "checkpoints.py"} <= set(support["data"])


# ------------------------------------------------------------------------------------- a cluster on a loopback port
@dataclass
class Cluster:
    """What the API server and the controllers behind it hold: objects by path, pods, the servers' counters."""

    scores: dict[str, float]  # checkpoint path -> top-1 its evaluation prints
    listing: list[list[Any]] = field(default_factory=list)
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> pod (with "owner": an object's path)
    counters: dict[str, Metrics] = field(default_factory=dict)  # pod -> its server's counters
    requests: list[str] = field(default_factory=list)
    log: dict[str, str] = field(default_factory=dict)  # a pod's log, where it is not a job's result
    failing: dict[str, int] = field(default_factory=dict)  # version -> HTTP code its servers answer with
    serial: int = 0
    metrics_text: str | None = None  # what every server's /metrics answers instead, where set
    log_override: str | None = None  # what every pod's log holds instead, where set
    jobs_fail: bool = False
    propagation: list[str | None] = field(default_factory=list)  # each DELETE's propagationPolicy

    def tick(self, seconds: float) -> None:
        """Time passes: pending pods start, terminating ones go, jobs end, and the site's users send requests to
        every ready server for as long (one a second; none in the polls' short sleeps)."""
        for name, pod in list(self.pods.items()):
            if pod["metadata"].get("deletionTimestamp"):
                del self.pods[name]
            elif pod["status"]["phase"] == "Pending":
                job = pod["metadata"]["labels"].get("batch.kubernetes.io/job-name")
                pod["status"] = {"phase": "Succeeded"} if job else {"phase": "Running", "conditions": [_READY]}
                if job:
                    ended = {"type": "Complete", "status": "True"}
                    if self.jobs_fail:
                        ended = {
                            "type": "Failed",
                            "status": "True",
                            "message": "Job has reached the specified backoff limit",
                        }
                    self.objects[pod["owner"]]["status"] = {"conditions": [ended]}
            elif name in self.counters and seconds >= 10:
                version = pod["metadata"]["labels"][f"{LABEL_PREFIX}/model-version"]
                code = self.failing.get(version, 200)
                for _ in range(int(seconds)):
                    self.counters[name].observe(code, 0.02, [0.8] if code == 200 else [])

    def pods_of(self, owner: str) -> list[str]:
        return [n for n, p in self.pods.items() if p["owner"] == owner]

    def start(self, owner: str, meta: dict[str, Any], replicas: int, prefix: str) -> None:
        """The controller's pods for an object: new ones for a changed template, the old ones terminating."""
        for n in self.pods_of(owner):
            if self.pods[n]["template"] != meta:
                self.pods[n]["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
        current = [n for n in self.pods_of(owner) if not self.pods[n]["metadata"].get("deletionTimestamp")]
        for _ in range(replicas - len(current)):
            self.serial += 1
            name = f"{prefix}-{self.serial:05d}"
            metadata = {"name": name, "labels": dict(meta.get("labels", {}))}
            metadata["annotations"] = dict(meta.get("annotations", {}))
            self.pods[name] = {"metadata": metadata, "status": {"phase": "Pending"}, "owner": owner, "template": meta}
            version = metadata["labels"].get(f"{LABEL_PREFIX}/model-version")
            if version:
                role = metadata["labels"][f"{LABEL_PREFIX}/role"]
                self.counters[name] = Metrics(metadata["labels"][f"{LABEL_PREFIX}/serving"], version, role)

    def apply(self, path: str, o: dict[str, Any]) -> None:
        self.objects[path] = o
        if o["kind"] == "Deployment":
            template = o["spec"]["template"]["metadata"]
            self.start(path, template, o["spec"]["replicas"], o["metadata"]["name"])
        elif o["kind"] == "InferenceService":
            predictor = o["spec"]["predictor"]
            self.start(path, {"labels": predictor["labels"]}, predictor["minReplicas"], o["metadata"]["name"])

    def create_job(self, path: str, job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        self.objects[path] = job | {"status": {}}
        (c,) = job["spec"]["template"]["spec"]["containers"]
        pod = f"{name}-x7k2p"
        if c["command"][1].endswith("evaluate.py"):
            checkpoint = c["args"][c["args"].index("--checkpoint") + 1].removeprefix("/datasets/")
            doc = {"schema": "aisite.eval/v1", "samples": 200, "top1_accuracy": self.scores[checkpoint]}
            self.log[pod] = "a warning on stderr\n" + json.dumps(doc | {"top5_accuracy": 1.0}) + "\n"
        else:
            self.log[pod] = json.dumps({"schema": "aisite.checkpoints/v1", "checkpoints": self.listing}) + "\n"
        meta = {"name": pod, "labels": {"batch.kubernetes.io/job-name": name}}
        self.pods[pod] = {"metadata": meta, "status": {"phase": "Pending"}, "owner": path, "template": {}}

    def delete(self, path: str) -> bool:
        if path not in self.objects:
            return False
        del self.objects[path]
        for n in self.pods_of(path):
            self.pods[n]["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
        return True


_READY = {"type": "Ready", "status": "True"}


def _resources(group_version: str, kinds: list[str]) -> dict[str, Any]:
    verbs = ["create", "delete", "get", "list", "patch", "update"]
    resources = [
        {"name": f"{k.lower()}s", "singularName": k.lower(), "namespaced": True, "kind": k, "verbs": verbs}
        for k in kinds
    ]
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}


def _group(name: str) -> dict[str, Any]:
    version = {"groupVersion": f"{name}/v1", "version": "v1"}
    return {"name": name, "versions": [version], "preferredVersion": version}


DISCOVERY: dict[str, Any] = {
    "/version": {"major": "1", "minor": "33", "gitVersion": "v1.33.0"},
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group("apps"), _group("batch")]},
    "/api/v1": _resources("v1", ["Service", "ConfigMap", "Pod"]),
    "/apis/apps/v1": _resources("apps/v1", ["Deployment"]),
    "/apis/batch/v1": _resources("batch/v1", ["Job"]),
}


class Api(BaseHTTPRequestHandler):
    cluster: Cluster

    def log_message(self, *_args: Any) -> None:
        pass

    def _send(self, code: int, doc: object, text: str | None = None) -> None:
        body = (text if text is not None else json.dumps(doc)).encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain" if text is not None else "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length", 0))
        return json.loads(self.rfile.read(n)) if n else None

    def _record(self, method: str) -> tuple[str, dict[str, str]]:
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        self.cluster.requests.append(f"{method} {url.path} {json.dumps(query, sort_keys=True)}")
        return url.path, query

    def do_GET(self) -> None:
        path, query = self._record("GET")
        c = self.cluster
        parts = path.split("/")
        if path in DISCOVERY:  # what kubernetes.core's client asks first (the Workloads layer's deletion)
            self._send(200, DISCOVERY[path])
        elif path.endswith("/pods"):
            wanted = dict(kv.split("=", 1) for kv in query.get("labelSelector", "").split(",") if kv)
            items = [
                {"metadata": p["metadata"], "status": p["status"]}
                for p in c.pods.values()
                if all(p["metadata"]["labels"].get(k) == v for k, v in wanted.items())
            ]
            self._send(200, {"apiVersion": "v1", "kind": "PodList", "items": items})
        elif path.endswith("/log"):
            self._send(200, None, c.log_override if c.log_override is not None else c.log[parts[-2]])
        elif path.endswith("/proxy/metrics"):
            pod = parts[-3].split(":")[0]
            self._send(200, None, c.metrics_text if c.metrics_text is not None else c.counters[pod].text())
        elif path in c.objects:
            self._send(200, c.objects[path])
        else:
            self._send(404, {"kind": "Status", "code": 404, "message": f"{parts[-1]} not found"})

    def do_PATCH(self) -> None:
        path, query = self._record("PATCH")
        assert self.headers["Content-Type"] == "application/apply-patch+yaml"
        assert query == {"fieldManager": "aisite", "force": "true"}
        body = yaml.safe_load(self.rfile.read(int(self.headers["Content-Length"])))
        self.cluster.apply(path, body)
        self._send(200, body)

    def do_POST(self) -> None:
        path, _ = self._record("POST")
        job = self._body()
        self.cluster.create_job(f"{path}/{job['metadata']['name']}", job)
        self._send(201, job)

    def do_DELETE(self) -> None:
        path, _ = self._record("DELETE")
        # aisite's own deletions leave the dependents to the garbage collector; kubernetes.core sends no options.
        self.cluster.propagation.append((self._body() or {}).get("propagationPolicy"))
        if self.cluster.delete(path):
            self._send(200, {"kind": "Status", "status": "Success"})
        else:
            self._send(404, {"kind": "Status", "code": 404, "message": "not found"})


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[Cluster, Path]]:
    cluster = Cluster(scores={})
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (Api,), {"cluster": cluster}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield cluster, loopback_kubeconfig(tmp_path, server.server_port)
    server.shutdown()


class Clock:
    def __init__(self, cluster: Cluster) -> None:
        self.now, self.cluster = 0.0, cluster

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.cluster.tick(seconds)


def _runtime(cluster: Cluster, kubeconfig: Path, said: list[str]) -> KubeRuntime:
    clock = Clock(cluster)
    return KubeRuntime(kubeconfig, said.append, timeout=5, poll_s=1, rollout_s=60, sleep=clock.sleep, clock=clock.time)


def _site_repo(tmp_path: Path, stack: str, edit: dict[str, str]) -> tuple[Path, Path, Path]:
    """(work repository, its stack file, the bare origin it publishes to)."""
    repo = tmp_path / "site"
    (repo / "stacks").mkdir(parents=True)
    text = (ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text()
    for old, new in edit.items():
        assert old in text
        text = text.replace(old, new)
    stack_file = repo / "stacks" / f"Pulumi.{stack}.yaml"
    stack_file.write_text(text)
    git(repo, "init", "--quiet", "--initial-branch=main")
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "The site")
    bare = tmp_path / "origin.git"
    git(tmp_path, "clone", "--quiet", "--bare", str(repo), str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    return repo, stack_file, bare


def _applied(cluster: Cluster, first: int = 0) -> list[str]:
    return [r.split()[1] for r in cluster.requests[first:] if r.startswith("PATCH")]


def _args(cluster: Cluster, path: str) -> list[str]:
    o = cluster.objects[path]
    spec = o["spec"]["predictor"] if o["kind"] == "InferenceService" else o["spec"]["template"]["spec"]
    args: list[str] = spec["containers"][0]["args"]
    return args


def test_a_site_promotion_evaluates_as_jobs_rolls_the_canary_out_and_deletes_the_candidate_after(
    api: tuple[Cluster, Path], tmp_path: Path
) -> None:
    """dc1 (KServe InferenceServices, signed by netops): v2 beats v1 at the gate, its canary takes the site's
    requests for its 900 s and holds every limit; each step is on the shared branch before the cluster changes."""
    cluster, kubeconfig = api
    key, line = ssh_signer(tmp_path, "netops@dc1.example.org")
    dc1 = (ROOT / "stacks" / "Pulumi.dc1.yaml").read_text()
    old_line = next(x for x in dc1.splitlines() if x.strip().startswith('- "netops@dc1.example.org ssh-ed25519'))
    repo, stack_file, bare = _site_repo(tmp_path, "dc1", {old_line: f'        - "{line}"'})
    plan = build_plan(load_site(stack_file))
    s = plan.serving[0]
    cluster.scores = {"models/classifier/v1.pt": 0.70, "models/classifier/v2.pt": 0.80}
    said: list[str] = []
    runtime = _runtime(cluster, kubeconfig, said)
    runtime.apply(plan, s)  # the champion as the reconciler left it
    first = len(cluster.requests)
    published: list[int] = []  # how many objects had been applied since, as each step was published

    def publish(commit: str) -> None:
        push(repo, "main", commit)
        published.append(len(_applied(cluster, first)))

    out = promote(
        stack_file,
        "classifier",
        "v2",
        "models/classifier/v2.pt",
        PromoteContext(repo, runtime, Signing(key, (line,), ()), said.append, publish),
    )
    assert out.state == "promoted", (out, said)
    assert [c["step"] for c in out.commits] == ["canary", "promoted"]
    assert git(bare, "rev-parse", "main") == out.commits[-1]["commit"]
    # Each step published before the cluster changed: the canary's before its objects, the promotion's before the
    # champion's. The canary applied the model's objects with the candidate's (server-side, aisite's fields).
    canary = tmp_path / "canary.yaml"
    canary.write_text(git(repo, "show", f"{out.commits[0]['commit']}:stacks/Pulumi.dc1.yaml"))
    canary_plan = build_plan(load_site(canary))
    canary_objects = serving_objects(canary_plan, canary_plan.serving[0])
    assert published == [0, len(canary_objects)]
    assert {o["metadata"]["name"] for o in canary_objects} >= {"classifier-candidate", "classifier-proxy"}
    jobs_made = [r for r in cluster.requests[first:] if r.startswith("POST")]
    assert [r.split()[1] for r in jobs_made] == ["/apis/batch/v1/namespaces/tenant-research/jobs"] * 2
    assert not [p for p in cluster.objects if "/jobs/" in p]  # each Job deleted after
    assert set(cluster.propagation) == {"Background"}  # its pods with it
    # The canary: the candidate at its share, figures from its pods; then the champion is v2 and the candidate gone.
    isvc = "/apis/serving.kserve.io/v1beta1/namespaces/tenant-research/inferenceservices/classifier-"
    assert isvc + "candidate" not in cluster.objects
    assert "/api/v1/namespaces/tenant-research/services/classifier-candidate" not in cluster.objects
    args = _args(cluster, isvc + "champion")
    assert args[args.index("--version") + 1] == "v2"
    assert out.canary is not None and out.canary["crossed"] == []
    assert out.canary["window"]["requests"] == 900  # its one pod, a request a second for 900 s
    # The champion's two pods and the candidate's one, each a request a second: the split the proxy would make.
    assert out.traffic == {
        "v1": {"requests": 1800, "errors": 0, "p95_ms": 24.2},
        "v2": {"requests": 900, "errors": 0, "p95_ms": 24.2},
    }
    live = {n for n, p in cluster.pods.items() if "model-version" in str(p["metadata"]["labels"])}
    assert {cluster.pods[n]["metadata"]["labels"][f"{LABEL_PREFIX}/model-version"] for n in live} == {"v2"}
    assert serving_objects(build_plan(load_site(stack_file)), s)  # the final stack still renders


H100POD = {"        candidate: {version: v8, artifact: models/vision-classifier/v8.pt, share: 10}\n": ""}


def _h100pod(api: tuple[Cluster, Path], tmp_path: Path, scores: dict[str, float]) -> tuple[Any, ...]:
    """h100pod (Deployments, no KServe) serving v7 alone, as the reconciler left it."""
    cluster, kubeconfig = api
    repo, stack_file, bare = _site_repo(tmp_path, "h100pod", H100POD)
    plan = build_plan(load_site(stack_file))
    cluster.scores = {f"models/vision-classifier/{v}.pt": x for v, x in scores.items()}
    said: list[str] = []
    runtime = _runtime(cluster, kubeconfig, said)
    runtime.apply(plan, plan.serving[0])
    return cluster, repo, stack_file, bare, runtime, said


def _promote(stack_file: Path, repo: Path, runtime: KubeRuntime, said: list[str], version: str = "v8") -> Any:
    return promote(
        stack_file,
        "vision-classifier",
        version,
        f"models/vision-classifier/{version}.pt",
        PromoteContext(repo, runtime, None, said.append, lambda c: push(repo, "main", c)),
    )


def test_a_canary_failing_live_on_a_site_is_rolled_back_and_its_objects_deleted(
    api: tuple[Cluster, Path], tmp_path: Path
) -> None:
    cluster, repo, stack_file, bare, runtime, said = _h100pod(api, tmp_path, {"v7": 0.70, "v8": 0.75})
    champions = {
        n for n, p in cluster.pods.items() if p["metadata"]["labels"].get(f"{LABEL_PREFIX}/role") == "champion"
    }
    assert len(champions) == 4
    cluster.failing["v8"] = 503
    out = _promote(stack_file, repo, runtime, said)
    assert out.state == "rolled-back", said
    assert out.canary is not None and out.canary["crossed"][0].startswith("error rate 1.0000 over 0.005")
    assert out.traffic["v8"]["errors"] == out.traffic["v8"]["requests"] == 1800  # one pod for 1800 s
    assert git(bare, "rev-parse", "main") == out.commits[-1]["commit"]
    ns = "/apis/apps/v1/namespaces/tenant-vision/deployments/"
    assert ns + "vision-classifier-candidate" not in cluster.objects
    assert any(r.startswith(f"DELETE {ns}vision-classifier-candidate") for r in cluster.requests)
    # The champion's pods were never restarted; the proxy splits nothing to the candidate any more.
    left = {n for n, p in cluster.pods.items() if p["metadata"]["labels"].get(ROLE) != "proxy"}
    assert left == champions
    config = cluster.objects["/api/v1/namespaces/tenant-vision/configmaps/vision-classifier-proxy"]["data"]
    assert "candidate" not in config["haproxy.cfg"] and "server champion" in config["haproxy.cfg"]


def test_a_candidate_refused_at_the_gate_changes_nothing_on_the_cluster(
    api: tuple[Cluster, Path], tmp_path: Path
) -> None:
    cluster, repo, stack_file, _, runtime, said = _h100pod(api, tmp_path, {"v7": 0.70, "v8": 0.705})
    first = len(cluster.requests)
    out = _promote(stack_file, repo, runtime, said)
    assert out.state == "refused" and [c["step"] for c in out.commits] == ["refused"]
    assert not _applied(cluster, first) and not [r for r in cluster.requests[first:] if "deployments" in r]
    assert not [p for p in cluster.objects if "/jobs/" in p]


def test_the_newest_checkpoint_is_listed_by_a_job_and_what_the_storage_holds_is_held_to_its_types(
    api: tuple[Cluster, Path], tmp_path: Path
) -> None:
    cluster, repo, stack_file, _, runtime, said = _h100pod(api, tmp_path, {"v7": 0.70, "v8": 0.705, "v9": 0.9})
    # Only names that are versions count: a crafted file name in the storage is not a candidate.
    cluster.listing = [["v7", 10.0], ["v8", 20.0], ["../../etc/x", 99.0], ["V10", 98.0]]
    (out,) = promote_pending(stack_file, ["vision-classifier"], PromoteContext(repo, runtime, None, said.append))
    assert (out.candidate, out.state) == ("v8", "refused")
    listing = [r for r in cluster.requests if r.startswith("POST")]
    assert len(listing) == 3  # the listing, then the two evaluations
    (again,) = promote_pending(stack_file, ["vision-classifier"], PromoteContext(repo, runtime, None, said.append))
    assert again.state == "idle"  # v8 judged: not tried each pass
    for bad, words in (
        ([["x" * 300, 1.0]], "at most 255"),
        ([["v9", float("nan")]], "its result line: NaN is not a JSON number"),
        ({"v9": 1.0}, "not an aisite.checkpoints/v1 result"),
    ):
        cluster.listing = bad  # type: ignore[assignment]
        with pytest.raises(PolicyInputError, match=words):
            runtime.checkpoints(build_plan(load_site(stack_file)), build_plan(load_site(stack_file)).serving[0])
    assert parse_listing('warning\n{"schema": "aisite.checkpoints/v1", "checkpoints": [["v2", 1.5]]}', "s") == [
        ("v2", 1.5)
    ]


def test_what_the_cluster_sends_back_is_bounded_and_checked(api: tuple[Cluster, Path], tmp_path: Path) -> None:
    cluster, repo, stack_file, _, runtime, said = _h100pod(api, tmp_path, {"v7": 0.70, "v8": 0.75})
    plan = build_plan(load_site(stack_file))
    s = plan.serving[0]
    head = git(repo, "rev-parse", "HEAD")
    # An evaluation whose output is not a result: nothing committed.
    cluster.log_override = "Traceback (most recent call last):\n  boom\n"
    with pytest.raises(PolicyInputError, match="printed no result line"):
        _promote(stack_file, repo, runtime, said)
    # A Job that failed: its log's last line said, its Job deleted all the same, nothing committed.
    cluster.log_override, cluster.jobs_fail = "Traceback (most recent call last):\nMemoryError\n", True
    with pytest.raises(ClusterError, match=r"failed \(Job has reached the specified backoff limit\): MemoryError"):
        _promote(stack_file, repo, runtime, said)
    assert not [p for p in cluster.objects if "/jobs/" in p]
    cluster.log_override, cluster.jobs_fail = None, False
    assert git(repo, "rev-parse", "HEAD") == head
    # A pod whose name Kubernetes would not allow: refused, not put into a request's path.
    cluster.pods["../../secrets"] = {
        "metadata": {"name": "../../secrets", "labels": {f"{LABEL_PREFIX}/serving": s.name, ROLE: "champion"}},
        "status": {"phase": "Running"},
        "owner": "",
        "template": {},
    }
    with pytest.raises(ClusterError, match="a pod list the API server sent is not one"):
        runtime.metrics(plan, s, "champion")
    del cluster.pods["../../secrets"]
    # A server's /metrics beyond the bound is not read: the canary cannot be judged, so it is rolled back.
    cluster.metrics_text = "#" * (MAX_TEXT + 10)
    with pytest.raises(ClusterError, match="more than 1048576 bytes came back"):
        runtime.metrics(plan, s, "champion")
    out = _promote(stack_file, repo, runtime, said)
    assert out.state == "rolled-back"
    why = out.commits[-1]["subject"]  # the rolled-back step says why
    assert "the canary could not be judged" in why and "more than 1048576 bytes" in why, why


def test_promote_on_a_site_takes_the_branch_it_publishes_to_and_the_clusters_kubeconfig(tmp_path: Path) -> None:
    """A site's steps must reach the branch its reconciler applies before they act; the lab's fault flags are the
    lab's. Without the cluster's kubeconfig, nothing runs (exit 1)."""
    r = run_cli("promote", "dc1", "classifier", "--version", "v2", "--inject-error-rate", "0.5")
    assert r.returncode == 2
    assert "--inject-latency-ms and --inject-error-rate: the lab's, not a site's" in r.stderr
    assert "--push BRANCH: dc1 is reconciled from Git" in r.stderr
    # The request's own problems and the site's, at once.
    r = run_cli("promote", "dc1", "classifier", "--end", "abandon")
    assert r.returncode == 2
    for words in ("--end: 'abandon' is not one of rollback, promote", "--push BRANCH: dc1 is reconciled from Git"):
        assert words in r.stderr, r.stderr
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.dc1.yaml").write_text((ROOT / "stacks" / "Pulumi.dc1.yaml").read_text())
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    env = {"AISITE_SITE_DIR": str(tmp_path)}  # a site repository with no .aisite/: no kubeconfig
    r = run_cli("promote", "dc1", "classifier", "--version", "v2", "--push", "main", env=env)
    assert r.returncode == 1, r.stderr
    assert "no kubeconfig at" in r.stderr and "the cluster layer fetches it" in r.stderr


def test_the_workloads_layer_deletes_a_candidate_the_stack_no_longer_has(
    api: tuple[Cluster, Path], tmp_path: Path
) -> None:
    """An operator's commit that ends a canary by hand (or a promotion whose step was published but not acted on):
    the reconciler's Workloads layer applies the files, which never deletes, then deletes the candidate's objects
    with kubernetes.core's module, against the Kubernetes client's requests answered here. Idempotent."""
    from aisite.deploy import run_playbook
    from aisite.platform.serving import retired_ids

    cluster, kubeconfig = api
    with_candidate = build_plan(parse_site(stack_data("h100pod"), "h100pod"))
    for o in serving_objects(with_candidate, with_candidate.serving[0]):
        if o["kind"] in ("Deployment", "Service"):
            cluster.apply(f"/{'api' if o['apiVersion'] == 'v1' else 'apis'}/{o['apiVersion']}/namespaces/"
                          f"{o['metadata']['namespace']}/{o['kind'].lower()}s/{o['metadata']['name']}", o)  # fmt: skip
    data = stack_data("h100pod")
    del data["serving"][0]["candidate"]
    plan = build_plan(parse_site(data, "h100pod"))
    removals = retired_ids(plan)
    assert {(r["kind"], r["name"]) for r in removals} == {
        ("Deployment", "vision-classifier-candidate"),
        ("Service", "vision-classifier-candidate"),
    }
    extravars = {
        "aisite_kubeconfig": str(kubeconfig),
        "platform_dir": str(tmp_path),
        "workload_files": "[]",
        "workload_removals": json.dumps(removals),
    }
    deletes = []
    for _ in range(2):
        first = len(cluster.requests)
        # No host of the site here: the controller's own play runs (its preflight play on the control plane has
        # no host to run on).
        r = run_playbook("workloads.yml", "all:\n  hosts: {}\n", extravars=extravars)
        assert r.ok, r.failures
        deletes.append([x.split()[1] for x in cluster.requests[first:] if x.startswith("DELETE")])
    ns = "namespaces/tenant-vision"
    assert sorted(deletes[0]) == [
        f"/api/v1/{ns}/services/vision-classifier-candidate",
        f"/apis/apps/v1/{ns}/deployments/vision-classifier-candidate",
    ]
    assert deletes[1] == []  # nothing left to delete: the second run changes nothing
    assert "/apis/apps/v1/namespaces/tenant-vision/deployments/vision-classifier-champion" in cluster.objects


def test_a_canary_cut_short_is_ended_by_hand_in_one_published_step(api: tuple[Cluster, Path], tmp_path: Path) -> None:
    """h100pod as its stack is: v8's canary running (a promote killed, say). `promote --end rollback` commits the
    rollback without a verdict, publishes it, deletes the candidate's objects; v8 counts as judged after."""
    cluster, kubeconfig = api
    repo, stack_file, bare = _site_repo(tmp_path, "h100pod", {})
    plan = build_plan(load_site(stack_file))
    said: list[str] = []
    runtime = _runtime(cluster, kubeconfig, said)
    runtime.apply(plan, plan.serving[0])
    assert "/apis/apps/v1/namespaces/tenant-vision/deployments/vision-classifier-candidate" in cluster.objects
    ctx = PromoteContext(repo, runtime, None, said.append)
    out = end_canary(stack_file, "vision-classifier", "rollback", replace(ctx, publish=lambda c: push(repo, "main", c)))
    assert (out.candidate, out.state, out.note) == ("v8", "rolled-back", "ended by hand")
    assert git(bare, "log", "-1", "--format=%s", "main") == "serving vision-classifier: v8 rolled back: ended by hand"
    assert "candidate" not in stack_file.read_text().split("serving:")[1]
    assert "/apis/apps/v1/namespaces/tenant-vision/deployments/vision-classifier-candidate" not in cluster.objects
    with pytest.raises(PromoteError, match="runs no canary: there is nothing to end"):
        end_canary(stack_file, "vision-classifier", "promote", ctx)
    cluster.listing = [["v8", 30.0]]
    (idle,) = promote_pending(stack_file, ["vision-classifier"], ctx)
    assert idle.state == "idle"  # the ended canary's version is judged
