"""Benchmarks: `bench run` (a workload on the lab, for real) and `bench report` (judged figures and a plot)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from aisite.bench import lab as benchlab
from aisite.bench.report import as_json, judge, plot
from aisite.bench.results import load, save
from aisite.cli.common import EXIT_FAILED, EXIT_INVALID, JsonOpt, StackArg, err, load_plan, out
from aisite.lab.podman import LabError
from aisite.paths import results_dir

bench_app = typer.Typer(no_args_is_help=True, help="Benchmark workloads: run them on the lab, judge the results.")


@bench_app.command("run")
def bench_run(  # noqa: PLR0917 - Typer passes every option positionally
    stack: StackArg,
    workload: Annotated[str, typer.Argument(help="A workload's name under site.workloads.")],
    steps: Annotated[int, typer.Option(min=1, help="Timed steps per process (ResNet).")] = 3,
    image_size: Annotated[
        int, typer.Option(min=32, help="Image side in pixels (ResNet; with --data, the samples').")
    ] = 64,
    seconds: Annotated[int, typer.Option(min=1, help="Seconds per iperf3 run.")] = 3,
    data: Annotated[
        str | None,
        typer.Option(
            help="A data-set directory under the GPU nodes' Ceph mounts (files of resnet.py's sample format) that "
            "the ResNet payload reads each step, instead of synthetic data."
        ),
    ] = None,
    as_json_: JsonOpt = False,
) -> None:
    """Run a workload on the site's lab (no Kubernetes there) and store its results under .aisite/SITE/results/."""
    plan = load_plan(stack, as_json_)
    if data is not None and (problem := benchlab.data_problem(plan, data)):
        print(f"--data: {problem}", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    opts = benchlab.Options(steps=steps, image_size=image_size, seconds=seconds, data=data)
    with err.status(f"bench {workload} on {plan.site}") as status:

        def say(message: str) -> None:
            status.update(message)
            err.print(message)

        try:
            results = benchlab.run_workload(plan, workload, opts, say)
        except (benchlab.BenchError, LabError) as exc:
            print(f"error: bench: {exc}", file=sys.stderr)
            raise typer.Exit(EXIT_FAILED) from None
    paths = [save(plan.site, r) for r in results]
    if as_json_:
        print(json.dumps([r.doc() | {"file": str(p)} for r, p in zip(results, paths, strict=True)], indent=2))
        return
    t = Table(title=f"{plan.site}: {workload}")
    for col in ("processes", "nodes", "device", "value", "per process", "switches' bytes", "file"):
        t.add_column(col)
    for r, p in zip(results, paths, strict=True):
        moved = r.params.get("fabric_tx_bytes", {})
        t.add_row(
            str(r.world_size),
            str(r.nodes),
            f"{r.device.type} {r.device.name}",
            f"{r.value:.4g} {r.unit}",
            ", ".join(f"{v:.4g}" for v in r.per_process),
            ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in moved.items()),
            str(p.relative_to(p.parents[3])),
        )
    out.print(t)


@bench_app.command("report")
def bench_report(
    stack: StackArg,
    as_json_: JsonOpt = False,
    plot_path: Annotated[
        Path | None, typer.Option("--plot", help="Where the PNG goes (default: .aisite/SITE/results/report.png).")
    ] = None,
) -> None:
    """Per workload: measured figure, reference for its GPU, ratio, scaling efficiency, pass/fail; and a plot."""
    plan = load_plan(stack, as_json_)
    results, problems = load(plan.site)
    for p in problems:
        print(f"warning: skipped {p}", file=sys.stderr)
    if not results:
        print(
            f"error: no results under {results_dir(plan.site)}: run `aisite bench run {stack} WORKLOAD` "
            "(the lab) or collect the jobs' result lines first",
            file=sys.stderr,
        )
        raise typer.Exit(EXIT_FAILED)
    rows = judge(plan, results)
    png = plot(rows, plot_path or results_dir(plan.site) / "report.png", plan.site)
    failed = any(r.verdict == "fail" for r in rows)
    if as_json_:
        print(json.dumps({"site": plan.site, "rows": as_json(rows), "plot": str(png) if png else None}, indent=2))
        raise typer.Exit(EXIT_FAILED if failed else 0)
    t = Table(title=f"{plan.site}: benchmark report")
    for col in ("workload", "procs", "device", "measured", "reference", "ratio", "scaling", "verdict"):
        t.add_column(col)
    for r in rows:
        colour = {"pass": "green", "fail": "red"}.get(r.verdict, "yellow")
        t.add_row(
            r.workload,
            str(r.processes),
            r.device,
            f"{r.value:.4g} {r.unit}",
            f"{r.reference:.4g}" if r.reference is not None else r.reference_source,
            f"{r.ratio:.1%}" if r.ratio is not None else "-",
            f"{r.scaling_efficiency:.1%}" if r.scaling_efficiency is not None else "-",
            f"[{colour}]{r.verdict}[/]: " + "; ".join(r.reasons),
        )
    out.print(t)
    if png:
        out.print(f"plot: {png}")
    raise typer.Exit(EXIT_FAILED if failed else 0)
