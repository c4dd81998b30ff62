"""`aisite health`'s pass on the controller: the nodes' last checks (read by playbooks/health-status.yml) into
the quarantine's decision, recorded (state.json, actions.jsonl), exported (metrics) and written as the Node
objects playbooks/health-apply.yml applies (taint and cordon, drain; or release)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from aisite.health.judge import NodeHealth, Problem
from aisite.health.quarantine import Action, NodeRecord, cap, decide, metrics, node_object
from aisite.plan import Plan


@dataclass(slots=True)
class HealthPass:
    results: dict[str, NodeHealth]
    missing: list[str]  # nodes with no check to read (unreachable, or no status yet)
    state: dict[str, NodeRecord]
    actions: list[Action]
    limit: int
    files: dict[str, str] = field(default_factory=dict)  # what was written: state, actions, metrics, objects


def from_status(doc: dict[str, Any]) -> NodeHealth:
    """A node's status.json (aisite/health/node.py) as its verdict; what does not parse is itself a problem."""
    try:
        problems = [Problem(str(p["check"]), str(p["subject"]), str(p["message"])) for p in doc["problems"]]
        return NodeHealth(str(doc["node"]), problems, list(doc.get("checked", [])), list(doc.get("skipped", [])))
    except (KeyError, TypeError):
        return NodeHealth(str(doc.get("node", "?")), [Problem("status", "status.json", "unreadable")])


def load_state(path: Path) -> dict[str, NodeRecord]:
    if not path.is_file():
        return {}
    return {k: NodeRecord(**v) for k, v in json.loads(path.read_text()).items()}


def run_pass(plan: Plan, records: dict[str, Any], folder: Path, now: datetime | None = None) -> HealthPass:
    assert plan.health is not None
    at = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    nodes = [n.name for n in plan.nodes]
    results = {n: from_status(records[n]) for n in nodes if isinstance(records.get(n), dict)}
    missing = [n for n in nodes if n not in results]
    h = plan.health
    limit = cap(len(nodes), h.max_quarantined_fraction, h.max_quarantined)
    state, actions = decide(load_state(folder / "state.json"), results, limit, h.recover_after, at)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "state.json").write_text(json.dumps({k: asdict(v) for k, v in sorted(state.items())}, indent=2) + "\n")
    with (folder / "actions.jsonl").open("a") as fh:
        for a in actions:
            fh.write(json.dumps(asdict(a), sort_keys=True) + "\n")
    (folder / "aisite_health_quarantine.prom").write_text(metrics(state, actions, limit))
    objects = folder / "nodes"
    objects.mkdir(exist_ok=True)
    for a in actions:
        if a.kind in ("quarantine", "release"):
            (objects / f"{a.node}.yaml").write_text(yaml.safe_dump(node_object(a.node, state.get(a.node))))
    files = {
        "state": str(folder / "state.json"),
        "actions": str(folder / "actions.jsonl"),
        "metrics": str(folder / "aisite_health_quarantine.prom"),
        "objects": str(objects),
    }
    return HealthPass(results, missing, state, actions, limit, files)
