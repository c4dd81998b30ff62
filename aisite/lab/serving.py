"""Served models on the lab, for real, where there is no Kubernetes: what the site's Deployments and proxy do,
done with the same programs on the lab's machines.

- Data and checkpoints live in the site's storage: the lab's CephFS data-set directory, which the GPU nodes mount
  read-only with ceph-fuse (/mnt/ceph/datasets); the controller reads through a node's mount namespace
  (/proc/PID/root). Writes go through a ceph-fuse mount with the admin key on the first monitor (the GPU nodes'
  key reads only), held for the step that writes: the held-out split and the training set (payloads/resnet.py's
  learnable samples), and each trained checkpoint.
- Training and evaluation run the payloads with this checkout's Python in a GPU node's network namespace, as
  `aisite bench run` does.
- Each version's model server (payloads/serve.py) runs in its own GPU node's network namespace, on the node's
  management address: the champion on the first GPU node, the candidate on the second.
- The proxy is HAProxy from Debian's package, on the controller's loopback, weighting the versions by their
  shares as the site's proxy does (the same configuration, platform/serving.py).

Every process is this lab's: its pid file under .aisite/<site>/serving/ names it, and it is stopped only while
its command line is still the one started (`aisite lab down` stops them too).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from aisite.lab.netns import pid as node_pid
from aisite.lab.podman import podman
from aisite.paths import serving_dir
from aisite.payloads.checkpoints import checkpoints as list_checkpoints
from aisite.plan import Node, Plan, ServingPlan
from aisite.platform.serving import SERVER_PORT, proxy_config, server_args
from aisite.render.inventory import container_name
from aisite.roots import PACKAGE

Say = Callable[[str], None]
# The proxy on the controller's loopback: requests from the controller, metrics for anyone on it.
PROXY_ADDRESS = "127.0.0.1"
PROXY_PORT = 28080
PROXY_METRICS_PORT = 28405
# The lab's model: small images and ten learnable classes, so CPU training shows a better model the longer it trains.
IMAGE_SIZE = 32
CLASSES = 10
TRAIN_SAMPLES = 384
HELD_OUT_SAMPLES = 200
TRAIN_BATCH = 16
LEARNING_RATE = 0.002


class ServingLabError(Exception):
    """A step of the lab's serving failed; the message names the node, process or file."""


def _mounts(plan: Plan) -> tuple[str, str]:
    """(CephFS directory, where the GPU nodes mount it): the tenants' storage on the lab."""
    mounts = list(plan.ceph.gpu_client.mounts) if plan.ceph and plan.ceph.gpu_client else []
    if not mounts:
        raise ServingLabError(f"{plan.site}'s GPU nodes mount no CephFS data-set directory: the lab serves from it")
    return mounts[0]


def data_mount(plan: Plan) -> str:
    """Where the GPU nodes mount the site's data-set directory."""
    return _mounts(plan)[1]


ADMIN_MOUNT = "/mnt/aisite-serving"


@contextlib.contextmanager
def writable(plan: Plan) -> Iterator[Path]:
    """The data-set directory, writable: a ceph-fuse mount with the admin key on the first monitor for the
    duration, reached from the controller through that node's mount namespace."""
    assert plan.ceph is not None and plan.ceph.filesystem
    monitor = plan.ceph.monitors[0]
    name = container_name(plan, monitor)
    fs = shlex.quote(plan.ceph.filesystem)
    podman("exec", name, "sh", "-c", f"mkdir -p {ADMIN_MOUNT} && ceph-fuse --client_fs={fs} {ADMIN_MOUNT} >/dev/null")
    try:
        yield Path(f"/proc/{node_pid(plan, monitor)}/root{ADMIN_MOUNT}{_mounts(plan)[0]}")
    finally:
        podman("exec", name, "umount", ADMIN_MOUNT, check=False)


def wait_visible(plan: Plan, rel: str, timeout: float = 60) -> None:
    """Until every serving node sees `rel` through its own (read-only) mount: CephFS's clients agree within
    moments, and a server must not start before its checkpoint is there."""
    deadline = time.monotonic() + timeout
    for node in hosts(plan).values():
        while not on_node(plan, node, rel).exists():
            if time.monotonic() > deadline:
                raise ServingLabError(f"{node.name} does not see {data_mount(plan)}/{rel} after {timeout:.0f} s")
            time.sleep(0.5)


def hosts(plan: Plan) -> dict[str, Node]:
    """role -> the GPU node its server runs on."""
    nodes = [n for n in plan.by_role("gpu") if n.rails and n.management]
    if len(nodes) < 2:
        raise ServingLabError(
            f"{plan.site}: the lab serves champion and candidate from two GPU nodes; it has {len(nodes)}"
        )
    return {"champion": nodes[0], "candidate": nodes[1]}


