"""ipmitool_fields: the `Name : value` lines of `ipmitool fru print` / `mc info` as a dict (first one wins;
continuation lines, which start with spaces and hold no ' : ', are left out)."""

from __future__ import annotations

from typing import Any


def ipmitool_fields(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(" : ")
        if sep and name.strip():
            fields.setdefault(name.strip(), value.strip())
    return fields


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"ipmitool_fields": ipmitool_fields}
