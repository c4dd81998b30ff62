"""The Ceph cluster's own health, as `aisite health` reads it from the first monitor (`ceph status -f json`): the
cluster's word, so read strictly and bounded like a node's; a site-wide verdict beside the nodes' (no node is
quarantined for it: a degraded pool is the cluster's to heal).

Fields as Ceph 16.2.15 writes them (src/mon/Monitor.cc, get_cluster_status; src/mon/PGMap.cc, print_summary:
degraded_* and misplaced_* appear only while objects are): health.status and health.checks{CODE: {severity,
summary.message}}, osdmap.num_osds/num_up_osds/num_in_osds, pgmap.num_pgs and pgs_by_state[{state_name, count}]."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aisite import foreign
from aisite.foreign import clean

LIMIT = 1 << 22  # a status document of a large cluster is a few hundred KiB
Status = Literal["HEALTH_OK", "HEALTH_WARN", "HEALTH_ERR"]


class _Summary(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    message: str = Field(max_length=4096)


class _Check(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    severity: Literal["HEALTH_WARN", "HEALTH_ERR"]
    summary: _Summary
    muted: bool = False


class _Health(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    status: Status
    checks: dict[str, _Check] = Field(default={}, max_length=256)


class _OsdMap(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    num_osds: int = Field(ge=0, le=1_000_000)
    num_up_osds: int = Field(ge=0, le=1_000_000)
    num_in_osds: int = Field(ge=0, le=1_000_000)


class _PgState(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    state_name: str = Field(pattern=r"^[a-z_+]{1,256}$")
    count: int = Field(ge=0)


class _PgMap(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    num_pgs: int = Field(ge=0)
    pgs_by_state: list[_PgState] = Field(default=[], max_length=256)
    degraded_objects: int = Field(default=0, ge=0)
    misplaced_objects: int = Field(default=0, ge=0)


class _Status(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    fsid: str = Field(pattern=r"^[0-9a-f-]{36}$")
    health: _Health
    osdmap: _OsdMap
    pgmap: _PgMap


@dataclass(frozen=True, slots=True)
class CephCheck:
    code: str
    severity: str
    message: str
    muted: bool = False


@dataclass(slots=True)
class CephHealth:
    """The cluster's verdict: `healthy` only at HEALTH_OK (a muted check still shows); `error` when the status could
    not be read at all."""

    status: str  # HEALTH_OK | HEALTH_WARN | HEALTH_ERR | unreadable
    checks: list[CephCheck] = field(default_factory=list)
    osds: tuple[int, int, int] = (0, 0, 0)  # total, up, in
    pgs: int = 0
    pgs_not_clean: int = 0
    degraded_objects: int = 0
    misplaced_objects: int = 0
    error: str = ""

    @property
    def healthy(self) -> bool:
        return self.status == "HEALTH_OK"


def _unreadable(why: str) -> CephHealth:
    return CephHealth("unreadable", error=clean(why, 300))


def read_status(answer: Any, fsid: str) -> CephHealth:
    """`ceph status -f json` as the health-status playbook returns it ({rc, stdout, stderr}) into the cluster's
    verdict; a failed command, a document over LIMIT, one of another shape or another cluster's is unreadable."""
    if not isinstance(answer, dict):
        return _unreadable("no answer from the first monitor")
    if answer.get("rc") != 0:
        return _unreadable(f"ceph status exited {answer.get('rc')!r}: {str(answer.get('stderr', ''))[-300:]}")
    text = answer.get("stdout")
    if not isinstance(text, str):
        return _unreadable("ceph status: no document")
    try:
        st = _Status.model_validate(foreign.loads(text, LIMIT))
    except ValueError as exc:  # ForeignJSONError and ValidationError alike
        if isinstance(exc, ValidationError):
            first = exc.errors()[0]
            return _unreadable(f"ceph status: {'.'.join(map(str, first['loc']))}: {first['msg']}")
        return _unreadable(f"ceph status: {exc}")
    if st.fsid != fsid:
        return _unreadable(f"ceph status: another cluster answered (fsid {st.fsid}, the plan's {fsid})")
    checks = [
        CephCheck(clean(code, 64), c.severity, clean(c.summary.message, 300), c.muted)
        for code, c in sorted(st.health.checks.items())
    ]
    clean_pgs = sum(s.count for s in st.pgmap.pgs_by_state if s.state_name == "active+clean")
    return CephHealth(
        st.health.status,
        checks,
        (st.osdmap.num_osds, st.osdmap.num_up_osds, st.osdmap.num_in_osds),
        st.pgmap.num_pgs,
        max(st.pgmap.num_pgs - clean_pgs, 0),
        st.pgmap.degraded_objects,
        st.pgmap.misplaced_objects,
    )


def summary(h: CephHealth) -> str:
    """One line for a person."""
    if h.error:
        return f"Ceph: unreadable: {h.error}"
    total, up, in_ = h.osds
    parts = [
        f"Ceph: {h.status}",
        f"OSDs {up}/{total} up, {in_}/{total} in",
        f"PGs {h.pgs - h.pgs_not_clean}/{h.pgs} clean",
    ]
    if h.degraded_objects or h.misplaced_objects:
        parts.append(f"objects degraded {h.degraded_objects}, misplaced {h.misplaced_objects}")
    checks = "; ".join(f"{c.code}{' (muted)' if c.muted else ''}: {c.message}" for c in h.checks)
    return ", ".join(parts) + (f"; {checks}" if checks else "")
