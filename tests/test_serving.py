"""Served models: the plan's versions and shares, the objects (Deployments or KServe InferenceServices behind the
weighted proxy), the checks on a stack's serving entries, HAProxy's own check of the proxy's configuration, and
the model server itself: a checkpoint trained, saved, scored and served over loopback HTTP."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aisite.loader import load_site
from aisite.plan import Plan, build_plan
from aisite.plan.serving import candidate_replicas
from aisite.platform import jobs, objects
from aisite.platform.serving import proxy_config, uses_kserve
from tests.conftest import ROOT, assert_reported, site_problems, stack_data

PAYLOADS = ROOT / "aisite" / "payloads"


def _plan(stack: str) -> Plan:
    return build_plan(load_site(stack))


def _serving_objects(plan: Plan, name: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in jobs(plan)[f"workloads/serving-{name}.yaml"]}


@given(st.integers(1, 10_000), st.integers(1, 99))
def test_a_canary_takes_its_share_and_the_champion_the_rest(replicas: int, share: int) -> None:
    n = candidate_replicas(replicas, share)
    assert 1 <= n <= replicas
    assert n >= replicas * share / 100  # never fewer than its share of the champion's replicas


def test_a_canary_mid_flight_renders_two_versions_behind_the_weighted_proxy() -> None:
    """h100pod: v7 the champion on 4 replicas, v8 the candidate on 1 at 10 %, as Deployments (no KServe)."""
    plan = _plan("h100pod")
    (s,) = plan.serving
    assert [(v.role, v.version, v.share, v.replicas) for v in s.versions] == [
        ("champion", "v7", 90, 4),
        ("candidate", "v8", 10, 1),
    ]
    objs = _serving_objects(plan, s.name)
    for role, version, replicas in (("champion", "v7", 4), ("candidate", "v8", 1)):
        d = objs[("Deployment", f"vision-classifier-{role}")]
        assert d["spec"]["replicas"] == replicas
        assert d["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "jobs"
        pod = d["spec"]["template"]
        assert pod["metadata"]["labels"]["aisite.io/model-version"] == version
        (c,) = pod["spec"]["containers"]
        assert c["args"][c["args"].index("--checkpoint") + 1] == f"/datasets/models/vision-classifier/{version}.pt"
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
        # The checkpoint is read, never written: the claim and its mount are read-only.
        assert {m["name"]: m.get("readOnly") for m in c["volumeMounts"]} == {"payloads": True, "datasets": True}
        svc = objs[("Service", f"vision-classifier-{role}")]
        assert svc["spec"]["selector"] == {"aisite.io/serving": "vision-classifier", "aisite.io/role": role}
    config = objs[("ConfigMap", "vision-classifier-proxy")]["data"]["haproxy.cfg"]
    servers = [line.split() for line in config.splitlines() if line.strip().startswith("server ")]
    assert [(w[1], w[2], w[4]) for w in servers] == [
        ("champion", "vision-classifier-champion.tenant-vision.svc:80", "90"),
        ("candidate", "vision-classifier-candidate.tenant-vision.svc:80", "10"),
    ]
    assert objs[("Service", "vision-classifier")]["spec"]["selector"]["aisite.io/role"] == "proxy"
    monitor = objs[("ServiceMonitor", "vision-classifier")]
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics", "http"]


def test_with_kserve_each_version_is_an_inference_service_in_standard_mode() -> None:
    plan = _plan("dc1")
    (s,) = plan.serving
    assert uses_kserve(plan) and [v.role for v in s.versions] == ["champion"]
    objs = _serving_objects(plan, "classifier")
    isvc = objs[("InferenceService", "classifier-champion")]
    assert isvc["metadata"]["annotations"] == {"serving.kserve.io/deploymentMode": "Standard"}
    predictor = isvc["spec"]["predictor"]
    assert predictor["minReplicas"] == predictor["maxReplicas"] == 2
    assert predictor["labels"]["aisite.io/role"] == "champion"
    assert predictor["containers"][0]["name"] == "kserve-container"
    assert ("Deployment", "classifier-champion") not in objs
    # The tenant's pods come from the proxy either way; no candidate, no candidate server.
    config = objs[("ConfigMap", "classifier-proxy")]["data"]["haproxy.cfg"]
    assert "server champion classifier-champion.tenant-research.svc:80 weight 100" in config
    assert "candidate" not in config


def test_kueue_admits_deployments_only_where_the_site_serves_models() -> None:
    def frameworks(stack: str) -> list[str]:
        import yaml

        from aisite.platform.charts import charts

        (kueue,) = [c for c in charts(_plan(stack)) if c.chart == "kueue"]
        config = yaml.safe_load(kueue.values["managerConfig"]["controllerManagerConfigYaml"])
        return list(config["integrations"]["frameworks"])

    assert "deployment" in frameworks("h100pod")
    assert "deployment" not in frameworks("gb200")


def test_the_kserve_releases_come_with_the_addon_only() -> None:
    from aisite.platform.charts import charts

    assert [c.release for c in charts(_plan("dc1")) if c.chart.startswith("kserve")] == ["kserve-crd", "kserve"]
    assert not [c for c in charts(_plan("h100pod")) if c.chart.startswith("kserve")]
    assert "serving" not in json.dumps(objects(_plan("gb200")))


def test_a_hostile_or_inconsistent_serving_entry_is_refused_with_every_problem() -> None:
    data = stack_data("dc1")
    site = data
    serving = site["serving"][0]
    serving["champion"]["artifact"] = "../../etc/shadow"
    serving["promotion"]["training"] = "tf-cnn-bench"
    serving["promotion"]["signers"] = ["mallory@example.org"]
    serving["promotion"]["evaluation"]["dataset"] = "/abs/path"
    serving["gpus"] = 8
    site["serving"].append(
        {
            "name": "9lives",
            "tenant": "nobody",
            "champion": {"version": "v1", "artifact": "m/v1.pt"},
            "candidate": {"version": "v1", "artifact": "m/v1.pt", "share": 100},
        }
    )
    found = site_problems(site)
    assert_reported(
        found,
        {
            "site.serving[0].champion.artifact": "not a relative path",
            "site.serving[0].promotion.evaluation.dataset": "not a relative path",
            "site.serving[1].candidate.share": "less than or equal to 99",
        },
    )
    # The model's own rules passed, so the site's are checked: all at once.
    serving["champion"]["artifact"] = "models/classifier/v1.pt"
    serving["promotion"]["evaluation"]["dataset"] = "eval/classifier"
    site["serving"][1]["candidate"]["share"] = 10
    found = site_problems(site)
    assert_reported(
        found,
        {
            "site.serving[0].promotion.training": "tf-cnn-benchmarks workload: resnet50 is fed by resnet50-train",
            "site.serving[0].promotion.signers[0]": "not a principal of site.gitops.allowed_signers",
            "site.serving[0]": "tenant 'research' has a v100 quota of 20",
            "site.serving[1].name": "must start with a letter",
            "site.serving[1].tenant": "tenant 'nobody' is not declared",
            "site.serving[1].candidate.version": "the champion's version",
            "site.serving[1].candidate.artifact": "the champion's checkpoint",
        },
    )


def test_serving_needs_storage_for_its_checkpoints() -> None:
    data = stack_data("h100pod")
    data["storage_nodes"]["exports"] = []
    assert_reported(site_problems(data), {"site.serving[0].champion.artifact": "exports no storage"})


def test_the_command_imports_without_pytorch() -> None:
    """PyTorch is the bench extra: a reconciler's virtualenv has none, and every command must still load."""
    code = "import sys; sys.modules['torch'] = None; import aisite.cli; import aisite.lab.serving"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-1500:]


