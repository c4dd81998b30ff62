"""Runs a benchmark tool, passes its own output through to stderr, and prints one result line (result.py's schema).

    python3 tools.py nccl-allreduce --workload W -- all_reduce_perf -b 8 -e 8G -f 2 -g 1
    python3 tools.py ib-write-bw --workload W -- ib_write_bw -d mlx5_0 -x 3 --report_gbits -F PEER
    python3 tools.py fio --workload W -- fio --output-format=json JOBFILE
    python3 tools.py iperf3 --workload W -- iperf3 -J -c PEER
    python3 tools.py tf-cnn-benchmarks --workload W -- python tf_cnn_benchmarks.py --model=resnet50 ...
    python3 tools.py KIND --workload W --parse FILE     # an output already captured

Standard library only (it runs inside the tools' own images). A tool that fails, or whose output holds no
figure, exits non-zero and prints no result: a missing figure is never reported as zero.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

try:  # inside the package (the controller, tests) or as a plain script beside result.py (the job containers)
    from aisite.payloads.result import emit, now, result
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from result import emit, now, result  # type: ignore[import-not-found,no-redef]

Figure = dict[str, Any]  # metric, unit, value and optional per_process / params


class NoFigureError(ValueError):
    pass


def nccl(text: str) -> Figure:
    """nccl-tests' table: the out-of-place busbw at the largest size, and its "Avg bus bandwidth" line."""
    rows = []
    for line in text.splitlines():
        cols = line.split()
        # size count type redop root time algbw busbw #wrong (out-of-place), then the in-place columns
        if len(cols) >= 9 and cols[0].isdigit() and cols[1].isdigit():
            rows.append((int(cols[0]), float(cols[6]), float(cols[7])))
    if not rows:
        raise NoFigureError("no nccl-tests result rows (size count type redop root time algbw busbw ...)")
    size, algbw, busbw = max(rows)
    avg = re.search(r"Avg bus bandwidth\s*:\s*([0-9.]+)", text)
    params = {"largest_bytes": size, "algbw_gb_s": algbw, "sizes": len(rows)}
    if avg:
        params["avg_busbw_gb_s"] = float(avg.group(1))
    return {"metric": "busbw", "unit": "GB/s", "value": busbw, "params": params}


def ib_write_bw(text: str) -> Figure:
    """perftest's summary row: #bytes #iterations BW peak BW average MsgRate (Gb/s with --report_gbits)."""
    gbits = "Gb/sec" in text
    for line in text.splitlines():
        cols = line.split()
        if len(cols) == 5 and cols[0].isdigit() and cols[1].isdigit():
            avg = float(cols[3])
            return {
                "metric": "bandwidth",
                "unit": "Gb/s" if gbits else "MB/s",
                "value": avg,
                "params": {"bytes": int(cols[0]), "iterations": int(cols[1]), "peak": float(cols[2])},
            }
    raise NoFigureError("no ib_write_bw summary row (#bytes #iterations BW peak BW average MsgRate)")


def fio(text: str) -> Figure:
    """fio --output-format=json: read + write bandwidth summed over jobs (MiB/s), and IOPS."""
    try:
        doc = json.loads(text[text.index("{") :])
    except ValueError as exc:
        raise NoFigureError(f"fio's output is not its JSON ({exc})") from None
    jobs = doc.get("jobs") or []
    if not jobs:
        raise NoFigureError("fio's JSON lists no jobs")
    per_job = [(j["read"]["bw"] + j["write"]["bw"]) / 1024 for j in jobs]
    iops = sum(j["read"]["iops"] + j["write"]["iops"] for j in jobs)
    errors = [j["jobname"] for j in jobs if j.get("error")]
    if errors:
        raise NoFigureError(f"fio jobs failed: {', '.join(errors)}")
    return {
        "metric": "bandwidth",
        "unit": "MiB/s",
        "value": sum(per_job),
        "per_process": per_job,
        "params": {"iops": round(iops, 1), "jobs": len(jobs), "fio": doc.get("fio version", "")},
    }


