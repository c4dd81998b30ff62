"""`aisite health`'s pass on the controller: the nodes' last checks (read by playbooks/health-status.yml) into
the quarantine's decision, recorded (state.json, actions.jsonl), exported (metrics) and written as the Node
objects playbooks/health-apply.yml applies (taint and cordon, drain; or release)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aisite import foreign
from aisite.errors import RecordError
from aisite.foreign import clean
from aisite.health.judge import CHECKS, NodeHealth, Problem
from aisite.health.quarantine import Action, NodeRecord, cap, decide, metrics, node_object
from aisite.members import store
from aisite.members.budget import site_budget
from aisite.plan import Plan


@dataclass(slots=True)
class HealthPass:
    results: dict[str, NodeHealth]
    missing: list[str]  # nodes with no check to read (unreachable, or no status yet)
    state: dict[str, NodeRecord]
    actions: list[Action]
    limit: int
    files: dict[str, str] = field(default_factory=dict)  # what was written: state, actions, metrics, objects
    # What health-apply.yml is to apply: this pass's quarantines and releases, and earlier ones not yet seen
    # applied on the cluster ({node, kind, reason, at}).
    to_apply: list[dict[str, str]] = field(default_factory=list)


class _Problem(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    check: str = Field(pattern=r"^[a-z][a-z0-9-]{0,31}$")
    subject: str = Field(max_length=256)
    message: str = Field(max_length=1024)


class _Status(BaseModel):
    """status.json as node.py writes it; a node's word, so strict: what does not fit is not read at all."""

    model_config = ConfigDict(extra="ignore", strict=True)
    node: str = Field(max_length=253)
    problems: list[_Problem] = Field(max_length=1000)
    checked: list[str] = Field(default=[], max_length=64)
    skipped: list[str] = Field(default=[], max_length=64)
    clique: str = Field(default="", pattern=r"^([0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\.[0-9]{1,10})?$")


def unreadable(node: str, why: str) -> NodeHealth:
    return NodeHealth(node, [Problem("status", "status.json", f"unreadable: {clean(why, 160)}")])


def from_status(node: str, doc: Any) -> NodeHealth:
    """The node's status.json (aisite/health/node.py) as its verdict. What does not parse, names another node or
    reports a check this version does not know is the node's `status` problem, never a traceback; its text is
    kept printable and bounded (it reaches terminals, records and the taint)."""
    try:
        st = _Status.model_validate(foreign.record(doc, "status.json"))
    except foreign.ForeignJSONError as exc:
        return unreadable(node, str(exc))
    except ValidationError as exc:
        first = exc.errors()[0]
        return unreadable(node, f"{'.'.join(map(str, first['loc']))}: {first['msg']}")
    if st.node != node:
        return unreadable(node, f"it names another node ({st.node!r})")
    unknown = sorted({p.check for p in st.problems} - CHECKS.keys())
    if unknown:
        return unreadable(node, f"unknown check {unknown[0]!r}")
    problems = [Problem(p.check, clean(p.subject, 120), clean(p.message, 300)) for p in st.problems]
    checked, skipped = [clean(c, 120) for c in st.checked], [clean(c, 300) for c in st.skipped]
    return NodeHealth(node, problems, checked, skipped, st.clique)