# ------------------------------------------------------------------------------------------- the proxy, for real
haproxy = shutil.which("haproxy")


@pytest.mark.skipif(haproxy is None, reason="haproxy is not installed (scripts/setup.sh installs it)")
def test_haproxy_accepts_the_rendered_configuration_and_refuses_a_broken_one(tmp_path: Path) -> None:
    assert haproxy
    config = _serving_objects(_plan("h100pod"), "vision-classifier")[("ConfigMap", "vision-classifier-proxy")]
    path = tmp_path / "haproxy.cfg"
    path.write_text(config["data"]["haproxy.cfg"])
    r = subprocess.run([haproxy, "-c", "-f", str(path)], capture_output=True, text=True, check=False)
    assert r.returncode == 0 and "Configuration file is valid" in r.stdout + r.stderr, r.stderr
    # Its only warnings: the cluster's Service names do not resolve here.
    warnings = [line for line in r.stderr.splitlines() if "[WARNING]" in line]
    assert warnings and all("could not resolve address" in w for w in warnings), warnings
    path.write_text(proxy_config("m", [("champion", "127.0.0.1:1", 300)], 8080, 8405))  # HAProxy's weights end at 256
    bad = subprocess.run([haproxy, "-c", "-f", str(path)], capture_output=True, text=True, check=False)
    assert bad.returncode != 0


