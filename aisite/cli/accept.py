"""`aisite accept`: staged acceptance of a site built from its plan, with a verdict per node and link."""

from __future__ import annotations

import json
import shutil
import sys
from typing import Annotated, Literal

import typer
import yaml
from rich.markup import escape
from rich.table import Table

from aisite.accept.lab import LabRunner
from aisite.accept.report import Report, heatmap
from aisite.accept.site import AnsibleCluster, SiteRunner, first_pass
from aisite.accept.stages import Acceptance, Options, Runner
from aisite.cli.common import EXIT_FAILED, JsonOpt, StackArg, err, load_plan, out
from aisite.lab.podman import LabError
from aisite.paths import accept_dir, kubeconfig_path

COLOUR = {"pass": "green", "degraded": "yellow", "fail": "red", "skipped": "dim"}


def accept_command(
    stack: StackArg,
    level: Annotated[
        str, typer.Option(help="quick: DCGM level 1, short runs; full: DCGM level 3, longer runs.")
    ] = "quick",
    seconds: Annotated[int | None, typer.Option(min=1, max=600, help="Seconds per iperf3 direction.")] = None,
    as_json_: JsonOpt = False,
) -> None:
    """Accept a site: per node, per rail link and pair, per group (all_reduce), then bisect what fails; a report
    (.aisite/SITE/accept/report.json) and a heat map of pairwise bandwidth. On a lab for real; on a site as jobs
    through its cluster (none here: the first pass's jobs are written for review). Exit 1 when anything fails."""
    plan = load_plan(stack, as_json_)
    if level not in ("quick", "full"):
        print(f"error: --level: {level!r} is not one of quick, full", file=sys.stderr)
        raise typer.Exit(2)
    lvl: Literal["quick", "full"] = "quick" if level == "quick" else "full"
    opts = Options(
        level=lvl,
        seconds=seconds or (2 if lvl == "quick" else 10),
        mbytes=32.0 if lvl == "quick" else 128.0,
        iterations=5 if lvl == "quick" else 20,
    )
    lab = plan.connection == "lab"
    runner: Runner
    if lab:
        runner = LabRunner(plan, opts)
    else:
        assert plan.acceptance is not None
        if not kubeconfig_path(plan.site).is_file():
            jobs = accept_dir(plan.site) / "jobs"
            shutil.rmtree(jobs, ignore_errors=True)
            jobs.mkdir(parents=True)
            objects = first_pass(plan, opts)
            for i, o in enumerate(objects):
                (jobs / f"{i:03d}-{o['kind'].lower()}-{o['metadata']['name']}.yaml").write_text(yaml.safe_dump(o))
            print(
                f"error: accept: no Kubernetes API server for {plan.site} (no kubeconfig at "
                f"{kubeconfig_path(plan.site)}): nothing was submitted; the first pass's {len(objects)} objects are "
                f"in {jobs} for review",
                file=sys.stderr,
            )
            raise typer.Exit(EXIT_FAILED)
        runner = SiteRunner(plan, opts, AnsibleCluster(plan, plan.acceptance.namespace))
    with err.status(f"accept {plan.site}") as status:

        def say(message: str) -> None:
            status.update(message)
            if not as_json_:
                err.print(message, highlight=False)

        try:
            report = Acceptance(plan, opts, runner, say).run()
        except LabError as exc:
            print(f"error: accept: {exc}", file=sys.stderr)
            raise typer.Exit(EXIT_FAILED) from None
    folder = accept_dir(plan.site)
    folder.mkdir(parents=True, exist_ok=True)
    nodes = [n.name for n in plan.by_role("gpu") if n.rails]
    rails = sorted({r.index for n in plan.by_role("gpu") for r in n.rails})
    png = heatmap(report, nodes, rails, folder / "heatmap.png")
    report.heatmap = str(png) if png else None
    (folder / "report.json").write_text(json.dumps(report.doc(), indent=2) + "\n")
    failed = report.verdict == "fail"
    if as_json_:
        print(json.dumps(report.doc() | {"file": str(folder / "report.json")}, indent=2))
        raise typer.Exit(EXIT_FAILED if failed else 0)
    _print(report)
    out.print(f"report: {folder / 'report.json'}" + (f"\nheat map: {png}" if png else ""))
    raise typer.Exit(EXIT_FAILED if failed else 0)


def _print(report: Report) -> None:
    t = Table(title=f"{report.site}: acceptance ({report.level}, {report.seconds:.0f} s)")
    for col in ("stage", "subject", "metric", "value", "expected", "verdict"):
        t.add_column(col)
    for c in report.checks:
        if c.verdict == "skipped":
            continue
        value = f"{c.value:.3g}" if isinstance(c.value, float) else str(c.value)
        # Every cell a node's word may reach is escaped: a check a node names `[/x]` is shown, not parsed as markup.
        t.add_row(
            escape(c.stage),
            escape(c.subject),
            escape(c.metric),
            escape(value),
            escape(c.expected),
            f"[{COLOUR[c.verdict]}]{c.verdict}[/]",
        )
    out.print(t)
    skipped = [c for c in report.checks if c.verdict == "skipped"]
    if skipped:
        why: dict[str, list[str]] = {}
        for c in skipped:
            why.setdefault(f"{c.metric}: {c.detail}", []).append(c.subject)
        out.print("skipped (not on this hardware):")
        for what, subjects in why.items():
            out.print(escape(f"  {what} [{', '.join(dict.fromkeys(subjects))}]"), highlight=False)
    for s in report.skipped:
        out.print(escape(f"skipped: {s}"), highlight=False)
    nodes = report.node_verdicts()
    out.print("nodes: " + ", ".join(f"{n} [{COLOUR[v]}]{v}[/]" for n, v in sorted(nodes.items())))
    if not report.findings:
        out.print("[green]findings: none[/]")
        return
    f_table = Table(title="findings")
    for col in ("node", "rail", "peer", "verdict", "what", "evidence"):
        f_table.add_column(col)
    for f in report.findings:
        f_table.add_row(
            escape(f.node),
            escape(f.interface or ("-" if f.rail is None else str(f.rail))),
            escape(f.peer or "-"),
            f"[{COLOUR[f.verdict]}]{f.verdict}[/]",
            escape(f.what),
            escape(", ".join(f.evidence)),
        )
    out.print(f_table)
