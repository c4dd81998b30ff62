"""Storage on the running lab (`make bench-storage`, after `make lab`): what its Ceph cluster and its NFS export
deliver to the lab's clients, as a table and JSON.

- S3 through RGW from this machine (the controller): put and get throughput of OBJECTS objects of OBJECT_MIB MiB,
  THREADS at a time, as the tenant's own user.
- CephFS sequential read per GPU node and aggregate for 1, 2 and all GPU nodes at once (each reading a file of
  FILE_MIB MiB of its own in the data sets' EC pool), with the aggregate as a ratio to one client; the same files
  through the NFS export for comparison (libnfs in the containers, the kernel client on the VM).
- From MLPerf Storage: how many emulated accelerators one GPU node keeps at least 90 % busy, each a ResNet-50 reader
  (DLIO's resnet50_h100 workload: batches of 64 samples of 114,660 bytes, 0.103 s of computation per batch;
  argonne-lcf/dlio_benchmark, dlio_benchmark/configs/workload/resnet50_h100.yaml) whose next batch is read while
  the current one computes. MLPerf Storage passes a run whose accelerators are busy at least 90 % of the time.

Reads go through a mount of the bench's own with the GPU nodes' read-only key and no client cache (ceph-fuse's
object cache off, the kernel's page cache bypassed), so every byte comes from the OSDs. The lab's nodes share
one machine's CPUs and disk, and its links are veths: the figures say how the lab's paths compare with each
other and run to run, not what a site's NVMe and 400G fabric deliver. Files and objects the bench writes are
removed at the end.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from minio import Minio  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from aisite.lab.ceph import with_admin_mount  # noqa: E402
from aisite.lab.podman import CONF  # noqa: E402
from aisite.lab.topology import vm_nodes  # noqa: E402
from aisite.loader import load_site, resolve_stack  # noqa: E402
from aisite.paths import lab_ssh_dir, provision_dir  # noqa: E402
from aisite.plan import Plan, build_plan  # noqa: E402
from aisite.plan.ceph_types import CephPlan  # noqa: E402

SITE = "lab"
ADMIN_MOUNT = "/mnt/aisite-bench-admin"
CLIENT_MOUNT = "/mnt/aisite-bench"
BENCH_DIR = "aisite-bench"  # under the first data set and the NFS export
# DLIO's resnet50_h100 workload (see the module's docstring).
SAMPLE_BYTES = 114_660
BATCH = 64
COMPUTE_S = 0.103
BUSY_TARGET = 0.90

console = Console(stderr=True, width=None if sys.stderr.isatty() else 140)


def podman(*args: str, check: bool = True) -> str:
    env = os.environ | {"CONTAINERS_CONF": str(CONF)}
    r = subprocess.run(["podman", *args], env=env, capture_output=True, text=True, check=False)
    if check and r.returncode:
        sys.exit(f"podman {' '.join(args[:3])}... failed: {r.stderr.strip()[-400:]}")
    return r.stdout


def sh(plan: Plan, node: str, command: str) -> str:
    """A shell command on a lab node: a container through podman, the VM over SSH as Ansible reaches it."""
    if node in vm_nodes(plan):
        address = next(n.management.address for n in plan.nodes if n.name == node)
        cmd = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=10"]
        cmd += ["-o", f"UserKnownHostsFile={provision_dir(SITE) / 'known_hosts'}"]
        cmd += ["-i", str(lab_ssh_dir(SITE) / "id_ed25519"), f"root@{address}", command]
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    else:
        env = os.environ | {"CONTAINERS_CONF": str(CONF)}
        cmd = ["podman", "exec", f"aisite-{SITE}-{node}", "sh", "-c", command]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if r.returncode:
        sys.exit(f"{node}: {command[:80]}... failed: {r.stderr.strip()[-400:]}")
    return r.stdout


def admin(plan: Plan, c: CephPlan, command: str) -> str:
    """A command on the first monitor with the file system mounted (admin key) at ADMIN_MOUNT."""
    return sh(plan, c.monitors[0], with_admin_mount(c.filesystem, ADMIN_MOUNT, command))


def mount_uncached(plan: Plan, c: CephPlan, node: str) -> None:
    """The data sets at CLIENT_MOUNT with the node's own read-only client, no object cache and no page cache."""
    assert c.gpu_client is not None
    client = c.gpu_client.client.removeprefix("client.")
    directory = c.gpu_client.mounts[0][0]
    sh(
        plan,
        node,
        f"mkdir -p {CLIENT_MOUNT} && (mountpoint -q {CLIENT_MOUNT} || ceph-fuse --id {client}"
        f" -c /etc/ceph/aisite-client.conf --keyring /etc/ceph/aisite-client.keyring --client_fs={c.filesystem}"
        f" --client_mountpoint={directory} --client_oc=false --fuse_disable_pagecache=true {CLIENT_MOUNT}"
        " >/dev/null 2>&1)",
    )