def rack_domains(plan: Plan, results: dict[str, NodeHealth]) -> dict[str, tuple[list[str], str]]:
    """Each rack's NVLink domain, judged from its trays' checks. The rack's fabric is at fault only on a majority
    of its planned trays' word: more than half of them report a fabric problem of their own, or more than half of
    them split evenly between two cliques. Every tray of the rack then carries the rack's problem, and the rack is
    returned (name -> its trays, why) to be decided whole. A minority (two lying trays of 18) never speaks for the
    rack: each tray's fabric problem stays its own. Otherwise a tray whose clique is not the one most of its rack
    reports is in another NVLink partition (its GPUs cannot reach the rack's), a problem of its own."""
    faults: dict[str, tuple[list[str], str]] = {}
    for rack in plan.racks:
        majority = len(rack.trays) // 2 + 1
        own = [t for t in rack.trays if t in results and any(p.check == "gpu-fabric" for p in results[t].problems)]
        cliques = {t: results[t].clique for t in rack.trays if t in results and results[t].clique}
        counts: dict[str, int] = {}
        for c in cliques.values():
            counts[c] = counts.get(c, 0) + 1
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        why = ""
        if len(own) >= majority:
            named = ", ".join(own[:4]) + (", ..." if len(own) > 4 else "")
            why = f"NVLink fabric: {len(own)} of its {len(rack.trays)} trays report a fabric problem ({named})"
        elif len(ranked) >= 2 and ranked[0][1] == ranked[1][1] and 2 * ranked[0][1] >= majority:
            why = f"NVLink fabric: its trays split evenly between cliques {ranked[0][0]} and {ranked[1][0]}"
        if why:
            trays = [t for t in rack.trays if t in results]
            for t in trays:
                results[t].problems.append(Problem("gpu-fabric", f"rack {rack.name}", why))
            faults[rack.name] = (list(rack.trays), why)
            continue
        if len(ranked) < 2:
            continue
        main = ranked[0][0]
        for tray, clique in cliques.items():
            if clique != main:
                message = f"in NVLink clique {clique}; {ranked[0][1]} of rack {rack.name}'s trays are in {main}"
                results[tray].problems.append(Problem("gpu-fabric", f"rack {rack.name}", message))
    return faults


_RECORD_TYPES = {f.name: type(f.default) for f in fields(NodeRecord)}


def load_state(path: Path) -> dict[str, NodeRecord]:
    """health's record per node, as this version writes it (an older aisite's too: the same fields); anything else
    is a RecordError naming the file, never a guess."""

    def fits(rec: dict[str, Any]) -> bool:
        return all(k in _RECORD_TYPES and type(v) is _RECORD_TYPES[k] for k, v in rec.items())

    return {name: NodeRecord(**rec) for name, rec in store.read_named(path, fits, "a health record").items()}


CHECKS_FILE = "checks.json"
CHECKS_VERSION = 1


def verdicts(results: dict[str, NodeHealth]) -> dict[str, dict[str, Any]]:
    """Each node's verdict as `aisite health --json` and `aisite status --health --json` print it."""
    return {
        n: {"healthy": h.healthy, "problems": [asdict(p) for p in h.problems], "skipped": h.skipped}
        for n, h in sorted(results.items())
    }


def save_checks(folder: Path, at: str, results: dict[str, NodeHealth], missing: list[str]) -> None:
    """Each node's verdict as this pass read it: what `aisite status --health` shows without reaching a node."""
    doc = {
        "version": CHECKS_VERSION,
        "at": at,
        "nodes": {n: asdict(h) | {"healthy": h.healthy} for n, h in sorted(results.items())},
        "missing": missing,
    }
    (folder / CHECKS_FILE).write_text(json.dumps(doc, indent=2) + "\n")


@dataclass(frozen=True, slots=True)
class LastChecks:
    at: str  # "" when no pass was recorded on this machine
    results: dict[str, NodeHealth]
    missing: list[str]


def load_checks(folder: Path) -> LastChecks:
    """The last pass's verdicts as save_checks wrote them; anything else is a RecordError naming the file."""
    path = folder / CHECKS_FILE
    if not path.is_file():
        return LastChecks("", {}, [])
    try:
        doc = foreign.loads(path.read_bytes(), foreign.RECORD_LIMIT)
        if not isinstance(doc, dict) or doc.get("version") != CHECKS_VERSION:
            raise ValueError(f"not a health checks record of version {CHECKS_VERSION}")
        results = {}
        for name, rec in dict(doc["nodes"]).items():
            problems = [Problem(str(p["check"]), str(p["subject"]), str(p["message"])) for p in rec["problems"]]
            results[str(name)] = NodeHealth(str(name), problems, skipped=[str(x) for x in rec.get("skipped", [])])
        return LastChecks(str(doc["at"]), results, [str(m) for m in doc["missing"]])
    except (ValueError, KeyError, TypeError) as exc:
        raise RecordError(f"{path}: {exc}") from exc


