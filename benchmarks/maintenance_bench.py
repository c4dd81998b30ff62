"""How long `aisite diff` takes to find a change's disruptions and plan its waves (aisite.maintenance.rollout), for
DGX H100 sites of 1,024, 4,096 and 32,768 GPUs (aisite.examples.scale_site, three tiers): a driver branch change of
every GPU node (every node a member: the canary, then waves as large as the default budget, 12.5 % of the GPUs),
with and without one_node_per_unit. Plans are built outside the timing; times are the best of REPEAT runs.

    .venv/bin/python benchmarks/maintenance_bench.py
"""

from __future__ import annotations

import copy
import time

REPEAT = 3
SIZES = (1024, 4096, 32768)  # GPUs; 8 per DGX H100


def main() -> None:
    from aisite.examples import scale_site
    from aisite.loader import parse_site
    from aisite.maintenance.rollout import rollout
    from aisite.plan import build_plan

    print(f"{'GPUs':>7} {'nodes':>6} {'per unit':>9} {'members':>8} {'waves':>6} {'seconds':>8}")
    for gpus in SIZES:
        data = scale_site(gpus, name=f"maint{gpus}")
        for per_unit in (False, True):
            data["maintenance"] = {"one_node_per_unit": per_unit}
            old_data = copy.deepcopy(data)
            old_data["gpu_nodes"][0]["driver_branch"] = 580
            old, new = build_plan(parse_site(old_data)), build_plan(parse_site(data))
            best = float("inf")
            for _ in range(REPEAT):
                t0 = time.perf_counter()
                r = rollout(old, new)
                best = min(best, time.perf_counter() - t0)
            print(
                f"{gpus:>7} {gpus // 8:>6} {per_unit!s:>9} {len(r.disruptions):>8} {len(r.waves):>6} {best:>8.3f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
