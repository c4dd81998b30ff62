"""Plan and render time and peak memory for DGX H100 sites of 64, 512 and 4,096 GPUs (`make bench`); states: the
per-host layer states (aisite.changes) that deploy --changed, diff and reconcile compare.

Each size runs in a fresh process so peak RSS belongs to that size alone; times are the best of REPEAT runs.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
import tracemalloc
from typing import Any

REPEAT = 5
SIZES = (64, 512, 4096)  # GPUs; 8 per DGX H100


def measure(gpus: int) -> dict[str, float]:
    from aisite.changes import layer_states, site_layer_inputs
    from aisite.cli.common import LAYERS
    from aisite.examples import dgx_h100_site
    from aisite.loader import parse_site
    from aisite.plan import build_plan
    from aisite.render.bundle import bundle

    data = dgx_h100_site(gpus // 8, name=f"bench{gpus}")
    best = {"validate": float("inf"), "plan": float("inf"), "render": float("inf"), "states": float("inf")}
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        site = parse_site(data)
        t1 = time.perf_counter()
        plan = build_plan(site)
        t2 = time.perf_counter()
        files = bundle(plan)
        t3 = time.perf_counter()
        inputs = site_layer_inputs(plan)
        t4 = time.perf_counter()
        layer_states(LAYERS, *inputs)  # what deploy --changed, diff and reconcile compare
        t5 = time.perf_counter()
        for key, value in (("validate", t1 - t0), ("plan", t2 - t1), ("render", t3 - t2), ("states", t5 - t4)):
            best[key] = min(best[key], value)
    tracemalloc.start()
    bundle(build_plan(parse_site(data)))
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "gpus": gpus,
        "nodes": len(plan.nodes),
        "switches": len(plan.switches),
        "cables": len(plan.cables),
        "validate_ms": round(best["validate"] * 1000, 1),
        "plan_ms": round(best["plan"] * 1000, 1),
        "render_ms": round(best["render"] * 1000, 1),
        "render_mb": round(sum(len(v) for v in files.values()) / 1e6, 2),
        "states_ms": round(best["states"] * 1000, 1),
        "traced_peak_mb": round(traced_peak / 1e6, 1),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(measure(int(sys.argv[2]))))
        return
    as_json = "--json" in sys.argv
    rows = []
    for gpus in SIZES:
        out = subprocess.run([sys.executable, __file__, "--one", str(gpus)], capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout))
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    cols = [
        "gpus",
        "nodes",
        "switches",
        "cables",
        "validate_ms",
        "plan_ms",
        "render_ms",
        "render_mb",
        "states_ms",
        "traced_peak_mb",
        "max_rss_mb",
    ]
    title = f"aisite plan benchmark (DGX H100 sites, best of {REPEAT}; render = inventory + plan.json + manifests)"
    print_table(title, cols, rows)


def print_table(title: str, cols: list[str], rows: list[dict[str, Any]], width: int = 14) -> None:
    """A benchmark's rows as right-aligned columns under a title (the benchmarks' common form)."""
    print(title)
    print("  ".join(f"{c:>{width}}" for c in cols))
    for row in rows:
        print("  ".join(f"{row[c]:>{width}}" for c in cols))


if __name__ == "__main__":
    main()
