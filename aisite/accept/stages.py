"""Acceptance's stages, the same on a lab and a site: node state, rail links, rail pairs, all_reduce groups, the
bisection of a failing group and the attribution of failures to a node, rail or path. A runner measures (the lab's
nsenter and iperf3, a site's jobs); this module decides what to measure and what it means."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from itertools import permutations
from typing import Protocol

from aisite.accept.bisect import isolate
from aisite.accept.report import Check, Finding, Report, expected_text, judge
from aisite.foreign import clean, number
from aisite.plan import Node, Plan, Rail

Say = Callable[[str], None]
FULL_MATRIX = 8  # nodes up to which every ordered pair is measured on every rail
# Groups whose all_reduce runs over NVLink rather than the rails: one node's GPUs, a rack's trays (NVL72).
NVLINK_SCOPES = ("node", "rack")


class MeasureError(Exception):
    """A measurement that gave no figure; the check fails with this message."""


@dataclass(frozen=True, slots=True)
class Options:
    level: str = "quick"
    seconds: int = 2  # per bandwidth direction
    mbytes: float = 32.0  # all_reduce tensor: large enough that a step is tens of ms, not noise
    iterations: int = 5
    timeout: float = 180.0
    # A measurement that fails is taken again this many times and its best kept: a slow cable stays slow, a moment
    # of contention on the measuring hosts does not condemn one.
    retries: int = 2


class Runner(Protocol):
    """What measures. `links`: whether a node's rail can be measured against its leaf (the lab's leaves are
    hosts; a site's switches are not endpoints)."""

    lab: bool
    links: bool
    unit: str  # of the link and pair figures

    def node(self, n: Node) -> list[Check]: ...

    def link(self, n: Node, r: Rail, reverse: bool) -> float: ...

    def pair(self, a: Node, ra: Rail, b: Node, rb: Rail) -> float: ...

    def allreduce(self, name: str, ranks: Sequence[tuple[Node, Rail]], scope: str) -> float: ...

    def bandwidth_floor(self, stage: str, n: Node) -> float | None: ...

    def busbw_floor(self, scope: str, ranks: Sequence[tuple[Node, Rail]]) -> float | None: ...


def bandwidth_ceiling(n: Node, rail: int | None) -> float | None:
    """The most a rail can carry (Gb/s): its NIC's line rate as the plan has it (None: not known)."""
    speed = next((r.speed_gbps for r in n.rails if r.index == rail), 0) if rail is not None else 0
    return float(speed) if speed > 0 else None


def busbw_ceiling(scope: str, ranks: Sequence[tuple[Node, Rail]]) -> float | None:
    """The most an all_reduce's bus bandwidth can be (GB/s): over rails, the slowest rank's rail line rate; within
    a node or a rack's NVLink domain, None (NVLink bandwidth is not in the catalog), so only finiteness holds it."""
    if scope in NVLINK_SCOPES or not ranks:
        return None
    speeds = [r.speed_gbps for _, r in ranks]
    return min(speeds) / 8 if min(speeds) > 0 else None


def checked_figure(c: Check, value: float, ceiling: float | None, unit: str) -> float:
    """A runner's figure, or NaN with the check failed and marked invalid where it cannot be true: a node that
    reports infinity or more than its link can carry has lied or broken, and is charged for it."""
    figure = number(value, 0.0, ceiling * 1.05 if ceiling is not None else 1e7)  # 5 %: counters' rounding
    if figure is None and not (isinstance(value, float) and math.isnan(value)):
        limit = f"above the line rate {ceiling:g} {unit}" if ceiling is not None else "not a finite figure"
        c.invalid, c.detail = True, f"impossible figure {clean(value, 40)}: {limit}"
        return float("nan")
    return value if figure is not None else float("nan")


def reference(values: Sequence[float]) -> float:
    """What a figure is compared with: the median of its kind's valid figures (0 without any)."""
    return statistics.median(values) if values else 0.0


