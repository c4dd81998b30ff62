"""config_db_drift: the TABLE|key entries of a config_db fragment that the running config_db lacks or holds
with other values. Fields the fragment does not name are left alone (other tools own them)."""

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


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"config_db_drift": config_db_drift}
