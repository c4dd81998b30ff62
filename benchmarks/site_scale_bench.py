"""Whole-process time and peak memory of `aisite validate`, `plan --json` and `render` on generated DGX H100 sites
of 1,024 to 32,768 GPUs (`make bench-sites`), and the growth between sizes.

Each command runs as a user runs it (`python -m aisite ...` on a stack file), in a fresh process: its time includes
Python's start and the imports; its memory is the process's peak resident set (getrusage of the child). The sites
are aisite.examples.scale_site's, three-tier by default (`--tiers 2` for the two-tier shape).
`--profile N` runs the three steps of the N-GPU site under cProfile in this process and prints where the time went.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import itertools
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from plan_bench import print_table  # noqa: E402  (this directory: the benchmarks' shared table)

SIZES = (1024, 4096, 16384, 32768)
GOAL_GPUS = 32768
GOAL_SECONDS = 10.0
GOAL_MB = 1024.0


def write_stack(gpus: int, tiers: int, directory: Path) -> Path:
    from aisite.examples import scale_site

    path = directory / f"Pulumi.scale{gpus}.yaml"
    path.write_text(yaml.safe_dump({"config": {"aisite:site": scale_site(gpus, tiers)}}, sort_keys=False))
    return path


def run(args: list[str]) -> tuple[float, float]:
    """Wall seconds and peak resident MB of one aisite command in its own process."""
    env = dict(os.environ, AISITE_BENCH_BMC="unused")
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "aisite", *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"aisite {' '.join(args)} failed:\n{stderr}")
    return seconds, usage.ru_maxrss / 1024


def measure(gpus: int, tiers: int, directory: Path) -> dict[str, Any]:
    stack = write_stack(gpus, tiers, directory)
    out_dir = directory / f"out{gpus}"
    row: dict[str, Any] = {"gpus": gpus}
    for step, args in (
        ("validate", ["validate", str(stack)]),
        ("plan", ["plan", str(stack), "--json"]),
        ("render", ["render", str(stack), "--out", str(out_dir)]),
    ):
        seconds, mb = run(args)
        row[f"{step}_s"] = round(seconds, 2)
        row[f"{step}_mb"] = round(mb)
    row["total_s"] = round(row["validate_s"] + row["plan_s"] + row["render_s"], 2)
    row["peak_mb"] = max(row["validate_mb"], row["plan_mb"], row["render_mb"])
    row["render_out_mb"] = round(sum(f.stat().st_size for f in out_dir.rglob("*") if f.is_file()) / 1e6, 1)
    return row


def profile(gpus: int, tiers: int, top: int) -> None:
    from aisite.examples import scale_site
    from aisite.loader import parse_site
    from aisite.plan import build_plan
    from aisite.render.bundle import bundle

    data = scale_site(gpus, tiers)
    prof = cProfile.Profile()
    prof.enable()
    plan = build_plan(parse_site(data))
    plan.to_json()  # what `aisite plan --json` prints
    bundle(plan)
    prof.disable()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text).strip_dirs().sort_stats("cumulative")
    stats.print_stats(top)
    print(text.getvalue())
    text = io.StringIO()
    pstats.Stats(prof, stream=text).strip_dirs().sort_stats("tottime").print_stats(top)
    print(text.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiers", type=int, choices=(2, 3), default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--profile", type=int, metavar="GPUS", help="profile one size in-process instead")
    parser.add_argument("--top", type=int, default=25)
    a = parser.parse_args()
    if a.profile:
        profile(a.profile, a.tiers, a.top)
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="aisite-bench-") as tmp:
        for gpus in a.sizes:
            if not a.json:
                print(f"... {gpus} GPUs", file=sys.stderr, flush=True)
            rows.append(measure(gpus, a.tiers, Path(tmp)))
    for prev, row in itertools.pairwise(rows):
        size = row["gpus"] / prev["gpus"]
        time_x, mem_x = row["total_s"] / prev["total_s"], row["peak_mb"] / prev["peak_mb"]
        row["growth"] = f"x{size:g} GPUs: x{time_x:.2f} time, x{mem_x:.2f} memory"
    if a.json:
        print(json.dumps({"tiers": a.tiers, "rows": rows}, indent=2))
        return
    cols = [
        "gpus",
        "validate_s",
        "plan_s",
        "render_s",
        "total_s",
        "validate_mb",
        "plan_mb",
        "render_mb",
        "render_out_mb",
    ]
    print_table(
        f"aisite on generated DGX H100 sites, {a.tiers} tiers (whole processes: wall seconds, peak resident MB)",
        cols,
        rows,
    )
    for row in rows[1:]:
        print(f"{row['gpus']:>6} GPUs: {row['growth']}")
    goal = next((row for row in rows if row["gpus"] == GOAL_GPUS), None)
    if goal:
        verdict = "met" if goal["total_s"] < GOAL_SECONDS and goal["peak_mb"] < GOAL_MB else "NOT met"
        print(
            f"goal (validate + plan + render under {GOAL_SECONDS:g} s and {GOAL_MB:g} MB) at {GOAL_GPUS} GPUs: "
            f"{verdict} ({goal['total_s']} s, {goal['peak_mb']} MB)"
        )


if __name__ == "__main__":
    main()
