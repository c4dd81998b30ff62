"""The judged report: per workload the measured figure, its reference, ratio, scaling efficiency and pass/fail
against the site's thresholds; and a plot of throughput against GPU (or process) count with the ideal line."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aisite.bench.reference import CONTEXT, reference_for
from aisite.bench.results import Result, latest
from aisite.plan import Plan, WorkloadPlan


@dataclass(frozen=True, slots=True)
class Row:
    workload: str
    kind: str
    processes: int
    nodes: int
    device: str  # what ran it: "cuda H100 ...", "cpu (lab)"
    metric: str
    unit: str
    value: float
    reference: float | None
    reference_source: str
    ratio: float | None
    scaling_efficiency: float | None
    verdict: str  # pass | fail | not judged
    reasons: tuple[str, ...] = field(default=())


def judge(plan: Plan, results: list[Result]) -> list[Row]:
    by_name = {w.name: w for w in plan.workloads}
    current = latest(results)
    base = {(r.workload, r.device.type): r for r in sorted(current, key=lambda r: -r.world_size)}  # smallest wins
    rows = []
    for r in current:
        w = by_name.get(r.workload)
        single = base.get((r.workload, r.device.type))
        eff = None
        if single is not None and single.world_size < r.world_size and single.value > 0:
            eff = r.value / (single.value * r.world_size / single.world_size)
        ref, source = None, ""
        if r.device.type == "cuda":
            gpu = w.gpu_type if w else None
            found = reference_for(r.kind, gpu or "")
            if found:
                ref, source = found.per_unit * r.world_size, found.source
            else:
                source = CONTEXT.get(gpu or "", f"no published {r.kind} figure for {gpu or 'this GPU'}")
        elif r.device.type == "cpu":
            source = "CPU run (the lab): not compared with a GPU reference"
        else:
            source = f"no reference for {r.kind} on {r.device.name}"
        ratio = r.value / ref if ref else None
        verdict, reasons = _verdict(w, r, ratio, eff)
        rows.append(
            Row(
                r.workload,
                r.kind,
                r.world_size,
                r.nodes,
                (r.device.type if r.device.name == r.device.type else f"{r.device.type} {r.device.name}")
                + (" (lab)" if r.params.get("lab") else ""),
                r.metric,
                r.unit,
                r.value,
                ref,
                source,
                ratio,
                eff,
                verdict,
                tuple(reasons),
            )
        )
    return rows


def _verdict(w: WorkloadPlan | None, r: Result, ratio: float | None, eff: float | None) -> tuple[str, list[str]]:
    t = w.thresholds if w else None
    if t is None or not any(
        v is not None for v in (t.min_value, t.min_fraction_of_reference, t.min_scaling_efficiency)
    ):
        return "not judged", ["the site sets no thresholds for this workload"]
    fails, judged = [], []
    if t.min_value is not None:
        judged.append("value")
        if r.value < t.min_value:
            fails.append(f"{r.value:.4g} {r.unit} < min_value {t.min_value:g}")
    if t.min_fraction_of_reference is not None and ratio is not None:
        judged.append("reference")
        if ratio < t.min_fraction_of_reference:
            fails.append(f"{ratio:.1%} of the reference < {t.min_fraction_of_reference:.0%}")
    if t.min_scaling_efficiency is not None and eff is not None:
        judged.append("scaling")
        if eff < t.min_scaling_efficiency:
            fails.append(f"scaling efficiency {eff:.1%} < {t.min_scaling_efficiency:.0%}")
    if fails:
        return "fail", fails
    if not judged:
        return "not judged", ["no threshold applies to this run (no reference, or a single-process run)"]
    return "pass", [f"checked: {', '.join(judged)}"]


def as_json(rows: list[Row]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]


def plot(rows: list[Row], path: Path, site: str) -> Path | None:
    """Throughput against GPU/process count per throughput workload, with the ideal linear line from the
    smallest run; None when no workload has a throughput figure."""
    series: dict[str, list[Row]] = {}
    for r in rows:
        if r.metric == "images_per_second":
            series.setdefault(r.workload, []).append(r)
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")  # no display on a controller or in CI
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for name, pts in sorted(series.items()):
        pts.sort(key=lambda r: r.processes)
        xs, ys = [p.processes for p in pts], [p.value for p in pts]
        label = f"{name} ({pts[0].device})"
        (line,) = ax.plot(xs, ys, marker="o", label=label)
        ideal = [ys[0] / xs[0] * x for x in xs]
        ax.plot(xs, ideal, linestyle="--", color=line.get_color(), alpha=0.6, label=f"{name}: linear from {xs[0]}")
        for x, y in zip(xs, ys, strict=True):
            ax.annotate(f"{y:.0f}", (x, y), textcoords="offset points", xytext=(4, -12), fontsize=8)
    lab = any("(lab)" in r.device or r.device.startswith("cpu") for rs in series.values() for r in rs)
    ax.set_xlabel("processes (CPU, the lab)" if lab else "GPUs")
    ax.set_ylabel("images/s (all processes)")
    ax.set_title(f"{site}: throughput against scale" + (" (CPU lab run, not GPU figures)" if lab else ""))
    ax.set_xticks(sorted({r.processes for rs in series.values() for r in rs}))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