def iperf3(text: str) -> Figure:
    """iperf3 -J: received bits/s over all streams, and the sender's retransmits."""
    try:
        doc = json.loads(text[text.index("{") :])
    except ValueError as exc:
        raise NoFigureError(f"iperf3's output is not its JSON ({exc})") from None
    if "error" in doc:
        raise NoFigureError(f"iperf3: {doc['error']}")
    end = doc["end"]
    streams = end.get("streams") or []
    return {
        "metric": "bandwidth",
        "unit": "Gb/s",
        "value": end["sum_received"]["bits_per_second"] / 1e9,
        "per_process": [s["receiver"]["bits_per_second"] / 1e9 for s in streams if "receiver" in s] or None,
        "params": {"retransmits": end.get("sum_sent", {}).get("retransmits", 0), "streams": len(streams)},
    }


def tf_cnn(text: str) -> Figure:
    """tf_cnn_benchmarks: its closing "total images/sec: N" line."""
    found = re.findall(r"total images/sec:\s*([0-9.]+)", text)
    if not found:
        raise NoFigureError("no 'total images/sec:' line from tf_cnn_benchmarks")
    return {"metric": "images_per_second", "unit": "images/s", "value": float(found[-1])}


# What each tool's figure measures, unless --device-type says otherwise (the report never compares across types).
DEVICE_TYPES = {
    "nccl-allreduce": "cuda",
    "tf-cnn-benchmarks": "cuda",
    "ib-write-bw": "nic",
    "fio": "nfs",
    "iperf3": "nic",
}

PARSERS: dict[str, Callable[[str], Figure]] = {
    "nccl-allreduce": nccl,
    "ib-write-bw": ib_write_bw,
    "fio": fio,
    "iperf3": iperf3,
    "tf-cnn-benchmarks": tf_cnn,
}


def to_result(kind: str, workload: str, text: str, **extra: Any) -> dict[str, Any]:
    fig = PARSERS[kind](text)
    return result(
        workload=workload,
        kind=kind,
        metric=fig["metric"],
        unit=fig["unit"],
        value=fig["value"],
        per_process=fig.get("per_process"),
        params=fig.get("params", {}) | extra.pop("params", {}),
        **extra,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kind", choices=sorted(PARSERS))
    p.add_argument("--workload", required=True)
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--device", default="", help="what the figure measured (a NIC, a GPU model, an export)")
    p.add_argument("--device-type", choices=("cuda", "cpu", "nic", "nfs"), help="default: by kind")
    p.add_argument("--parse", metavar="FILE", help="parse this captured output instead of running a command")
    argv = sys.argv[1:] if argv is None else argv
    # Everything after the first `--` is the tool's command line, whatever options it holds.
    split = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:split])
    cmd = argv[split + 1 :]
    started, t0 = now(), time.perf_counter()
    if args.parse:
        with open(args.parse, encoding="utf-8") as fh:
            text = fh.read()
        tool = {"name": args.kind}
    else:
        if not cmd:
            p.error("give the command after --, or --parse FILE")
        run = subprocess.run(cmd, capture_output=True, text=True, check=False)
        sys.stderr.write(run.stdout + run.stderr)
        if run.returncode:
            sys.stderr.write(f"tools.py: {cmd[0]} exited with {run.returncode}\n")
            return run.returncode
        text, tool = run.stdout, {"name": os.path.basename(cmd[0])}
    try:
        doc = to_result(
            args.kind,
            args.workload,
            text,
            nodes=args.nodes,
            world_size=args.world_size,
            device={"type": args.device_type or DEVICE_TYPES[args.kind], "name": args.device or args.kind, "count": 0},
            started=started,
            seconds=time.perf_counter() - t0,
            tool=tool,
        )
    except (NoFigureError, KeyError) as exc:
        sys.stderr.write(f"tools.py: {args.kind}: {exc}\n")
        return 3
    emit(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