# ------------------------------------------------------------------------------------- the model server, for real
def _run(*args: str) -> dict[str, Any]:
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, check=False, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    doc: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return doc


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A held-out set and a checkpoint trained on a learnable set (ResNet-50 at 32 px on the CPU, a few steps)."""
    from aisite.payloads.resnet import write_samples

    root = tmp_path_factory.mktemp("model")
    write_samples(root / "train", 64, 32, seed=1, classes=4)
    write_samples(root / "eval", 40, 32, seed=2, classes=4)
    _run(
        str(PAYLOADS / "resnet.py"),
        *("--model", "resnet50", "--mode", "train", "--batch-size", "8", "--image-size", "32", "--warmup", "0"),
        *("--steps", "3", "--data", str(root / "train"), "--classes", "4", "--lr", "0.002", "--threads", "2"),
        *("--save", str(root / "v1.pt")),
    )
    return root


def test_a_saved_checkpoint_is_scored_on_the_held_out_set(trained: Path) -> None:
    doc = _run(
        str(PAYLOADS / "evaluate.py"),
        *("--model", "resnet50", "--checkpoint", str(trained / "v1.pt"), "--data", str(trained / "eval")),
    )
    assert doc["schema"] == "aisite.eval/v1" and doc["samples"] == 40
    assert 0 <= doc["top1_accuracy"] <= doc["top5_accuracy"] <= 1
    # A checkpoint of another network is refused by name, a file of something else as not a checkpoint.
    (trained / "junk.pt").write_bytes(b"not a checkpoint")
    for model, checkpoint, words in (
        ("resnet152", "v1.pt", "a 'resnet50' checkpoint, not 'resnet152'"),
        ("resnet50", "junk.pt", "not a checkpoint this server loads"),
    ):
        r = subprocess.run(
            [
                *(sys.executable, str(PAYLOADS / "evaluate.py"), "--model", model),
                *("--checkpoint", str(trained / checkpoint), "--data", str(trained / "eval")),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert r.returncode != 0 and words in r.stderr, r.stderr


def test_a_pickled_object_in_a_checkpoint_is_never_run(tmp_path: Path, trained: Path) -> None:
    """torch.load with weights_only: a checkpoint that would run code when unpickled is refused unrun."""
    import torch

    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self) -> tuple[Any, ...]:
            return (Path.touch, (marker,))

    torch.save({"schema": "aisite.checkpoint/v1", "evil": Evil()}, tmp_path / "evil.pt")
    from aisite.payloads.resnet import load_checkpoint

    with pytest.raises(SystemExit, match="not a checkpoint this server loads"):
        load_checkpoint(str(tmp_path / "evil.pt"), "resnet50", torch.device("cpu"))
    assert not marker.exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def _serving(trained: Path, *options: str) -> Iterator[str]:
    """payloads/serve.py on loopback with the trained checkpoint, once it answers ready; stopped at the end."""
    port = _free_port()
    proc = subprocess.Popen(
        [
            *(sys.executable, str(PAYLOADS / "serve.py"), "--name", "classifier", "--model", "resnet50"),
            *("--version", "v1", "--checkpoint", str(trained / "v1.pt"), "--host", "127.0.0.1", "--port", str(port)),
            *("--threads", "2", *options),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/v1/models/classifier", timeout=5) as r:
                    assert json.loads(r.read()) == {"name": "classifier", "ready": True, "version": "v1"}
                    break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr and proc.stderr.read()
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server(trained: Path) -> Iterator[str]:
    with _serving(trained) as url:
        yield url


def _post(url: str, body: bytes) -> tuple[int, dict[str, Any], str]:
    req = urllib.request.Request(f"{url}/v1/models/classifier:predict", data=body, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read()), r.headers["X-Model-Version"]
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), exc.headers["X-Model-Version"]


def test_the_server_answers_predictions_and_refuses_bad_requests_with_the_reason(server: str, trained: Path) -> None:
    images = [p.read_bytes()[1:] for p in sorted((trained / "eval").iterdir())[:5]]
    body = json.dumps({"instances": [{"b64": base64.b64encode(i).decode()} for i in images]}).encode()
    code, doc, version = _post(server, body)
    assert (code, version, doc["model_version"]) == (200, "v1", "v1")
    assert len(doc["predictions"]) == 5
    assert all(0 <= p["class"] < 4 and 0 < p["confidence"] <= 1 for p in doc["predictions"])
    bad = {
        b"{": "not JSON",
        b'{"instances": []}': "a list of 1 to 256 images",
        b'{"instances": [{"b64": "!!"}]}': "not base64",
        b'{"instances": [{"b64": "AAAA"}]}': "3 bytes; a 32-pixel image has 3072",
        b'{"instances": ["x"]}': "not an object with a 'b64' string",
    }
    for payload, reason in bad.items():
        code, doc, _ = _post(server, payload)
        assert code == 400 and reason in doc["error"], (payload, doc)
    # Issue 64: a body nested 5,000 levels was a RecursionError, counted as a 5xx (a client could inflate a
    # candidate's canary error rate); a body larger than the largest request of this checkpoint is refused unread.
    code, doc, _ = _post(server, b'{"instances": ' + b"[" * 5000 + b"]" * 5000 + b"}")
    assert code == 400 and "nested 5001 levels, deeper than 4" in doc["error"], doc
    # Announced, not sent: the server answers from the header and closes (a client still sending would be reset).
    said = _answer(_raw(server, b"POST /v1/models/classifier:predict HTTP/1.1\r\nContent-Length: 1100000\r\n\r\n"))
    assert said.startswith(b"HTTP/1.1 400") and b"a body of 1 to 1065984 bytes is required" in said, said
    with urllib.request.urlopen(f"{server}/metrics", timeout=10) as r:
        metrics = r.read().decode()
    assert 'aisite_serving_requests_total{model="classifier",role="champion",version="v1",code="200"} 1' in metrics
    assert 'aisite_serving_requests_total{model="classifier",role="champion",version="v1",code="400"} 7' in metrics
    assert 'code="500"' not in metrics
    assert 'aisite_serving_answers_total{model="classifier",role="champion",version="v1"} 5' in metrics
    assert 'aisite_serving_request_seconds_count{model="classifier",role="champion",version="v1"} 8' in metrics


def _raw(url: str, data: bytes) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(data)
    return s


def _answer(s: socket.socket) -> bytes:
    """What the server sends before it closes the connection."""
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def test_the_server_holds_no_thread_for_a_silent_or_trickling_client_and_caps_its_connections(trained: Path) -> None:
    """Issue 64: eight trickled uploads held ~380 MiB and eight threads indefinitely. Now two silent clients fill
    --max-connections 2 and a third is answered 503 at once; a silent client is disconnected after
    --io-timeout-s, and one trickling a body it announced gets 408 after --body-timeout-s; then the server serves
    again."""
    with _serving(trained, "--max-connections", "2", "--io-timeout-s", "2", "--body-timeout-s", "3") as url:
        silent = [_raw(url, b"") for _ in range(2)]
        time.sleep(0.3)
        start = time.monotonic()
        busy = _answer(_raw(url, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"))
        assert busy.startswith(b"HTTP/1.1 503") and b"connection limit" in busy, busy
        assert time.monotonic() - start < 1.5, "answered at once, not after the others' timeout"
        for s in silent:
            assert _answer(s) == b""  # closed by the server
            assert time.monotonic() - start < 10
            s.close()
        head = b"POST /v1/models/classifier:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
        trickle = _raw(url, head)
        start = time.monotonic()
        while True:
            try:
                trickle.sendall(b"{")
            except OSError:
                break
            trickle.settimeout(0.5)
            try:
                said = trickle.recv(65536)
            except TimeoutError:
                continue
            trickle.settimeout(10)
            said += _answer(trickle)
            assert said.startswith(b"HTTP/1.1 408") and b"--body-timeout-s" in said, said
            break
        took = time.monotonic() - start
        assert 2.5 < took < 8, took
        trickle.close()
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
            assert 'code="408"} 1' in r.read().decode()


def test_the_serving_dashboard_reads_only_what_the_servers_and_the_proxy_export() -> None:
    """Every metric its panels name is one payloads/serve.py writes or HAProxy's exporter's per-server responses
    (tests/lab/test_55_serving.py reads that one from Debian's HAProxy)."""
    import re

    from aisite.payloads.serve import Metrics

    plan = _plan("h100pod")
    monitoring = objects(plan)["monitoring.yaml"]
    (cm,) = [o for o in monitoring if o["metadata"]["name"] == "aisite-serving-dashboard"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(cm["data"]["aisite-serving.json"])
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    named = {m for e in exprs for m in re.findall(r"\b(aisite_[a-z_]+|haproxy_[a-z_]+)", e)}
    metrics = Metrics("m", "v1")
    metrics.observe(200, 0.01, [0.5])
    served = set(re.findall(r"^(aisite_[a-z_]+)", metrics.text(), re.M))
    assert named - served == {"haproxy_server_http_responses_total"}, named - served
    assert {"aisite_serving_requests_total", "aisite_serving_request_seconds_bucket"} <= named
    assert not [o for o in objects(_plan("gb200")).get("monitoring.yaml", []) if "serving" in o["metadata"]["name"]]