def on_node(plan: Plan, node: Node, rel: str) -> Path:
    """A path of the site's storage as the controller reaches it through `node`'s mount."""
    return Path(f"/proc/{node_pid(plan, node.name)}/root{data_mount(plan)}/{rel}")


def _python(plan: Plan, node: Node, module: str, *args: str) -> list[str]:
    """This checkout's Python running `module` in `node`'s network namespace."""
    env = {"PYTHONPATH": str(PACKAGE.parent), "OMP_NUM_THREADS": "2"}
    return [
        "nsenter",
        "-t",
        str(node_pid(plan, node.name)),
        "-n",
        "env",
        *(f"{k}={v}" for k, v in env.items()),
        sys.executable,
        "-m",
        module,
        *args,
    ]


def _run(cmd: list[str], what: str, timeout: float) -> str:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=PACKAGE.parent)
    except subprocess.TimeoutExpired:
        raise ServingLabError(f"{what}: no result within {timeout:.0f} s") from None
    if r.returncode != 0:
        raise ServingLabError(f"{what}: exit {r.returncode}: {r.stderr.strip()[-600:]}")
    return r.stdout


def prepare_data(plan: Plan, s: ServingPlan, dataset: str, say: Say) -> None:
    """The held-out split (`dataset`) and a training set beside it (train/<serving>), generated into the site's
    storage once: other seeds than each other, the same classes."""
    from aisite.payloads.resnet import SAMPLE_SUFFIX, write_samples  # PyTorch: the bench extra, not the CLI's

    node = hosts(plan)["champion"]
    for rel, count, seed in ((dataset, HELD_OUT_SAMPLES, 2), (f"train/{s.name}", TRAIN_SAMPLES, 1)):
        path = on_node(plan, node, rel)
        if path.is_dir() and sum(1 for p in path.iterdir() if p.name.endswith(SAMPLE_SUFFIX)) == count:
            continue
        say(f"{s.name}: generating {count} samples into {data_mount(plan)}/{rel}")
        with writable(plan) as root:
            write_samples(root / rel, count, IMAGE_SIZE, seed=seed, classes=CLASSES)
        wait_visible(plan, f"{rel}/{count - 1:06d}{SAMPLE_SUFFIX}")


def train(plan: Plan, s: ServingPlan, artifact: str, steps: int, say: Say, *, timeout: float = 900) -> None:
    """Train the served network on the CPU of the first GPU node and write its checkpoint into the storage."""
    node = hosts(plan)["champion"]
    say(f"{s.name}: training {s.model} for {steps} steps on {node.name} -> {data_mount(plan)}/{artifact}")
    with writable(plan) as root:
        args = [
            *("--workload", s.name, "--model", s.model, "--mode", "train", "--batch-size", str(TRAIN_BATCH)),
            *("--image-size", str(IMAGE_SIZE), "--warmup", "0", "--steps", str(steps), "--threads", "2"),
            *("--classes", str(CLASSES), "--lr", str(LEARNING_RATE)),
            *("--data", str(on_node(plan, node, f"train/{s.name}")), "--save", str(root / artifact)),
        ]
        _run(_python(plan, node, "aisite.payloads.resnet", *args), f"{s.name}: training on {node.name}", timeout)
    wait_visible(plan, artifact)


def evaluate(plan: Plan, s: ServingPlan, artifact: str, dataset: str, timeout: float = 600) -> str:
    """The evaluation's output (payloads/evaluate.py) of `artifact` on the held-out set, run on a GPU node."""
    node = hosts(plan)["champion"]
    args = [
        *("--model", s.model, "--checkpoint", str(on_node(plan, node, artifact))),
        *("--data", str(on_node(plan, node, dataset)), "--threads", "2"),
    ]
    return _run(_python(plan, node, "aisite.payloads.evaluate", *args), f"{s.name}: evaluating {artifact}", timeout)


# --------------------------------------------------------------------------------------------- the lab's processes
@dataclass(frozen=True)
class Proc:
    pid: int
    marker: str  # a word of its command line that says it is this process (not a pid reused since)
    spec: str  # what it was started as: a change restarts it


def _state(site: str) -> Path:
    d = serving_dir(site)
    d.mkdir(parents=True, exist_ok=True)
    return d


