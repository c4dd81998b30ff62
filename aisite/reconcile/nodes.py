"""The convergence of the nodes that apply their own layers (gitops.pull_layers): what each node's last pass
recorded (its state.json, read by playbooks/pull-status.yml), judged against the commit the site is at."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

from aisite.foreign import ForeignJSONError, clean, number, record

# A node's pass outcomes (role pull's aisite-pull).
_OUTCOMES = ("applied", "refused", "failed")


@dataclass(frozen=True, slots=True)
class NodeConvergence:
    node: str
    # converged (its last pass applied the site's commit) | behind (applied an older one) | failing (its last pass
    # was refused or failed) | never (no pass recorded) | unreachable
    state: str
    applied_commit: str
    last_outcome: str
    last_pass_age_seconds: float | None
    # How long since a pass last applied a commit (None: never).
    since_success_seconds: float | None
    message: str


def _number(value: Any) -> float | None:
    # A time a node recorded (seconds since the epoch): finite, after 1970 and before 5138.
    return number(value, 1e-9, 1e11)


def _text(value: Any, limit: int = 400) -> str:
    # A node's record is its own word: kept to a short printable string whatever it holds.
    return clean(value, limit) if isinstance(value, str) else ""


def _commit(value: Any) -> str | None:
    """A commit the node says it applied: a full hash, else None (not believed, whatever it holds)."""
    return value if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{40}", value) else None


def convergence(
    nodes: Iterable[str], records: Mapping[str, Any], tip: str | None, now: float, unreachable: Iterable[str] = ()
) -> list[NodeConvergence]:
    """Each node's standing. `records`: node -> its state.json as read (None or absent where there was none);
    `tip`: the commit the site is at (None: not known, so an applied pass counts as converged)."""
    down = set(unreachable)
    out = []
    for node in nodes:
        rec = records.get(node)
        if node in down:
            out.append(NodeConvergence(node, "unreachable", "", "", None, None, "the node did not answer"))
            continue
        try:
            rec = record(rec, "state.json")
        except ForeignJSONError as exc:
            out.append(NodeConvergence(node, "failing", "", "unknown", None, None, f"its record is unreadable: {exc}"))
            continue
        if not isinstance(rec, Mapping):
            out.append(NodeConvergence(node, "never", "", "", None, None, "no pass recorded on the node"))
            continue
        outcome = rec.get("status") if rec.get("status") in _OUTCOMES else "unknown"
        commit = _commit(rec.get("applied_commit"))
        applied = commit or ""
        ended, success = _number(rec.get("ended")), _number(rec.get("last_success"))
        message = _text(rec.get("message"))
        if outcome == "applied" and commit is None:
            outcome, message = "unknown", "its record names no commit it applied (not a full hash)"
        if outcome != "applied":
            state = "failing"
        elif tip is not None and applied != tip:
            state = "behind"
        else:
            state = "converged"
        out.append(
            NodeConvergence(
                node,
                state,
                applied,
                str(outcome),
                round(now - ended, 1) if ended else None,
                round(now - success, 1) if success else None,
                message,
            )
        )
    return out


STATES = ("converged", "behind", "failing", "never", "unreachable")


def write_metrics(stack: str, rows: Iterable[NodeConvergence], now: float, path: Path) -> Path:
    """The nodes' standing for node exporter's textfile collector, next to the reconciler's own metrics: a count
    per state, and for each node that is not converged its state and the seconds since its last success (each
    node's own aisite_pull_* metrics say the rest)."""
    rows = list(rows)
    reg = CollectorRegistry()
    count = Gauge(
        "aisite_reconcile_nodes", "Pulling nodes per state at the last check.", ["stack", "state"], registry=reg
    )
    for state in STATES:
        count.labels(stack, state).set(sum(1 for r in rows if r.state == state))
    off = Gauge(
        "aisite_reconcile_node_not_converged",
        "A pulling node not converged, by state.",
        ["stack", "node", "state"],
        registry=reg,
    )
    since = Gauge(
        "aisite_reconcile_node_since_success_seconds",
        "Seconds since a node not converged last applied a commit (absent: never).",
        ["stack", "node"],
        registry=reg,
    )
    for r in rows:
        if r.state != "converged":
            off.labels(stack, r.node, r.state).set(1)
            if r.since_success_seconds is not None:
                since.labels(stack, r.node).set(r.since_success_seconds)
    checked = Gauge(
        "aisite_reconcile_nodes_checked_timestamp_seconds", "When the nodes were last read.", ["stack"], registry=reg
    )
    checked.labels(stack).set(now)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(path), reg)
    return path