def timed_read(plan: Plan, node: str, command: str) -> float:
    start = time.monotonic()
    sh(plan, node, command)
    return time.monotonic() - start


def together(plan: Plan, jobs: list[tuple[str, str]], mib: int) -> dict[str, Any]:
    """Commands reading `mib` MiB each, one per node, started together: per node and aggregate MiB/s."""
    with ThreadPoolExecutor(len(jobs)) as pool:
        seconds = list(pool.map(lambda j: timed_read(plan, *j), jobs))
    per = {node: round(mib / s, 1) for (node, _), s in zip(jobs, seconds, strict=True)}
    return {"clients": len(jobs), "per_client_mib_s": per, "aggregate_mib_s": round(mib * len(jobs) / max(seconds), 1)}


def s3_bench(plan: Plan, c: CephPlan, objects: int, mib: int, threads: int) -> dict[str, Any]:
    tenant = c.tenants[0]
    who = f"--tenant={tenant.s3_tenant} --uid={tenant.s3_user}"
    user = json.loads(sh(plan, c.monitors[0], f"radosgw-admin user info {who}"))
    key = user["keys"][0]  # in this process only
    s3 = Minio(
        c.s3_endpoint.removeprefix("http://"), key["access_key"], key["secret_key"], secure=False, region="default"
    )
    body = os.urandom(mib << 20)
    names = [f"{BENCH_DIR}/obj-{i}" for i in range(objects)]

    def put(name: str) -> None:
        s3.put_object(tenant.s3_bucket, name, io.BytesIO(body), len(body), part_size=max(5 << 20, len(body)))

    def get(name: str) -> int:
        r = s3.get_object(tenant.s3_bucket, name)
        try:
            return len(r.read())
        finally:
            r.close()
            r.release_conn()

    with ThreadPoolExecutor(threads) as pool:
        start = time.monotonic()
        list(pool.map(put, names))
        put_s = time.monotonic() - start
        start = time.monotonic()
        got = sum(pool.map(get, names))
        get_s = time.monotonic() - start
    for name in names:
        s3.remove_object(tenant.s3_bucket, name)
    assert got == objects * len(body)
    total = objects * mib
    return {
        "objects": objects,
        "object_mib": mib,
        "threads": threads,
        "put_mib_s": round(total / put_s, 1),
        "get_mib_s": round(total / get_s, 1),
    }


# The emulated accelerators, run on a GPU node with its python3: N threads, each reading its own file batch by
# batch (the next batch read while the current one "computes", as DLIO's prefetching reader does).
ACCELERATORS = r"""
import os, sys, threading, time, json
paths, batches, batch_bytes, compute = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
busy = [0.0] * len(paths)
def accel(i):
    fd = os.open(paths[i], os.O_RDONLY)
    def read(b):
        os.pread(fd, batch_bytes, b * batch_bytes)
    nxt = threading.Thread(target=read, args=(0,)); nxt.start()
    for b in range(batches):
        nxt.join()
        if b + 1 < batches:
            nxt = threading.Thread(target=read, args=(b + 1,)); nxt.start()
        time.sleep(compute); busy[i] += compute
    os.close(fd)
start = time.monotonic()
ts = [threading.Thread(target=accel, args=(i,)) for i in range(len(paths))]
[t.start() for t in ts]; [t.join() for t in ts]
wall = time.monotonic() - start
print(json.dumps({"wall_s": wall, "busy": [b / wall for b in busy]}))
"""


