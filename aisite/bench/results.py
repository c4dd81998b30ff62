"""The payloads' result lines, read back: validated against the schema, stored per site, loaded for the report."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aisite import foreign
from aisite.paths import results_dir
from aisite.payloads.result import SCHEMA

# A payload's result is what a node printed: every field as narrow as its use (the workload names a file).
_WORD = r"^[A-Za-z0-9][A-Za-z0-9_./:+-]{0,127}$"
MAX_LINE = 1 << 20  # a result line is a few hundred bytes; one over this is not read


class Device(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    type: Literal["cuda", "cpu", "nic", "nfs"]
    name: str = Field(max_length=256)
    count: int = Field(ge=0, le=1_000_000)


class Result(BaseModel):
    """One payload run (aisite/payloads/result.py writes it; README there has the fields)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    schema_: Literal["aisite.bench/v1"] = Field(alias="schema")
    # A workload's name, or a measurement's (acceptance names its groups `unit0/rail1`): `save` makes it one file
    # name, never a path.
    workload: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")
    kind: str = Field(pattern=_WORD)
    metric: str = Field(pattern=_WORD)
    unit: str = Field(pattern=r"^[A-Za-z0-9/%._-]{1,32}$")
    value: float = Field(ge=0, le=1e12)
    per_process: list[Annotated[float, Field(ge=0, le=1e12)]] = Field(max_length=100_000)
    world_size: int = Field(ge=1, le=1_000_000)
    nodes: int = Field(ge=1, le=100_000)
    processes_per_node: int = Field(ge=1, le=1024)
    device: Device
    backend: str | None = Field(max_length=64)
    params: dict[str, Any]
    host: str = Field(max_length=253)
    started: str = Field(pattern=r"^[0-9T:.+Z-]{1,40}$")
    seconds: float = Field(ge=0, le=1e9)
    tool: dict[str, Annotated[str, Field(max_length=256)]]

    def doc(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)


class CollectError(ValueError):
    """Output that should hold a result and does not, or holds one that breaks the schema."""


def collect(text: str, what: str = "output") -> list[Result]:
    """Every result line in a payload's output (other lines are the tool's own log). A line that claims the schema
    but does not satisfy it is an error, not skipped: a broken payload must not pass unnoticed."""
    found: list[Result] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not (line.startswith("{") and SCHEMA in line):
            continue
        try:
            found.append(Result.model_validate(foreign.loads(line, MAX_LINE)))
        except (ValueError, ValidationError) as exc:  # ForeignJSONError is a ValueError
            raise CollectError(f"{what}:{n}: not a valid {SCHEMA} result: {exc}") from None
    return found


def save(site: str, result: Result) -> Path:
    """One file per run: <workload>-<processes>p-<start time>.json (a later run of the same size supersedes it)."""
    d = results_dir(site)
    d.mkdir(parents=True, exist_ok=True)
    stamp = re.sub(r"[^0-9T]", "", result.started)[:15]
    name = re.sub(r"[^A-Za-z0-9_-]", "_", result.workload)  # one file name: no separator, no dot-dot
    path = d / f"{name}-{result.world_size}p-{stamp}.json"
    path.write_text(json.dumps(result.doc(), indent=2, sort_keys=True) + "\n")
    return path


def load(site: str) -> tuple[list[Result], list[str]]:
    """All stored results of a site, and the files that could not be read (named, with why)."""
    results, problems = [], []
    for path in sorted(results_dir(site).glob("*.json")):
        try:
            results.append(Result.model_validate_json(path.read_text()))
        except (OSError, ValidationError) as exc:
            problems.append(f"{path}: {str(exc).splitlines()[0]}")
    return results, problems


def latest(results: list[Result]) -> list[Result]:
    """The newest result per (workload, processes, device type): reruns replace, they do not average."""
    best: dict[tuple[str, int, str], Result] = {}
    for r in sorted(results, key=lambda r: r.started):
        best[(r.workload, r.world_size, r.device.type)] = r
    return sorted(best.values(), key=lambda r: (r.workload, r.world_size))