def _read(site: str, key: str) -> Proc | None:
    path = serving_dir(site) / f"{key}.json"
    try:
        doc = json.loads(path.read_text())
        proc = Proc(int(doc["pid"]), str(doc["marker"]), str(doc["spec"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return proc if _alive(proc) else None


def _alive(p: Proc) -> bool:
    try:
        cmdline = Path(f"/proc/{p.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return p.marker.encode() in cmdline


def _start(site: str, key: str, cmd: list[str], marker: str, spec: str) -> subprocess.Popen[bytes]:
    """Started in its own session, its output in a log of its own (the last start's only)."""
    with (_state(site) / f"{key}.log").open("wb") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=PACKAGE.parent)
    (_state(site) / f"{key}.json").write_text(json.dumps({"pid": p.pid, "marker": marker, "spec": spec}))
    return p


def _stop(site: str, key: str) -> bool:
    path = serving_dir(site) / f"{key}.json"
    proc = _read(site, key)
    path.unlink(missing_ok=True)
    if proc is None:
        return False
    os.killpg(proc.pid, signal.SIGTERM)  # its own session: nsenter and the server under it
    deadline = time.monotonic() + 15
    while _alive(proc) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(proc):
        os.killpg(proc.pid, signal.SIGKILL)
    return True


def stop_all(site: str) -> list[str]:
    """Stop every serving process this lab started (what its pid files name); the keys stopped."""
    d = serving_dir(site)
    keys = sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []
    return [k for k in keys if _stop(site, k)]


def _get(url: str, timeout: float = 5) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # the lab's own addresses only
        body: bytes = r.read()
        return body.decode()


def _wait(url: str, what: str, proc: subprocess.Popen[bytes], *, site: str, key: str, timeout: float = 180) -> None:
    """Until `url` answers; ServingLabError with its log's tail when the process ends first. Its own child's
    state, not /proc's command line, which is the parent's until the child has exec'd."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            _get(url)
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if proc.poll() is not None:
                log = (serving_dir(site) / f"{key}.log").read_text(errors="replace")[-600:]
                raise ServingLabError(f"{what} exited: {log}") from None
            if time.monotonic() > deadline:
                raise ServingLabError(f"{what}: not ready within {timeout:.0f} s") from None
            time.sleep(0.5)


def server_address(plan: Plan, role: str) -> str:
    """host:port of the role's model server: its node's management address (from the plan)."""
    node = hosts(plan)[role]
    assert node.management is not None
    return f"{node.management.address}:{SERVER_PORT}"


def server_url(plan: Plan, role: str) -> str:
    return f"http://{server_address(plan, role)}"


def apply(plan: Plan, s: ServingPlan, say: Say, faults: dict[str, list[str]] | None = None) -> None:
    """Make the lab serve what the plan says: a server per version (restarted where its version or checkpoint
    changed), none for a role the plan no longer has, and the proxy at the versions' shares. `faults` adds the
    model server's fault flags for a version (the lab's failing canary)."""
    site = plan.site
    where = hosts(plan)
    wanted = {v.role: v for v in s.versions}
    for role in ("champion", "candidate"):
        key = f"{s.name}-{role}"
        v = wanted.get(role)
        if v is None:
            if _stop(site, key):
                say(f"{s.name}: stopped the {role}'s server")
            continue
        node = where[role]
        assert node.management is not None
        extra = (faults or {}).get(v.version, [])
        args = server_args(s, v, str(on_node(plan, node, v.artifact)), SERVER_PORT)
        args += ["--host", node.management.address, "--threads", "1", *extra]
        spec = json.dumps(args)
        running = _read(site, key)
        if running and running.spec == spec:
            continue
        _stop(site, key)
        say(f"{s.name}: {role} {v.version} ({v.artifact}) on {node.name} {node.management.address}:{SERVER_PORT}")
        proc = _start(site, key, _python(plan, node, "aisite.payloads.serve", *args), "aisite.payloads.serve", spec)
        _wait(f"{server_url(plan, role)}/v1/models/{s.name}", f"{s.name}'s {role} server", proc, site=site, key=key)
    _proxy(plan, s, say)


def _proxy(plan: Plan, s: ServingPlan, say: Say) -> None:
    haproxy = shutil.which("haproxy")
    if haproxy is None:
        raise ServingLabError("haproxy is not installed (scripts/setup.sh installs Debian's package)")
    backends = [(v.role, server_address(plan, v.role), v.share) for v in s.versions]
    config = proxy_config(s.name, backends, PROXY_PORT, PROXY_METRICS_PORT, PROXY_ADDRESS)
    key = f"{s.name}-proxy"
    path = _state(plan.site) / f"{key}.cfg"
    running = _read(plan.site, key)
    if running and running.spec == config:
        return
    check = subprocess.run(
        [haproxy, "-c", "-q", "-f", str(_write(path, config))], capture_output=True, text=True, check=False
    )
    if check.returncode != 0:
        raise ServingLabError(f"haproxy refused {path}: {check.stderr.strip()[-600:]}")
    _stop(plan.site, key)
    shares = ", ".join(f"{v.role} {v.version} {v.share} %" for v in s.versions)
    say(f"{s.name}: proxy on {PROXY_ADDRESS}:{PROXY_PORT}: {shares}")
    proc = _start(plan.site, key, [haproxy, "-db", "-f", str(path)], str(path), config)
    _wait(f"http://{PROXY_ADDRESS}:{PROXY_METRICS_PORT}/metrics", "haproxy", proc, site=plan.site, key=key, timeout=30)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def server_metrics(plan: Plan, role: str) -> str:
    return _get(f"{server_url(plan, role)}/metrics")


# ------------------------------------------------------------------------------------------------- requests
@dataclass
class VersionLoad:
    requests: int = 0
    errors: int = 0
    latencies_ms: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float | int | None]:
        lat = sorted(self.latencies_ms)

        def q(f: float) -> float | None:
            return round(lat[min(len(lat) - 1, int(f * len(lat)))], 1) if lat else None

        return {"requests": self.requests, "errors": self.errors, "p50_ms": q(0.5), "p95_ms": q(0.95)}


def load(
    plan: Plan, s: ServingPlan, dataset: str, *, seconds: float, max_requests: int, concurrency: int = 2
) -> dict[str, dict[str, float | int | None]]:
    """Bounded requests through the proxy from the controller (one image each, from the held-out set): at most
    `max_requests`, for at most `seconds`; per answering version, its requests, errors and latency."""
    node = hosts(plan)["champion"]
    files = sorted(on_node(plan, node, dataset).iterdir())[:64]
    bodies = [
        json.dumps({"instances": [{"b64": base64.b64encode(f.read_bytes()[1:]).decode()}]}).encode() for f in files
    ]
    url = f"http://{PROXY_ADDRESS}:{PROXY_PORT}/v1/models/{s.name}:predict"
    out: dict[str, VersionLoad] = {}
    lock = threading.Lock()
    sent = [0]
    deadline = time.monotonic() + seconds

    def worker() -> None:
        while time.monotonic() < deadline:
            with lock:
                if sent[0] >= max_requests:
                    return
                i = sent[0]
                sent[0] += 1
            start = time.perf_counter()
            req = urllib.request.Request(url, data=bodies[i % len(bodies)], method="POST")
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    r.read()
                    version, ok = r.headers.get("X-Model-Version", "?"), True
            except urllib.error.HTTPError as exc:
                version, ok = exc.headers.get("X-Model-Version", "?") if exc.headers else "?", False
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                version, ok = "?", False
            ms = (time.perf_counter() - start) * 1000
            with lock:
                v = out.setdefault(version, VersionLoad())
                v.requests += 1
                v.errors += 0 if ok else 1
                v.latencies_ms.append(ms)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {version: v.summary() for version, v in sorted(out.items())}


class LabRuntime:
    """What `aisite promote` asks of the lab: the steps above, with the canary's requests sent from the
    controller (bounded by `max_requests` and the canary's seconds)."""

    def __init__(self, say: Say, *, faults: dict[str, list[str]] | None = None, max_requests: int = 2000) -> None:
        self.say = say
        self.faults = faults or {}
        self.max_requests = max_requests

    def evaluate(self, plan: Plan, s: ServingPlan, artifact: str, dataset: str) -> str:
        return evaluate(plan, s, artifact, dataset)

    def apply(self, plan: Plan, s: ServingPlan) -> None:
        apply(plan, s, self.say, self.faults)

    def metrics(self, plan: Plan, s: ServingPlan, role: str) -> dict[str, str]:
        return {hosts(plan)[role].name: server_metrics(plan, role)}

    def traffic(self, plan: Plan, s: ServingPlan, seconds: float) -> dict[str, dict[str, float | int | None]]:
        assert s.promotion is not None
        return load(plan, s, s.promotion.dataset, seconds=seconds, max_requests=self.max_requests)

    def checkpoints(self, plan: Plan, s: ServingPlan) -> list[tuple[str, float]]:
        return checkpoints(plan, s)


def checkpoints(plan: Plan, s: ServingPlan) -> list[tuple[str, float]]:
    """The checkpoints in models/NAME/ of the storage, as the champion's node sees it (payloads/checkpoints.py's
    bounded listing, the one a site's Job runs)."""
    return list_checkpoints(str(on_node(plan, hosts(plan)["champion"], f"models/{s.name}")))


def fault_flags(latency_ms: float, error_rate: float) -> list[str]:
    """The model server's fault flags (payloads/serve.py) for a version the lab makes fail."""
    flags = []
    if latency_ms:
        flags += ["--inject-latency-ms", str(latency_ms)]
    if error_rate:
        flags += ["--inject-error-rate", str(error_rate)]
    return flags