class Acceptance:
    def __init__(self, plan: Plan, opts: Options, runner: Runner, say: Say) -> None:
        self.plan, self.opts, self.runner, self.say = plan, opts, runner, say
        assert plan.acceptance is not None
        self.a = plan.acceptance
        self.nodes = [n for n in plan.by_role("gpu") if n.rails]
        self.report = Report(plan.site, opts.level, runner.lab, datetime.now(UTC).isoformat(timespec="seconds"))
        self.member_ok: dict[tuple[str, int], bool] = {}  # a node's rail by its own links (or its pairs)
        # A bisected group's subject -> (the members isolated, the halves that fail only together).
        self.isolated: dict[str, tuple[list[str], list[tuple[tuple[str, ...], tuple[str, ...]]]]] = {}

    def run(self) -> Report:
        t0 = time.monotonic()
        for n in self.plan.by_role("gpu"):
            if not n.rails:
                self.report.skipped.append(f"{n.name}: no rails (nics: 0): only its node checks apply")
        if not self.nodes:
            self.report.skipped.append("no GPU node has rails: nothing to measure on the fabric")
        for n in self.nodes:
            self.say(f"node: {n.name}")
            self.report.checks.extend(self.runner.node(n))
        if self.runner.links:
            self.bandwidth_stage("link", self._links())
        else:
            self.report.skipped.append("link: a site's switches are not endpoints; each rail is judged by its pairs")
        self.bandwidth_stage("pair", self._pairs())
        self.group_stage()
        self.attribute()
        self.report.seconds = time.monotonic() - t0
        return self.report

    def of_members(self, members: Sequence[str], unavailable: Collection[str] = ()) -> Report:
        """A quick acceptance of nodes given back by a rollout: their node checks and, on every rail, a pair each
        way with a node in service (of their unit where there is one; never one `unavailable`, held out of
        service, whose fault would be charged to the member), judged as the whole site's are. Nothing else is
        measured; a member without rails has its node checks only."""
        t0 = time.monotonic()
        chosen = [n for n in self.nodes if n.name in members]
        peers = [n for n in self.nodes if n.name not in members and n.name not in unavailable]
        for n in self.plan.by_role("gpu"):
            if n.name in members and not n.rails:
                self.report.skipped.append(f"{n.name}: no rails (nics: 0): no pair to measure")
        for n in chosen:
            self.say(f"node: {n.name}")
            self.report.checks.extend(self.runner.node(n))
        plan: list[tuple[Node, Node, int]] = []
        for n in chosen:
            peer = next((x for x in peers if x.scalable_unit == n.scalable_unit), peers[0] if peers else None)
            if peer is None:
                self.report.skipped.append(f"{n.name}: no node with rails in service to pair with")
                continue
            for r in range(min(len(n.rails), len(peer.rails))):
                plan += [(n, peer, r), (peer, n, r)]
        self.bandwidth_stage("pair", self._pairs(plan))
        self.attribute()
        self.report.seconds = time.monotonic() - t0
        return self.report

    def _links(self) -> list[tuple[Check, Callable[[], float]]]:
        out: list[tuple[Check, Callable[[], float]]] = []
        for n in self.nodes:
            for r in n.rails:
                for reverse in (False, True):
                    direction = "rx" if reverse else "tx"
                    c = Check(
                        "link",
                        f"{n.name}:{r.interface}{'<' if reverse else '>'}{r.leaf}",
                        f"bandwidth-{direction}",
                        None,
                        "",
                        "pass",
                        node=n.name,
                        rail=r.index,
                        peer=r.leaf if reverse else None,
                    )
                    out.append((c, partial(self.runner.link, n, r, reverse)))
        return out

    def pair_plan(self) -> list[tuple[Node, Node, int]]:
        """(sender, receiver, rail) of the pair stage: every ordered pair up to FULL_MATRIX nodes; beyond, a ring
        per unit and one across the units' first nodes, both ways (each node's rail meets two peers that way,
        enough to tell the node from the path, in 4n measurements instead of n^2)."""
        rails = min((len(n.rails) for n in self.nodes), default=0)
        if len(self.nodes) <= FULL_MATRIX:
            return [(a, b, r) for r in range(rails) for a, b in permutations(self.nodes, 2)]
        units: dict[int, list[Node]] = {}
        for n in self.nodes:
            units.setdefault(n.scalable_unit or 0, []).append(n)
        rings = [m for m in units.values() if len(m) > 1] + [[m[0] for m in units.values()]]
        out: list[tuple[Node, Node, int]] = []
        for r in range(rails):
            for ring in rings:
                if len(ring) < 2:
                    continue
                for i, a in enumerate(ring):
                    b = ring[(i + 1) % len(ring)]
                    out += [(a, b, r), (b, a, r)] if len(ring) > 2 else [(a, b, r)]
        seen: set[tuple[str, str, int]] = set()
        unique = []
        for a, b, r in out:
            if (a.name, b.name, r) not in seen:
                seen.add((a.name, b.name, r))
                unique.append((a, b, r))
        return unique

    def _pairs(self, plan: list[tuple[Node, Node, int]] | None = None) -> list[tuple[Check, Callable[[], float]]]:
        out: list[tuple[Check, Callable[[], float]]] = []
        for a, b, r in self.pair_plan() if plan is None else plan:
            ra, rb = a.rails[r], b.rails[r]
            scope = "unit" if a.scalable_unit == b.scalable_unit else "across units"
            c = Check(
                "pair",
                f"{a.name}:{ra.interface}>{b.name}:{rb.interface}",
                "bandwidth",
                None,
                "",
                "pass",
                scope,
                node=a.name,
                rail=r,
                peer=b.name,
            )
            out.append((c, partial(self.runner.pair, a, ra, b, rb)))
        return out

    def bandwidth_stage(self, stage: str, runs: list[tuple[Check, Callable[[], float]]]) -> None:
        for i, (c, measure) in enumerate(runs):
            self.say(f"{stage} {i + 1}/{len(runs)}: {c.subject}")
            try:
                c.value = self._figure(c, measure())
            except MeasureError as exc:
                c.value, c.verdict, c.detail = float("nan"), "fail", clean(str(exc)[-300:], 300)
        self._judge_bandwidth(stage, runs)
        tries: dict[int, list[float]] = {}
        for attempt in range(self.opts.retries):
            again = [(c, m) for c, m in runs if c.verdict == "fail"]
            if not again:
                break
            for c, measure in again:
                self.say(f"{stage} again ({attempt + 2}/{self.opts.retries + 1}): {c.subject}")
                seen = tries.setdefault(id(c), [c.value] if isinstance(c.value, float) else [])
                try:
                    value = self._figure(c, measure())
                except MeasureError:
                    value = float("nan")
                seen.append(value)
                c.value, detail = _best_of(seen)
                c.detail = c.detail if c.invalid else detail
            self._judge_bandwidth(stage, runs)
        self.report.checks.extend(c for c, _ in runs)
        # A node's rail stands for itself by its links where they are measured, else by any of its pairs passing.
        for c, _ in runs:
            if c.rail is None or c.node is None:
                continue
            ends = [c.node] + ([c.peer] if stage == "pair" and c.peer else [])
            for end in ends:
                key = (end, c.rail)
                if stage == "link":
                    self.member_ok[key] = self.member_ok.get(key, True) and c.verdict != "fail"
                elif not self.runner.links:
                    self.member_ok[key] = self.member_ok.get(key, False) or c.verdict != "fail"

    def _figure(self, c: Check, value: float) -> float:
        node = next(n for n in self.nodes if n.name == c.node)
        return checked_figure(c, value, bandwidth_ceiling(node, c.rail), "Gb/s")

    def _judge_bandwidth(self, stage: str, runs: list[tuple[Check, Callable[[], float]]]) -> None:
        kinds: dict[str, list[Check]] = {}
        for c, _ in runs:
            kinds.setdefault(c.metric, []).append(c)
        for checks in kinds.values():
            values = [c.value for c in checks if isinstance(c.value, float) and not math.isnan(c.value)]
            best = reference(values)
            for c in checks:
                assert isinstance(c.value, float) and c.node is not None
                node = next(n for n in self.nodes if n.name == c.node)
                floor = self.runner.bandwidth_floor(stage, node)
                c.verdict = judge(c.value, floor, best, self.a.fail_fraction, self.a.degraded_fraction)
                c.verdict = "fail" if c.invalid else c.verdict
                c.expected = expected_text(floor, best, self.a.fail_fraction, self.runner.unit)

    # ----------------------------------------------------------------------------------------------- groups
    def groups(self) -> list[tuple[str, str, list[tuple[Node, Rail]]]]:
        """(scope, name, ranks) of every all_reduce group: each node (on a lab a rank per rail, on a site its
        GPUs over NVLink), each rack of trays (NVL72: every GPU of the rack over its NVLink domain), each unit per
        rail, all units per rail."""
        groups: list[tuple[str, str, list[tuple[Node, Rail]]]] = []
        for n in self.nodes:
            if len(n.rails) > 1 or not self.runner.lab:
                groups.append(("node", n.name, [(n, r) for r in n.rails]))
        racks: dict[str, list[Node]] = {}
        for n in self.nodes:
            if n.rack:
                racks.setdefault(n.rack, []).append(n)
        for rack, trays in racks.items():
            if len(trays) > 1:
                groups.append(("rack", f"rack-{rack}", [(t, t.rails[0]) for t in trays]))
        units: dict[int, list[Node]] = {}
        for n in self.nodes:
            units.setdefault(n.scalable_unit or 0, []).append(n)
        rails = min((len(n.rails) for n in self.nodes), default=0)
        for su, members in units.items():
            if len(members) < 2:
                self._skip(f"unit {su}: one node with rails: no group within the unit")
                continue
            for r in range(rails):
                groups.append(("unit", f"unit{su}/rail{r}", [(m, m.rails[r]) for m in members]))
        if len(units) > 1:
            for r in range(rails):
                groups.append(("across", f"units/rail{r}", [(m, m.rails[r]) for m in self.nodes]))
        elif self.nodes:
            self._skip("across units: the site has one unit with rail nodes")
        return groups

    def _skip(self, why: str) -> None:
        if why not in self.report.skipped:
            self.report.skipped.append(why)

    def group_stage(self) -> None:
        groups = self.groups()
        checks = []
        for i, (scope, name, ranks) in enumerate(groups):
            self.say(f"group {i + 1}/{len(groups)}: all_reduce {name} ({len(ranks)} ranks)")
            c = Check(
                "group",
                f"{name}[{','.join(sorted({n.name for n, _ in ranks}))}]",
                f"allreduce-{scope}-busbw",
                None,
                "",
                "pass",
                members=tuple(n.name for n, _ in ranks),
                rail=ranks[0][1].index if scope not in NVLINK_SCOPES else None,
                node=ranks[0][0].name if scope == "node" else None,
            )
            c.value = self._allreduce(name, ranks, scope, c)
            checks.append((c, scope, ranks))
        kinds: dict[str, list[float]] = {}
        for c, scope, _ in checks:
            if isinstance(c.value, float) and not math.isnan(c.value):
                kinds.setdefault(scope, []).append(c.value)
        best = {scope: reference(values) for scope, values in kinds.items()}
        for c, scope, ranks in checks:
            assert isinstance(c.value, float)
            floor = self.runner.busbw_floor(scope, ranks)
            c.verdict = judge(c.value, floor, best.get(scope, 0.0), self.a.fail_fraction, self.a.degraded_fraction)
            seen = [c.value]
            for attempt in range(self.opts.retries if c.verdict == "fail" else 0):
                self.say(f"group again ({attempt + 2}/{self.opts.retries + 1}): {c.subject}")
                seen.append(self._allreduce(c.subject.split("[")[0], ranks, scope, c))
                c.value, detail = _best_of(seen)
                c.detail = c.detail if c.invalid else detail
                c.verdict = judge(c.value, floor, best.get(scope, 0.0), self.a.fail_fraction, self.a.degraded_fraction)
                if c.verdict != "fail" and not c.invalid:
                    break
            c.verdict = "fail" if c.invalid else c.verdict
            c.expected = expected_text(floor, best.get(scope, 0.0), self.a.fail_fraction, "GB/s")
            self.report.checks.append(c)
            if c.verdict == "fail" and scope != "node":
                self._bisect(c, ranks, best.get(scope, 0.0), floor)

    def _allreduce(self, name: str, ranks: Sequence[tuple[Node, Rail]], scope: str, c: Check) -> float:
        try:
            return checked_figure(c, self.runner.allreduce(name, ranks, scope), busbw_ceiling(scope, ranks), "GB/s")
        except MeasureError as exc:
            c.detail = clean(str(exc)[-300:], 300)
            return float("nan")

    def _bisect(self, failed: Check, ranks: Sequence[tuple[Node, Rail]], best: float, floor: float | None) -> None:
        rail = ranks[0][1].index

        def test(sub: Sequence[tuple[Node, Rail]]) -> bool:
            if len(sub) == 1:  # one node stands for itself: its own link checks on this rail
                return self.member_ok.get((sub[0][0].name, rail), False)
            name = f"{failed.subject.split('[')[0]}/bisect"
            c = Check(
                "bisect",
                f"{name}[{','.join(n.name for n, _ in sub)}]",
                failed.metric,
                None,
                "",
                "pass",
                f"bisecting {failed.subject}",
                rail=rail,
                members=tuple(n.name for n, _ in sub),
            )
            self.say(f"bisect: {c.subject}")
            c.value = self._allreduce(name, sub, failed.metric.split("-")[1], c)
            c.verdict = judge(c.value, floor, best, self.a.fail_fraction, self.a.degraded_fraction)
            c.expected = expected_text(floor, best, self.a.fail_fraction, "GB/s")
            self.report.checks.append(c)
            return c.verdict != "fail"

        found = isolate(list(ranks), test)
        failed.detail = (failed.detail + "; " if failed.detail else "") + (
            f"bisection ({found.tests} tests): "
            + ", ".join(f"{n.name}:{r.interface}" for n, r in found.members)
            + "".join(f"; between {[n.name for n, _ in a]} and {[n.name for n, _ in b]}" for a, b in found.between)
        )
        self.isolated[failed.subject] = (
            [n.name for n, _ in found.members],
            [(tuple(n.name for n, _ in a), tuple(n.name for n, _ in b)) for a, b in found.between],
        )

    # ------------------------------------------------------------------------------------------ attribution
    def attribute(self) -> None:
        """Findings from failed and degraded checks, most specific first: a node's own state, then its links;
        a pair or group those explain adds to their evidence. What nothing explains is named as a path (a pair,
        or halves that fail only together) or as the members bisection isolated."""
        found: dict[tuple[str, int | None, str | None], Finding] = {}
        iface = {(n.name, r.index): r.interface for n in self.nodes for r in n.rails}

        def add(node: str, rail: int | None, peer: str | None, c: Check, what: str) -> None:
            f = found.get((node, rail, peer))
            if f is None:
                interface = iface.get((node, rail)) if rail is not None else None
                found[(node, rail, peer)] = Finding(node, rail, interface, peer, c.verdict, what, [c.subject])
            elif c.subject not in f.evidence:
                f.evidence.append(c.subject)

        def explained(node: str, rail: int | None, c: Check) -> bool:
            keys = [k for k in found if k[0] == node and k[2] is None and (rail is None or k[1] in (rail, None))]
            for k in keys:
                if c.subject not in found[k].evidence:
                    found[k].evidence.append(c.subject)
            return bool(keys)

        # Degraded checks stay in the report (and the node's verdict) but name nothing: a share of the best is
        # noisy on small groups, and a finding must stand.
        bad = [c for c in self.report.checks if c.verdict == "fail"]
        # An impossible figure is the reporting node's own fault, before anything it might be taken to explain.
        for c in bad:
            if c.invalid:
                add(c.node or c.members[0], c.rail, None, c, f"{c.subject} {c.metric}: {c.detail}")
        bad = [c for c in bad if not c.invalid]
        for c in bad:
            if c.stage == "node" and c.node:
                detail = f" ({c.detail})" if c.detail else ""
                add(c.node, c.rail, None, c, f"{c.metric}: {c.value}, expected {c.expected}{detail}")
        for c in bad:
            if c.stage == "link" and c.node and not explained(c.node, c.rail, c):
                add(c.node, c.rail, None, c, f"{c.subject} {c.metric}: {_fmt(c.value)} Gb/s, expected {c.expected}")
        # Without links (a site), a rail whose every pair fails, with two peers or more that pass elsewhere, is
        # the node's own: named once, not as a path per peer.
        pairs = [c for c in bad if c.stage == "pair" and c.node and c.peer and c.rail is not None]
        peers: dict[tuple[str, int], set[str]] = {}
        for c in pairs:
            assert c.node and c.peer and c.rail is not None
            peers.setdefault((c.node, c.rail), set()).add(c.peer)
            peers.setdefault((c.peer, c.rail), set()).add(c.node)
        for (node, rail), others in sorted(peers.items()):
            lone = not self.member_ok.get((node, rail), False)
            if lone and len(others) >= 2 and all(self.member_ok.get((o, rail), False) for o in others):
                first = next(c for c in pairs if node in (c.node, c.peer) and c.rail == rail)
                add(
                    node,
                    rail,
                    None,
                    first,
                    f"every pair on rail {rail} fails ({len(others)} peers, which pass elsewhere)",
                )
        for c in pairs:
            assert c.node and c.peer
            if not (explained(c.node, c.rail, c) | explained(c.peer, c.rail, c)):
                add(c.node, c.rail, c.peer, c, f"path {c.subject}: {_fmt(c.value)} Gb/s, expected {c.expected}")
        for c in bad:
            if c.stage != "group":
                continue
            members, between = self.isolated.get(c.subject, ([], []))
            if not members and not between:  # within a node, or degraded (only failures are bisected)
                if not any([explained(m, c.rail, c) for m in c.members]):
                    add(
                        ",".join(dict.fromkeys(c.members)),
                        c.rail,
                        None,
                        c,
                        f"{c.subject} {c.metric}: {_fmt(c.value)} GB/s, expected {c.expected}",
                    )
                continue
            for m in members:
                if not explained(m, c.rail, c):
                    add(m, c.rail, None, c, f"{c.metric}: bisection of {c.subject} isolated it")
            for left, right in between:
                add(
                    left[0],
                    c.rail,
                    right[0],
                    c,
                    f"{c.metric}: {list(left)} and {list(right)} pass apart, fail together",
                )
        self.report.findings = sorted(
            found.values(), key=lambda f: (f.node, -1 if f.rail is None else f.rail, f.peer or "")
        )


def _fmt(value: float | str | None) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _best_of(runs: list[float]) -> tuple[float, str]:
    """The best of a measurement's runs (a run that gave no figure is NaN) and the detail that lists them."""
    good = [v for v in runs if not math.isnan(v)]
    return (max(good) if good else float("nan")), f"best of {len(runs)} runs: " + ", ".join(_fmt(v) for v in runs)
