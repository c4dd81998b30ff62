"""config_db_drift: the TABLE|key entries of a config_db fragment that the running config_db lacks or holds
with other values. Fields the fragment does not name are left alone (other tools own them).

lossless_buffer_gaps: the ports the fragment makes lossless whose switch lacks the buffers that makes real."""

from __future__ import annotations

from typing import Any


def config_db_drift(want: dict[str, dict[str, dict[str, Any]]], have: dict[str, dict[str, Any]]) -> list[str]:
    drift = []
    for table, rows in sorted(want.items()):
        running = have.get(table, {})
        for key, fields in sorted(rows.items()):
            current = running.get(key)
            # config_db keeps an entry with no fields as {"NULL": "NULL"}; the subset below ignores that.
            if current is None or any(current.get(f) != v for f, v in fields.items()):
                drift.append(f"{table}|{key}")
    return drift


def _covers(pg: str, priority: int) -> bool:
    low, _, high = pg.partition("-")
    return low.isdigit() and int(low) <= priority <= int(high or low)


def lossless_buffer_gaps(want: dict[str, dict[str, dict[str, Any]]], have: dict[str, dict[str, Any]]) -> list[str]:
    """`port (priority N)` for each priority the fragment's PORT_QOS_MAP makes lossless (pfc_enable) that the
    running config_db gives no lossless buffer. PFC alone is not lossless: the priority group needs headroom. In
    SONiC's dynamic buffer model that is a BUFFER_PG row covering the priority; in the traditional model buffermgrd
    derives that row from the port's CABLE_LENGTH and the lossless ingress BUFFER_POOL (both written by the
    platform's buffer templates, `config qos reload`), so those must be there. A factory config_db has neither."""
    dynamic = have.get("DEVICE_METADATA", {}).get("localhost", {}).get("buffer_model") == "dynamic"
    cable = {port for row in have.get("CABLE_LENGTH", {}).values() for port in row}
    pools = have.get("BUFFER_POOL", {})
    lossless_pool = any(p.get("type") == "ingress" and "lossless" in name for name, p in pools.items())
    pgs: dict[str, list[str]] = {}
    for key in have.get("BUFFER_PG", {}):
        port, _, pg = key.partition("|")
        pgs.setdefault(port, []).append(pg)
    gaps = []
    for port, qos in sorted(want.get("PORT_QOS_MAP", {}).items()):
        for priority in sorted(int(p) for p in str(qos.get("pfc_enable", "")).split(",") if p.strip().isdigit()):
            if any(_covers(pg, priority) for pg in pgs.get(port, [])):
                continue
            if not dynamic and port in cable and lossless_pool:
                continue
            gaps.append(f"{port} (priority {priority})")
    return gaps


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"config_db_drift": config_db_drift, "lossless_buffer_gaps": lossless_buffer_gaps}
