"""What a reconciler keeps under .aisite/reconcile/<stack>/: its lock, its status file, its metrics and its
work clone of the site repository."""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

from aisite.deploy import write_json
from aisite.loader import ROOT

STATE = ROOT / ".aisite"
HISTORY = 50  # passes kept in the status file


class BusyError(RuntimeError):
    """Another reconcile of the same stack holds the lock."""


@dataclass
class PassRecord:
    commit: str
    started: float
    mode: str  # changed | full | check
    outcome: str = "running"  # applied | unchanged | drift | refused | failed
    subject: str = ""
    signer: str | None = None
    layers: dict[str, list[str]] = field(default_factory=dict)  # layer -> hosts it ran on
    changed: dict[str, int] = field(default_factory=dict)  # host -> changed tasks
    drifted: dict[str, list[str]] = field(default_factory=dict)  # host -> tasks that would change
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Status:
    stack: str
    repo: str = ""
    branch: str = ""
    applied_commit: str | None = None  # the last commit a pass converged the site to
    last_success: float | None = None
    failures_total: int = 0
    passes: list[PassRecord] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def workdir(stack: str) -> Path:
    return STATE / "reconcile" / stack.replace("/", "_")


def load_status(stack: str) -> Status:
    path = workdir(stack) / "status.json"
    if not path.is_file():
        return Status(stack)
    doc = json.loads(path.read_text())
    passes = [PassRecord(**p) for p in doc.pop("passes", [])]
    return Status(**doc, passes=passes)


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


@contextmanager
def lock(stack: str, wait: bool) -> Iterator[int]:
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
            raise BusyError(f"another reconcile of stack {stack!r} is running ({holder})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n".encode(), 0)
        yield fd
    finally:
        os.close(fd)