def _save_state(path: Path, state: dict[str, NodeRecord]) -> None:
    path.write_text(json.dumps({k: asdict(v) for k, v in sorted(state.items())}, indent=2) + "\n")


def apply_vars(hp: HealthPass) -> dict[str, Any]:
    """What playbooks/health-apply.yml is given: the actions to take and where their Node objects are."""
    return {"health_actions": hp.to_apply, "health_objects_dir": hp.files["objects"]}


def confirm_applied(folder: Path, nodes: list[str], members: Path, at: str) -> None:
    """The cluster took these nodes' decisions (health-apply.yml succeeded against an API server): they are no
    longer pending, and a released node is back in service."""
    state = load_state(folder / "state.json")
    for n in nodes:
        if n in state:
            state[n].pending = ""
    _save_state(folder / "state.json", state)
    sync_members(members, state, at)


def sync_members(path: Path, state: dict[str, NodeRecord], at: str) -> None:
    """The quarantine as the site's one state per member (aisite.members.store): a quarantined node held, pending its
    quarantine until the cluster took it; a released one held until the cluster took the release."""
    quarantined = store.State.QUARANTINED
    with store.editing(path) as members:
        for node, rec in sorted(state.items()):
            if rec.quarantined:
                pending = store.Pending.QUARANTINE if rec.pending == "quarantine" else store.Pending.NOTHING
                store.hold(members, node, "health", state=quarantined, pending=pending, at=at, message=rec.reason)
            elif rec.pending == "release":
                why = "recovered; not yet released"
                store.hold(
                    members, node, "health", state=quarantined, pending=store.Pending.RELEASE, at=at, message=why
                )
            else:
                store.release(members, node, "health", at=at)


def run_pass(
    plan: Plan,
    records: dict[str, Any],
    folder: Path,
    members: Path,
    now: datetime | None = None,
    *,
    dry_run: bool = False,
) -> HealthPass:
    """One pass. Members held out of service by others in `members` (aisite.members.store: a rollout, provisioning)
    take their place in the site's budget; the pass's outcome is written there too (sync_members). A dry run
    decides the same and writes nothing: no record, no member, no Node object to apply."""
    assert plan.health is not None
    at = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    nodes = [n.name for n in plan.nodes]
    # A node that answered with no status at all (None) has not checked yet; anything else is parsed.
    results = {n: from_status(n, records[n]) for n in nodes if records.get(n) is not None}
    faults = rack_domains(plan, results)
    missing = [n for n in nodes if n not in results]
    h = plan.health
    limit = cap(len(nodes), h.max_quarantined_fraction, h.max_quarantined)
    state, actions = decide(
        load_state(folder / "state.json"),
        results,
        limit,
        h.recover_after,
        at,
        budget=site_budget(plan),
        elsewhere=store.held_out(members, but="health"),
        racks=faults,
        rack_limit=h.max_quarantined_racks,
    )
    if dry_run:
        return HealthPass(results, missing, state, actions, limit)
    folder.mkdir(parents=True, exist_ok=True)
    save_checks(folder, at, results, missing)
    _save_state(folder / "state.json", state)
    sync_members(members, state, at)
    with (folder / "actions.jsonl").open("a") as fh:
        for a in actions:
            fh.write(json.dumps(asdict(a), sort_keys=True) + "\n")
    (folder / "aisite_health_quarantine.prom").write_text(metrics(state, actions, limit))
    objects = folder / "nodes"
    objects.mkdir(exist_ok=True)
    acted = {a.node: a for a in actions if a.kind != "held"}
    to_apply = [
        asdict(acted[n]) if n in acted else {"node": n, "kind": r.pending, "reason": "not yet applied", "at": at}
        for n, r in sorted(state.items())
        if r.pending
    ]
    for item in to_apply:
        node = item["node"]
        (objects / f"{node}.yaml").write_text(yaml.safe_dump(node_object(node, state.get(node))))
    files = {
        "checks": str(folder / CHECKS_FILE),
        "state": str(folder / "state.json"),
        "actions": str(folder / "actions.jsonl"),
        "metrics": str(folder / "aisite_health_quarantine.prom"),
        "objects": str(objects),
    }
    return HealthPass(results, missing, state, actions, limit, files, to_apply)
