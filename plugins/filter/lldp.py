"""lldp_miswires: every cabled port of one host whose LLDP neighbour differs from the plan, in words."""

from __future__ import annotations

from typing import Any


def planned_links(node: dict[str, Any] | None, switch: dict[str, Any] | None) -> dict[str, tuple[str, str]]:
    """local port -> (peer system, peer port) as the plan cables them."""
    links: dict[str, tuple[str, str]] = {}
    for rail in (node or {}).get("rails", []):
        links[rail["interface"]] = (rail["leaf"], rail["leaf_port"])
    for nb in (switch or {}).get("neighbors", []):
        links[nb["interface"]] = (nb["peer"], nb["peer_interface"])
    return links


def observed_links(lldpcli_json: dict[str, Any]) -> dict[str, set[tuple[str, str]]]:
    """local port -> {(system, port)} from `lldpcli -f json show neighbors` (one neighbour is a dict, more a list)."""
    interfaces = (lldpcli_json.get("lldp") or {}).get("interface") or []
    if isinstance(interfaces, dict):
        interfaces = [{name: body} for name, body in interfaces.items()]
    seen: dict[str, set[tuple[str, str]]] = {}
    for entry in interfaces:
        for local, body in entry.items():
            for system in body.get("chassis", {}):
                port = body.get("port", {})
                pid = port.get("id", {})
                name = pid.get("value") if pid.get("type") == "ifname" else port.get("descr", pid.get("value"))
                seen.setdefault(local, set()).add((system, str(name)))
    return seen


def lldp_miswires(
    lldpcli_json: dict[str, Any], host: str, node: dict[str, Any] | None = None, switch: dict[str, Any] | None = None
) -> list[str]:
    seen = observed_links(lldpcli_json)
    out = []
    for local, (system, port) in sorted(planned_links(node, switch).items()):
        got = seen.get(local, set())
        if (system, port) in got and len(got) == 1:
            continue
        what = ", ".join(f"{s} {p}" for s, p in sorted(got)) or "no LLDP neighbour"
        out.append(f"{host} {local}: cabled to {what}; the plan says {system} {port}")
    return out


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"lldp_miswires": lldp_miswires}
