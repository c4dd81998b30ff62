"""Workloads run for real on the lab, where there is no Kubernetes: the payloads start in the GPU nodes' network
namespaces (their rails, addresses, source routes), so their traffic crosses the emulated leaves and spines.

The lab's node images carry no PyTorch: the ResNet payload runs with this checkout's Python inside each node's
network namespace (`nsenter -n`), one process per rail, gloo bound to the rail's interface; iperf3 likewise
(aisite.lab.netns, acceptance's runner too). Bytes the switches forwarded during a run are read from their ports
and kept with the result.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath

from aisite.bench.results import Result, collect
from aisite.lab.netns import NetnsError, in_netns, iperf3, pid
from aisite.lab.podman import LabError
from aisite.payloads import command_args, tools
from aisite.plan import FABRIC_ROLES, Node, Plan, Rail, WorkloadPlan
from aisite.roots import PACKAGE

Say = Callable[[str], None]
LAB_KINDS = ("resnet50-train", "resnet50-infer", "resnet152-train", "resnet152-infer", "iperf3")
DATA_PATH = re.compile(r"(/[A-Za-z0-9._-]{1,255}){1,32}")


class BenchError(Exception):
    """A run that could not start or did not finish; the message names the workload, node and step."""


@dataclass(frozen=True, slots=True)
class Options:
    steps: int = 3
    warmup: int = 1
    image_size: int = 64
    batch_size: int = 4
    seconds: int = 3  # iperf3
    timeout: float = 600.0
    # A data-set directory on the GPU nodes (under one of their Ceph mounts) the ResNet payload reads each step.
    data: str | None = None


def data_problem(plan: Plan, path: str) -> str | None:
    """Why `path` is no data set the lab's GPU nodes can read (None when it is): the payloads run from the
    controller and read it through each node's own ceph-fuse mount, so it lies under one of those mounts."""
    mounts = [m for _, m in plan.ceph.gpu_client.mounts] if plan.ceph and plan.ceph.gpu_client else []
    if not mounts:
        return f"{plan.site}'s GPU nodes mount no Ceph data set (storage_nodes.ceph with a file system and layouts)"
    clean = PurePosixPath(path)
    if not clean.is_absolute() or ".." in clean.parts or str(clean) != path or not DATA_PATH.fullmatch(path):
        return f"{path!r} is not a plain absolute path (letters, digits, '._-' between slashes)"
    if not any(clean.is_relative_to(m) and clean != PurePosixPath(m) for m in mounts):
        return f"{path} is under none of the GPU nodes' data-set mounts ({', '.join(mounts)})"
    return None


def fabric_bytes(plan: Plan) -> dict[str, int]:
    """tx bytes per switch, summed over its ports (read inside each switch's namespace)."""
    out = {}
    for sw in plan.switches:
        if sw.role not in FABRIC_ROLES:
            continue
        links = json.loads(in_netns(plan, sw.name, "ip", "-j", "-s", "link", "show"))
        out[sw.name] = sum(
            link["stats64"]["tx"]["bytes"] for link in links if link.get("ifname") != "lo" and "stats64" in link
        )
    return out


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


def gpu_nodes(plan: Plan, w: WorkloadPlan) -> list[Node]:
    nodes = [n for n in plan.by_role("gpu") if n.gpu and n.gpu.type == w.gpu_type and n.rails][: w.nodes]
    if len(nodes) < w.nodes:
        raise BenchError(f"{w.name}: needs {w.nodes} {w.gpu_type} nodes with rails, the site has {len(nodes)}")
    return nodes


def placements(nodes: list[Node]) -> list[list[tuple[Node, Rail]]]:
    """The runs of a scaling series: 1 process, one per node, then one per rail on every node (as a DGX runs one
    process per GPU, each GPU beside its own rail NIC). Across nodes, rank i's peers sit on other leaves too, so
    the ring crosses the spines."""
    rails = min(len(n.rails) for n in nodes)
    series = [[(nodes[0], nodes[0].rails[0])]]
    if len(nodes) > 1:
        series.append([(n, n.rails[0]) for n in nodes])
    if rails > 1:
        series.append([(n, n.rails[r]) for n in nodes for r in range(rails)])
    return series


def launch(
    plan: Plan,
    ranks: list[tuple[Node, Rail]],
    module: str,
    args: list[str],
    *,
    timeout: float,
    what: str,
    port: int,
    node_args: Callable[[Node], list[str]] = lambda _: [],
) -> list[str]:
    """Run `python -m module args` (and the rank's node's `node_args`) once per rank, each in its node's network
    namespace with the torch.distributed environment (rank 0's rail address is the rendezvous; gloo leaves on each
    rank's rail); their stdouts."""
    master = ranks[0][1].address
    procs = []
    local: dict[str, int] = {}
    nodes = len({n.name for n, _ in ranks})
    for rank, (node, rail) in enumerate(ranks):
        local_rank = local.get(node.name, 0)
        local[node.name] = local_rank + 1
        env = {
            "RANK": str(rank),
            "WORLD_SIZE": str(len(ranks)),
            "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(sum(1 for n, _ in ranks if n.name == node.name)),
            "MASTER_ADDR": master,
            "MASTER_PORT": str(port),
            "GLOO_SOCKET_IFNAME": rail.interface,  # gloo's traffic leaves on this rank's rail
            "OMP_NUM_THREADS": "1",
            "AISITE_NODES": str(nodes),
            "PYTHONPATH": str(PACKAGE.parent),  # aisite.payloads, from a checkout or site-packages
        }
        cmd = [
            "nsenter",
            "-t",
            str(pid(plan, node.name)),
            "-n",
            "env",
            *(f"{k}={v}" for k, v in env.items()),
            sys.executable,
            "-m",
            module,
            *args,
            *node_args(node),
        ]
        procs.append(
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=PACKAGE.parent)
        )
    outputs = []
    deadline = time.monotonic() + timeout
    try:
        for rank, p in enumerate(procs):
            stdout, stderr = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            outputs.append(stdout)
            if p.returncode:
                node, rail = ranks[rank]
                raise BenchError(
                    f"{what}: rank {rank} on {node.name} ({rail.interface} {rail.address}) exited with "
                    f"{p.returncode}: {stderr.strip()[-600:]}"
                )
    except subprocess.TimeoutExpired:
        raise BenchError(f"{what}: no result within {timeout:.0f} s (rendezvous at {master}:{port})") from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outputs


