"""What a reconciler keeps under .aisite/reconcile/<stack>/: its lock, its status file, its metrics and its
work clone of the site repository."""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

from aisite.deploy import write_json
from aisite.paths import reconcile_dir

HISTORY = 50  # passes kept in the status file


class BusyError(RuntimeError):
    """Another reconcile of the same stack holds the lock."""


@dataclass
class PassRecord:
    commit: str
    started: float
    mode: str  # changed | full | check
    outcome: str = "running"  # applied | unchanged | drift | refused | failed | interrupted
    subject: str = ""
    signer: str | None = None
    # The applied commit this pass moved the site back from, when an operator allowed it (--allow-rewind).
    rewound_from: str | None = None
    notes: list[str] = field(default_factory=list)
    layers: dict[str, list[str]] = field(default_factory=dict)  # layer -> hosts it ran on
    changed: dict[str, int] = field(default_factory=dict)  # host -> changed tasks
    changed_tasks: dict[str, list[str]] = field(default_factory=dict)  # host -> the tasks that changed
    drifted: dict[str, list[str]] = field(default_factory=dict)  # host -> tasks that would change
    errors: list[str] = field(default_factory=list)
    # The automatic promotions run after the pass applied: per served model, its candidate, state and commits.
    promotions: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Status:
    stack: str
    repo: str = ""
    branch: str = ""
    applied_commit: str | None = None  # the last commit a pass converged the site to
    last_success: float | None = None
    failures_total: int = 0
    # Passes refused because their commit does not descend from the applied one (a rewound or replaced branch).
    not_descendant_total: int = 0
    # Set when a corrupted status file was moved aside: the next pass is a full one.
    full_pass_due: bool = False
    corrupt_total: int = 0
    # Automatic promotions by how they ended (promoted, refused, rolled-back, failed).
    promotions_total: dict[str, int] = field(default_factory=dict)
    passes: list[PassRecord] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def workdir(stack: str) -> Path:
    return reconcile_dir(stack)


def _parse_status(stack: str, doc: Any) -> Status:
    if not isinstance(doc, dict):
        raise ValueError(f"a {type(doc).__name__}, not an object")
    known = {f.name for f in fields(Status)} - {"passes"}
    record_keys = {f.name for f in fields(PassRecord)}
    raw_passes = doc.get("passes", [])
    if not isinstance(raw_passes, list) or not all(isinstance(p, dict) for p in raw_passes):
        raise ValueError("passes is not a list of objects")
    passes = [PassRecord(**{k: v for k, v in p.items() if k in record_keys}) for p in raw_passes]
    status = Status(**{k: v for k, v in doc.items() if k in known}, passes=passes)
    if status.stack != stack:
        raise ValueError(f"it is the status of stack {status.stack!r}")
    return status


def load_status(stack: str, note: Callable[[str], None] | None = None) -> Status:
    """The stack's status. A status file that cannot be read (truncated, empty, not an object) is moved aside for
    inspection, reported through `note`, counted, and replaced by a fresh status whose next pass is a full one."""
    path = workdir(stack) / "status.json"
    if not path.is_file():
        return Status(stack)
    try:
        return _parse_status(stack, json.loads(path.read_text()))
    except (ValueError, TypeError) as exc:
        aside = path.with_name(f"status.json.corrupt-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        path.replace(aside)
        status = Status(stack, full_pass_due=True, corrupt_total=1)
        save_status(status)
        write_metrics(status)
        if note:
            note(f"the status file was unreadable ({exc}); moved aside to {aside}; the next pass is a full one")
        return status


def mark_interrupted(status: Status) -> None:
    """Passes recorded as running when the lock is free again ended without a record: their reconcile died."""
    for rec in status.passes:
        if rec.outcome == "running":
            rec.outcome = "interrupted"
            rec.errors.append("the reconcile running this pass stopped before recording its end (killed?)")
            status.failures_total += 1


def save_status(status: Status) -> Path:
    """Whole or not at all (a reader never sees half a file); the last HISTORY passes."""
    status.passes = status.passes[-HISTORY:]
    return write_json(workdir(status.stack) / "status.json", status.to_dict())


def write_metrics(status: Status, path: Path | None = None) -> Path:
    """The status as Prometheus metrics in the node exporter's textfile collector format."""
    path = path or workdir(status.stack) / "aisite_reconcile.prom"
    reg = CollectorRegistry()
    labels = ["stack"]
    last = status.passes[-1] if status.passes else None

    def gauge(name: str, doc: str, value: float, extra: dict[str, str] | None = None) -> None:
        g = Gauge(name, doc, [*labels, *(extra or {})], registry=reg)
        g.labels(status.stack, *(extra or {}).values()).set(value)

    gauge(
        "aisite_reconcile_last_success_timestamp_seconds",
        "End of the last pass that converged.",
        status.last_success or 0,
    )
    gauge("aisite_reconcile_failures_total", "Passes that failed or were refused.", status.failures_total)
    gauge(
        "aisite_reconcile_not_descendant_total",
        "Passes refused because their commit does not descend from the applied one.",
        status.not_descendant_total,
    )
    gauge(
        "aisite_reconcile_status_corrupt_total", "Status files found unreadable and moved aside.", status.corrupt_total
    )
    if status.promotions_total:
        g = Gauge(
            "aisite_reconcile_promotions_total",
            "Automatic promotions of served models, by how they ended.",
            [*labels, "state"],
            registry=reg,
        )
        for state, count in sorted(status.promotions_total.items()):
            g.labels(status.stack, state).set(count)
    if status.full_pass_due and not last:
        gauge("aisite_reconcile_last_pass_ok", "1 when the last pass succeeded.", 0)
    if last:
        gauge("aisite_reconcile_last_duration_seconds", "Duration of the last pass.", last.seconds)
        gauge("aisite_reconcile_last_changed_tasks", "Tasks the last pass changed.", sum(last.changed.values()))
        gauge("aisite_reconcile_drifted_hosts", "Hosts the last check found drifted.", len(last.drifted))
        gauge(
            "aisite_reconcile_last_pass_ok", "1 when the last pass succeeded.", last.outcome in ("applied", "unchanged")
        )
    if status.applied_commit:
        gauge("aisite_reconcile_applied_info", "The commit applied.", 1, {"commit": status.applied_commit})
    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(path), reg)
    return path


def _holder_gone(text: str) -> int | None:
    """The PID a lock file names, when no such process runs any more."""
    m = re.match(r"pid (\d+)", text)
    if not m:
        return None
    pid = int(m.group(1))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return pid
    except PermissionError:
        return None
    return None


@contextmanager
def lock(stack: str, wait: bool, note: Callable[[str], None] | None = None) -> Iterator[int]:
    """One reconcile of a stack at a time. The lock is the kernel's (flock), so a killed reconcile leaves none
    behind; the file says who holds it. Yields the descriptor, which a child may inherit to keep it held."""
    path = workdir(stack) / "lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = path.read_text().strip() or "unknown"
            gone = _holder_gone(holder)
            if gone is not None:
                holder += f"; pid {gone} is gone, a deploy it started still holds the lock"
            raise BusyError(f"another reconcile of stack {stack!r} is running ({holder})") from None
        previous = path.read_text().strip()
        gone = _holder_gone(previous)
        if gone is not None and note:
            note(f"taking over the lock of stack {stack!r} from pid {gone}, which is no longer running")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n".encode(), 0)
        yield fd
    finally:
        os.close(fd)
