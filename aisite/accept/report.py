"""The acceptance report: every check with its measurement, threshold and verdict; the findings (what is bad:
a node, a rail of a node, or a path between two), each with the checks that show it; JSON and a heat map."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Verdict = Literal["pass", "degraded", "fail", "skipped"]
ORDER: dict[str, int] = {"skipped": 0, "pass": 1, "degraded": 2, "fail": 3}


@dataclass(slots=True)
class Check:
    stage: str  # node | link | pair | group | bisect
    subject: str  # what was measured: gpu01, gpu01:rail0, gpu01:rail0>gpu02:rail0, unit0/rail1[gpu01,gpu02]
    metric: str
    value: float | str | None
    expected: str  # the threshold, as text a person reads
    verdict: Verdict
    detail: str = ""
    node: str | None = None
    rail: int | None = None
    peer: str | None = None  # the other end (pairs)
    members: tuple[str, ...] = ()  # a group's nodes
    # The figure was impossible (not finite, negative, above the physical limit the plan knows): the node that
    # reported it is charged, and it is no reference for anyone else.
    invalid: bool = False


@dataclass(slots=True)
class Finding:
    """What acceptance names as bad: a node, one rail of it, or the path between two nodes on a rail."""

    node: str
    rail: int | None
    interface: str | None
    peer: str | None
    verdict: Verdict
    what: str
    evidence: list[str] = field(default_factory=list)  # the subjects of the checks that show it

    @property
    def key(self) -> tuple[str, int | None, str | None]:
        return (self.node, self.rail, self.peer)


@dataclass(slots=True)
class Report:
    site: str
    level: str
    lab: bool
    started: str
    seconds: float = 0.0
    checks: list[Check] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # stages or checks not run here, with why
    heatmap: str | None = None

    @property
    def verdict(self) -> Verdict:
        """The worst verdict of any check (skipped ones count as nothing)."""
        out: Verdict = "pass"
        for c in self.checks:
            if c.verdict != "skipped":
                out = _worst(out, c.verdict)
        return out

    def node_verdicts(self) -> dict[str, Verdict]:
        """Per node: the worst verdict of its checks that name it alone (node and link stages) or a finding."""
        out: dict[str, Verdict] = {}
        for c in self.checks:
            if c.node and c.stage in ("node", "link"):
                out[c.node] = _worst(out.get(c.node, "pass"), c.verdict)
        for f in self.findings:
            out[f.node] = _worst(out.get(f.node, "pass"), f.verdict)
        return out

    def doc(self) -> dict[str, Any]:
        return {
            "site": self.site,
            "level": self.level,
            "lab": self.lab,
            "started": self.started,
            "seconds": round(self.seconds, 1),
            "verdict": self.verdict,
            "nodes": self.node_verdicts(),
            "findings": [asdict(f) for f in self.findings],
            "checks": [asdict(c) for c in self.checks],
            "skipped": self.skipped,
            "heatmap": self.heatmap,
        }


def _worst(a: Verdict, b: Verdict) -> Verdict:
    return a if ORDER[a] >= ORDER[b] else b


def judge(value: float, floor: float | None, best: float, fail_fraction: float, degraded_fraction: float) -> Verdict:
    """A bandwidth against its absolute floor (a table's figure or the lab's) and against the reference of its
    kind (`best`: the median of the valid figures, which one node's lie cannot move): below the floor or
    fail_fraction x the reference fails, below degraded_fraction x it is degraded."""
    if math.isnan(value) or (floor is not None and value < floor) or value < fail_fraction * best:
        return "fail"
    return "degraded" if value < degraded_fraction * best else "pass"


def expected_text(floor: float | None, best: float, fail_fraction: float, unit: str) -> str:
    parts = [f">= {floor:g} {unit}"] if floor is not None else []
    parts.append(f">= {fail_fraction:.0%} of the median ({best:.3g} {unit})")
    return " and ".join(parts)


def heatmap(report: Report, nodes: list[str], rails: list[int], path: Path) -> Path | None:
    """Per rail, a matrix of pairwise bandwidth (row: sender, column: receiver; the diagonal: the node's own link
    to its leaf, the worse direction), failing cells outlined red, degraded orange. None when nothing pairwise
    was measured."""
    cells: dict[tuple[int, str, str], tuple[float, Verdict]] = {}
    for c in report.checks:
        if c.rail is None or not isinstance(c.value, float) or c.node is None:
            continue
        key = (c.rail, c.node, c.peer if c.stage == "pair" and c.peer else c.node)
        if c.stage not in ("pair", "link"):
            continue
        old = cells.get(key)
        if old is None or c.value < old[0] or math.isnan(c.value):
            cells[key] = (c.value, _worst(c.verdict, old[1]) if old else c.verdict)
    if not cells:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    side = 1.0 + 0.55 * len(nodes)
    fig, axes = plt.subplots(
        1, len(rails), figsize=(1.5 + (side + 0.6) * len(rails), side + 1.6), squeeze=False, constrained_layout=True
    )
    top = max((v for v, _ in cells.values() if not math.isnan(v)), default=1.0) or 1.0
    im = None
    for k, (ax, rail) in enumerate(zip(axes[0], rails, strict=True)):
        grid = [[cells.get((rail, a, b), (math.nan, "skipped"))[0] for b in nodes] for a in nodes]
        im = ax.imshow(grid, cmap="viridis", vmin=0, vmax=top)
        ax.set_title(f"rail {rail}")
        ax.set_xticks(range(len(nodes)), nodes, rotation=45, ha="right")
        ax.set_yticks(range(len(nodes)), nodes if k == 0 else [""] * len(nodes))
        ax.set_xlabel("receiver")
        if k == 0:
            ax.set_ylabel("sender")
        for i, a in enumerate(nodes):
            for j, b in enumerate(nodes):
                got = cells.get((rail, a, b))
                if got is None:
                    continue
                value, verdict = got
                colour = "white" if value < top / 2 else "black"
                ax.text(j, i, f"{value:.2g}", ha="center", va="center", color=colour, fontsize=8)
                if verdict in ("fail", "degraded"):
                    edge = "red" if verdict == "fail" else "orange"
                    ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor=edge, linewidth=3))
    if im is not None:
        fig.colorbar(im, ax=list(axes[0]), shrink=0.8, label="Gb/s")
    fig.suptitle(f"{report.site}: bandwidth per rail (diagonal: the node's link to its leaf; red: fail)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
