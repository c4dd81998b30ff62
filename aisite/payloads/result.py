"""The one result schema every payload prints: a single JSON line, `{"schema": "aisite.bench/v1", ...}`.

Standard library only: this file is mounted into the job containers (NGC images) beside the payloads.
Fields (README.md in this folder has the table): workload, kind, metric, unit, value (the total over all
processes), per_process, world_size, nodes, processes_per_node, device {type, name, count}, backend, params,
host, started (UTC, ISO 8601), seconds, tool {name, version}.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from datetime import UTC, datetime
from typing import Any

SCHEMA = "aisite.bench/v1"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def result(
    *,
    workload: str,
    kind: str,
    metric: str,
    unit: str,
    value: float,
    per_process: list[float] | None = None,
    world_size: int = 1,
    nodes: int = 1,
    device: dict[str, Any] | None = None,
    backend: str | None = None,
    params: dict[str, Any] | None = None,
    started: str | None = None,
    seconds: float = 0.0,
    tool: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "workload": workload,
        "kind": kind,
        "metric": metric,
        "unit": unit,
        "value": round(float(value), 3),
        "per_process": [round(float(v), 3) for v in (per_process or [value])],
        "world_size": world_size,
        "nodes": nodes,
        "processes_per_node": max(1, world_size // max(1, nodes)),
        "device": device or {"type": "cpu", "name": "cpu", "count": 0},
        "backend": backend,
        "params": params or {},
        "host": socket.gethostname(),
        "started": started or now(),
        "seconds": round(seconds, 3),
        "tool": tool or {},
    }


def emit(doc: dict[str, Any]) -> None:
    """Print the result as one line (the collector looks for lines that parse and carry the schema)."""
    sys.stdout.write(json.dumps(doc, sort_keys=True) + "\n")
    sys.stdout.flush()


class Timer:
    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start