def accelerators(plan: Plan, c: CephPlan, node: str, paths: list[str], batches: int) -> dict[str, Any]:
    script = f"python3 -c {shlex.quote(ACCELERATORS)} {','.join(paths)} {batches} {SAMPLE_BYTES * BATCH} {COMPUTE_S}"
    out = json.loads(sh(plan, node, script))
    busy = min(out["busy"])
    return {"accelerators": len(paths), "min_busy": round(busy, 3), "wall_s": round(out["wall_s"], 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file-mib", type=int, default=int(os.environ.get("AISITE_BENCH_FILE_MIB", "256")))
    ap.add_argument("--objects", type=int, default=16)
    ap.add_argument("--object-mib", type=int, default=16)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--batches", type=int, default=20, help="batches per emulated accelerator")
    ap.add_argument("--max-accelerators", type=int, default=8)
    args = ap.parse_args()
    plan = build_plan(load_site(resolve_stack(SITE)))
    c = plan.ceph
    if c is None or c.gpu_client is None:
        sys.exit("the lab stack declares no Ceph data sets (storage_nodes.ceph with a file system and layouts)")
    first = f"aisite-{SITE}-{c.monitors[0]}"
    if podman("container", "inspect", "-f", "{{.State.Running}}", first, check=False).strip() != "true":
        sys.exit(f"{first} is not running: run `make lab` first (this bench measures the running lab)")
    gpus = [n.name for n in plan.by_role("gpu")]
    vms = vm_nodes(plan)
    export = next((e for e in plan.exports if e.name == "datasets"), None)
    if export is None:
        sys.exit("the lab has no datasets export to compare with")
    data_dir = c.fs_layouts[0][0]
    mib, results = args.file_mib, dict[str, Any]()
    steps = sorted({1, 2, len(gpus)})
    files = {(k, g): f"seq-{k}-{g}.bin" for k in steps for g in gpus[:k]}
    batch_bytes = SAMPLE_BYTES * BATCH
    accel_files = [f"accel-{i}.bin" for i in range(args.max_accelerators)]
    console.print(f"writing {len(files)} files of {mib} MiB to CephFS {data_dir} and NFS {export.path} ...")
    names = " ".join(files.values())
    admin(
        plan,
        c,
        f"mkdir -p {ADMIN_MOUNT}{data_dir}/{BENCH_DIR} && cd {ADMIN_MOUNT}{data_dir}/{BENCH_DIR}"
        f" && for f in {names}; do head -c {mib}M /dev/urandom > $f; done"
        f" && for f in {' '.join(accel_files)}; do head -c {batch_bytes * args.batches} /dev/urandom > $f; done",
    )
    sh(
        plan,
        export.server,
        f"mkdir -p {export.path}/{BENCH_DIR} && cd {export.path}/{BENCH_DIR}"
        f" && for f in {names}; do head -c {mib}M /dev/urandom > $f; done",
    )
    try:
        for g in gpus:
            mount_uncached(plan, c, g)
        console.print("S3 put/get from the controller ...")
        results["s3"] = s3_bench(plan, c, args.objects, args.object_mib, args.threads)
        cephfs, nfs = [], []
        for k in steps:
            console.print(f"sequential reads, {k} client(s) ...")
            jobs = [
                (g, f"dd if={CLIENT_MOUNT}/{BENCH_DIR}/{files[k, g]} of=/dev/null bs=4M status=none") for g in gpus[:k]
            ]
            cephfs.append(together(plan, jobs, mib))
            nfs_jobs = []
            for g in gpus[:k]:
                path = f"{export.path}/{BENCH_DIR}/{files[k, g]}"
                if g in vms:  # the VM's kernel mounts the export (the containers' kernel has no NFS client)
                    nfs_jobs.append(
                        (
                            g,
                            f"dd if={export.mount_point}/{BENCH_DIR}/{files[k, g]} of=/dev/null bs=4M iflag=direct"
                            " status=none",
                        )
                    )
                else:
                    nfs_jobs.append((g, f"nfs-cat 'nfs://{export.address}{path}?version=4' > /dev/null"))
            nfs.append(together(plan, nfs_jobs, mib))
        one = cephfs[0]["aggregate_mib_s"]
        for row in cephfs:
            row["ratio_to_one"] = round(row["aggregate_mib_s"] / one, 2)
        one = nfs[0]["aggregate_mib_s"]
        for row in nfs:
            row["ratio_to_one"] = round(row["aggregate_mib_s"] / one, 2)
        results["cephfs_read"], results["nfs_read"] = cephfs, nfs
        console.print("emulated ResNet-50 accelerators on one GPU node ...")
        runs, n = [], 1
        while n <= args.max_accelerators:
            paths = [f"{CLIENT_MOUNT}/{BENCH_DIR}/{f}" for f in accel_files[:n]]
            run = accelerators(plan, c, gpus[0], paths, args.batches)
            runs.append(run)
            if run["min_busy"] < BUSY_TARGET:
                break
            n *= 2
        kept = [r["accelerators"] for r in runs if r["min_busy"] >= BUSY_TARGET]
        results["accelerators"] = {
            "node": gpus[0],
            "runs": runs,
            "kept_busy": max(kept, default=0),
            "sample_bytes": SAMPLE_BYTES,
            "batch": BATCH,
            "compute_s": COMPUTE_S,
        }
    finally:
        for g in gpus:
            sh(plan, g, f"umount {CLIENT_MOUNT} 2>/dev/null; true")
        admin(plan, c, f"rm -rf {ADMIN_MOUNT}{data_dir}/{BENCH_DIR}")
        sh(plan, export.server, f"rm -rf {export.path}/{BENCH_DIR}")
    report(results, mib)
    print(json.dumps(results, indent=2))


def _per(per: dict[str, float]) -> str:
    return ", ".join(f"{node} {v}" for node, v in per.items())


def report(results: dict[str, Any], mib: int) -> None:
    s3 = results["s3"]
    console.print(
        f"S3 (RGW, from the controller): put {s3['put_mib_s']} MiB/s, get {s3['get_mib_s']} MiB/s "
        f"({s3['objects']} x {s3['object_mib']} MiB, {s3['threads']} at a time)"
    )
    t = Table(title=f"Sequential reads of {mib} MiB per client (MiB/s)")
    for col in (
        "clients",
        "CephFS per client",
        "CephFS aggregate",
        "x one",
        "NFS per client",
        "NFS aggregate",
        "x one",
    ):
        t.add_column(col)
    for ceph, nfs in zip(results["cephfs_read"], results["nfs_read"], strict=True):
        t.add_row(
            str(ceph["clients"]),
            _per(ceph["per_client_mib_s"]),
            str(ceph["aggregate_mib_s"]),
            str(ceph["ratio_to_one"]),
            _per(nfs["per_client_mib_s"]),
            str(nfs["aggregate_mib_s"]),
            str(nfs["ratio_to_one"]),
        )
    console.print(t)
    a = results["accelerators"]
    runs = ", ".join(f"{r['accelerators']}: {r['min_busy']:.0%}" for r in a["runs"])
    console.print(
        f"emulated ResNet-50 accelerators kept >= {BUSY_TARGET:.0%} busy on {a['node']}: {a['kept_busy']} ({runs})"
    )


if __name__ == "__main__":
    main()
