"""all_reduce bus bandwidth over torch.distributed, as nccl-tests' all_reduce_perf reports it: one result line
(result.py's schema) from rank 0. NCCL on GPUs; gloo on CPUs (the lab, where each rank's traffic leaves on the
interface GLOO_SOCKET_IFNAME names).

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=... MASTER_PORT=... python3 allreduce.py --group unit0-rail1 --mbytes 4

busbw = bytes x 2(n-1)/n / time (nccl-tests' PERFORMANCE.md): what each rank's links carry, comparable across
group sizes.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

try:  # inside the package (the controller, tests) or as a plain script beside result.py (the job containers)
    from aisite.payloads.result import Timer, emit, now, result
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from result import Timer, emit, now, result  # type: ignore[import-not-found,no-redef]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--group", required=True, help="The group's name, carried in the result.")
    p.add_argument("--mbytes", type=float, default=4.0, help="Size of the reduced tensor in MiB.")
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--timeout", type=float, default=120.0, help="Seconds the rendezvous and each step may take.")
    a = p.parse_args(argv)
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=a.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    numel = int(a.mbytes * 2**20) // 4
    t = torch.ones(numel, dtype=torch.float32, device=device)
    started = now()
    for _ in range(a.warmup):
        dist.all_reduce(t)
    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    with Timer() as timer:
        for _ in range(a.iterations):
            dist.all_reduce(t)
        if cuda:
            torch.cuda.synchronize()
    seconds = torch.tensor([timer.seconds], dtype=torch.float64)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
    per_step = float(seconds.item()) / a.iterations
    bytes_ = numel * 4
    busbw = bytes_ * 2 * (world - 1) / world / per_step / 1e9 if world > 1 else 0.0
    if rank == 0:
        emit(
            result(
                workload=a.group,
                kind="allreduce",
                metric="busbw",
                unit="GB/s",
                value=busbw,
                world_size=world,
                nodes=int(os.environ.get("AISITE_NODES", "1")),
                device={
                    "type": "gpu" if cuda else "cpu",
                    "name": torch.cuda.get_device_name() if cuda else "cpu",
                    "count": world if cuda else 0,
                },
                backend=dist.get_backend(),
                params={"bytes": bytes_, "iterations": a.iterations, "seconds_per_step": round(per_step, 6)},
                started=started,
                seconds=float(seconds.item()),
                tool={"name": "torch.distributed", "version": torch.__version__},
            )
        )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