def _resnet(plan: Plan, w: WorkloadPlan, ranks: list[tuple[Node, Rail]], opts: Options, say: Say) -> Result:
    hosts = sorted({n.name for n, _ in ranks})
    say(
        f"{w.name}: {len(ranks)} process(es) on {', '.join(hosts)} over "
        + ", ".join(f"{n.name}:{r.interface}" for n, r in ranks)
    )
    args = [
        *command_args(w.name, w.kind, w.batch_size or opts.batch_size, len(hosts)),
        "--image-size",
        str(opts.image_size),
        "--warmup",
        str(opts.warmup),
        "--steps",
        str(opts.steps),
        "--threads",
        "1",
    ]

    def node_args(node: Node) -> list[str]:
        # The process runs on the controller, in the node's network namespace only: it reads the data set through
        # the node's own ceph-fuse mount, in the node's mount namespace (/proc/PID/root).
        return ["--data", f"/proc/{pid(plan, node.name)}/root{opts.data}"] if opts.data else []

    outputs = launch(
        plan,
        ranks,
        "aisite.payloads.resnet",
        args,
        timeout=opts.timeout,
        what=w.name,
        port=29500 + len(ranks),
        node_args=node_args,
    )
    found = collect(outputs[0], f"{w.name} rank 0")
    if len(found) != 1:
        raise BenchError(f"{w.name}: rank 0 printed {len(found)} results, expected one")
    result = found[0]
    result.params["placement"] = [f"{n.name}:{r.interface}:{r.address}" for n, r in ranks]
    if opts.data and isinstance(data := result.params.get("data"), dict):
        data["dir"] = opts.data  # as the nodes mount it, not the controller's way in
    return result


def _iperf3(plan: Plan, w: WorkloadPlan, opts: Options, say: Say) -> Result:
    a, b = gpu_nodes(plan, w)[:2]
    src, dst = a.rails[0], b.rails[-1]  # different leaves when the nodes have two rails or more
    say(f"{w.name}: iperf3 {a.name} {src.address} ({src.leaf}) -> {b.name} {dst.address} ({dst.leaf})")
    try:
        text = iperf3(plan, a.name, src.address, b.name, dst.address, seconds=opts.seconds, parallel=2)
    except NetnsError as exc:
        raise BenchError(f"{w.name}: {exc}") from None
    doc = tools.to_result(
        "iperf3",
        w.name,
        text,
        nodes=2,
        world_size=1,
        device={"type": "nic", "name": f"{src.interface} -> {dst.interface} (veth)", "count": 0},
        tool={"name": "iperf3"},
        params={
            "from": f"{a.name}:{src.address}",
            "to": f"{b.name}:{dst.address}",
            "path": f"{src.leaf} > spine > {dst.leaf}",
        },
    )
    return Result.model_validate(doc)


def run_workload(plan: Plan, name: str, opts: Options, say: Say) -> list[Result]:
    """Run one of the site's workloads on its lab; every result carries `lab: true` and the switches' bytes."""
    w = next((w for w in plan.workloads if w.name == name), None)
    if w is None:
        known = ", ".join(x.name for x in plan.workloads) or "none"
        raise BenchError(f"site.workloads: no workload {name!r} (the site declares: {known})")
    if plan.connection != "lab":
        raise BenchError(
            f"{plan.site} is not a lab stack: on a site the workloads run as jobs (manifests/{plan.site}/workloads)"
        )
    if opts.data and (problem := data_problem(plan, opts.data)):
        raise BenchError(f"--data: {problem}")
    if opts.data and w.kind == "iperf3":
        raise BenchError(f"--data: {w.name} is iperf3, which reads no data set")
    if w.kind not in LAB_KINDS:
        raise BenchError(
            f"{w.name}: {w.kind} does not run on the lab (it runs: {', '.join(LAB_KINDS)}); "
            + {
                "nccl-allreduce": "NCCL needs GPUs",
                "tf-cnn-benchmarks": "it needs the NGC TensorFlow image and GPUs",
                "ib-write-bw": "the lab has no RDMA devices (no rdma_rxe in this kernel)",
                "fio": "fio's libnfs engine (fio 3.33, libnfs 5.0.2) fails after its first NFSv4 write against the "
                "lab's Ganesha ('ZDR error: Failed to encode COMPOUND4args') and the lab's kernel has no NFS client",
            }.get(w.kind, "")
        )
    results = []
    runs = placements(gpu_nodes(plan, w)) if w.kind != "iperf3" else [[]]
    for ranks in runs:
        before = fabric_bytes(plan)
        r = _iperf3(plan, w, opts, say) if w.kind == "iperf3" else _resnet(plan, w, ranks, opts, say)
        r.params["lab"] = True
        r.params["fabric_tx_bytes"] = _delta(before, fabric_bytes(plan))
        results.append(r)
    return results


__all__ = ["LAB_KINDS", "BenchError", "LabError", "Options", "data_problem", "run_workload"]
