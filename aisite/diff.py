"""`aisite diff`: what a change to a site moves, read from the plans before and after (pure functions).

Each section is a set of facts keyed by what they belong to (a node's field, an address on an interface, a route
on a switch, a port's subnet, a cable, a BGP session, a Kubernetes object); a fact whose key is new is added, one
whose key is gone removed, one whose value differs changed. The layers and hosts a change touches come from
`aisite.changes`, the definition `deploy --changed` and `reconcile` run by.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from aisite.changes import layer_states, site_layer_inputs
from aisite.firmware import SiteFirmware, baselined
from aisite.maintenance.rollout import Rollout, rollout
from aisite.plan import Node, Plan
from aisite.platform import charts, jobs, objects

Facts = dict[str, str]  # key -> value


@dataclass(frozen=True)
class Change:
    key: str
    old: str | None  # None: added
    new: str | None  # None: removed

    @property
    def kind(self) -> str:
        return "added" if self.old is None else "removed" if self.new is None else "changed"


@dataclass
class SiteDiff:
    site: str
    sections: dict[str, list[Change]] = field(default_factory=dict)
    layers: dict[str, list[str]] = field(default_factory=dict)  # layer -> hosts it would run on
    # What the change takes out of service, and in which waves (aisite.maintenance).
    rollout: Rollout = field(default_factory=Rollout)
    # The nodes with a firmware baseline, and what their BMCs said when read (None: not read, `diff --firmware`).
    baselined: int = 0
    firmware: SiteFirmware | None = None

    @property
    def empty(self) -> bool:
        return not any(self.sections.values()) and not self.layers and self.rollout.empty

    def to_dict(self) -> dict[str, Any]:
        return {
            "site": self.site,
            "empty": self.empty,
            "sections": {
                name: [{"kind": c.kind, "key": c.key, "old": c.old, "new": c.new} for c in changes]
                for name, changes in self.sections.items()
            },
            "layers": self.layers,
            "maintenance": self.rollout.to_dict(),
            "firmware": self.firmware.to_dict() if self.firmware else None,
        }


def _flat(prefix: str, value: Any) -> Iterator[tuple[str, str]]:
    """A nested value as `path: scalar` pairs (lists by index), so one moved field reads as one line."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _flat(f"{prefix}.{k}", v)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _flat(f"{prefix}[{i}]", v)
    else:
        yield prefix, json.dumps(value) if not isinstance(value, str) else value


def _nodes(p: Plan) -> Facts:
    def fields(n: Node) -> dict[str, Any]:
        doc = asdict(n)
        if n.firmware is not None:  # a BIOS attribute by its name, not by its place in the list
            doc["firmware"] = doc["firmware"] | {"bios": dict(n.firmware.bios)}
        return doc

    return dict(kv for n in p.nodes for kv in _flat(n.name, fields(n)))


def _switches(p: Plan) -> Facts:
    # Sessions and host subnets have sections of their own.
    return dict(
        kv
        for s in p.switches
        for kv in _flat(s.name, {k: v for k, v in asdict(s).items() if k not in ("neighbors", "host_subnets")})
    )


def _addresses(p: Plan) -> Facts:
    facts: Facts = {}
    for n in p.nodes:
        facts[f"{n.name} {n.management.name}"] = f"{n.management.address}/{n.management.prefix}"
        if n.storage:
            facts[f"{n.name} {n.storage.name}"] = f"{n.storage.address}/{n.storage.prefix}"
        for r in n.rails:
            facts[f"{n.name} {r.interface}"] = f"{r.address}/{r.prefix}"
        facts[f"{n.name}-bmc"] = n.bmc.address
    for s in p.switches:
        facts[f"{s.name} management"] = f"{s.management_address}/{s.management_prefix}"
        if s.loopback:
            facts[f"{s.name} loopback"] = s.loopback
        for nb in s.neighbors:
            facts[f"{s.name} {nb.interface}"] = nb.local_address
    return facts


def _routes(p: Plan) -> Facts:
    facts: Facts = {}
    for s in p.switches:
        for h in s.host_subnets:
            facts[f"{s.name} rail {h.rail} subnet"] = f"{h.subnet} (gateway {h.gateway})"
    for n in p.nodes:
        for r in n.rails:
            facts[f"{n.name} table {r.table}"] = (
                f"{r.subnet} dev {r.interface} src {r.address}, default via {r.gateway}"
            )
    return facts


def _switch_ports(p: Plan) -> Facts:
    facts: Facts = {}
    for s in p.switches:
        for h in s.host_subnets:
            for port in h.ports:
                facts[f"{s.name} {port}"] = f"rail {h.rail} {h.subnet} gateway {h.gateway}"
    for c in p.cables:
        facts.setdefault(f"{c.a_device} {c.a_port}", f"-> {c.b_device} {c.b_port}")
        facts.setdefault(f"{c.b_device} {c.b_port}", f"-> {c.a_device} {c.a_port}")
    return facts


def _cables(p: Plan) -> Facts:
    return {
        f"{c.a_device} {c.a_port} <-> {c.b_device} {c.b_port}": f"{c.kind} {c.speed_gbps}G"
        for c in sorted(p.cables, key=lambda c: (c.a_device, c.a_port))
    }


def _bgp(p: Plan) -> Facts:
    return {
        f"{s.name} {nb.interface} -> {nb.peer}": (
            f"AS{s.asn} {nb.local_address} <-> AS{nb.peer_asn} {nb.peer_address} ({nb.peer_interface})"
        )
        for s in p.switches
        for nb in s.neighbors
    }


def _kubernetes_objects(p: Plan) -> dict[str, Any]:
    """Every object the site applies and every Helm release (its chart, version and values), by kind and name."""
    found: dict[str, Any] = {}
    for objs in (objects(p) | jobs(p)).values():
        for o in objs:
            meta = o.get("metadata") or {}
            found[f"{o.get('kind')} {meta.get('namespace', '')}/{meta.get('name')}".replace(" /", " ")] = o
    for c in charts(p):
        found[f"HelmRelease {c.namespace}/{c.release}"] = asdict(c)
    return found


def _kubernetes(old: Plan, new: Plan) -> list[Change]:
    """Objects added or removed whole (their JSON), and those on both sides field by field as `kubectl diff` would
    show them: `ClusterQueue research .spec.resourceGroups[0]...nominalQuota: 8 -> 16`; a Helm release's values
    per key."""
    before, after = _kubernetes_objects(old), _kubernetes_objects(new)
    out: list[Change] = []
    for key in dict.fromkeys([*before, *after]):
        if key not in before:
            out.append(Change(key, None, json.dumps(after[key], sort_keys=True, default=str)))
        elif key not in after:
            out.append(Change(key, json.dumps(before[key], sort_keys=True, default=str), None))
        else:
            fields = compare(dict(_flat("", before[key])), dict(_flat("", after[key])))
            out += [Change(f"{key} {c.key}", c.old, c.new) for c in fields]
    return out


# The plan's fields that the sections above show as objects: every other value is a setting.
_OBJECTS = ("site", "nodes", "switches", "cables")


def _settings(p: Plan) -> Facts:
    """Every value of the plan that is not an object above: NTP and DNS servers, the RoCE profile, versions,
    repositories, networks, exports, tenants, workloads and their thresholds, where secrets come from (never a
    secret: the plan holds none). Without it a commit that changes the NTP servers shows only which layers run."""
    return dict(kv for k, v in asdict(p).items() if k not in _OBJECTS for kv in _flat(k, v))


SECTIONS = {
    "nodes": _nodes,
    "switches": _switches,
    "addresses": _addresses,
    "routes": _routes,
    "switch_ports": _switch_ports,
    "cables": _cables,
    "bgp_sessions": _bgp,
    "settings": _settings,
}


def compare(old: Facts, new: Facts) -> list[Change]:
    keys = list(dict.fromkeys([*old, *new]))
    return [Change(k, old.get(k), new.get(k)) for k in keys if old.get(k) != new.get(k)]


def site_diff(
    old: Plan, new: Plan, layers: Iterable[str], out: Iterable[str] = (), firmware: SiteFirmware | None = None
) -> SiteDiff:
    """The plan `new` against `old`, per layer the hosts whose state (`aisite.changes`) differs, and the waves
    of what must go out of service, beside the members `out` already (quarantined); with `firmware` (read from
    the BMCs), the nodes whose firmware is not their baseline go out too."""
    sections = {name: compare(facts(old), facts(new)) for name, facts in SECTIONS.items()}
    sections["kubernetes"] = _kubernetes(old, new)
    sections["settings"] = sections.pop("settings")  # the objects first, as a reviewer reads them
    diff = SiteDiff(
        new.site,
        sections,
        rollout=rollout(old, new, out, firmware.drifted if firmware else None),
        baselined=len(baselined(new)),
        firmware=firmware,
    )
    names = list(layers)
    before = layer_states(names, *site_layer_inputs(old))
    after = layer_states(names, *site_layer_inputs(new))
    for name in names:
        hosts = after[name].pending(before[name].hosts)
        if hosts:
            diff.layers[name] = hosts
    return diff


def markdown(diff: SiteDiff, title: str, limit: int = 50) -> str:
    """The diff as a comment a reviewer reads: a section per kind of fact, at most `limit` lines each."""
    lines = [f"### {title}", ""]
    if diff.empty:
        return "\n".join([*lines, "No change to the site's plan, objects or layers.", "", *_firmware(diff)]).rstrip()
    lines += _out_of_service(diff.rollout, limit)
    lines += _firmware(diff)
    if diff.layers:
        lines += ["**Runs**", ""]
        lines += [f"- {layer}: {', '.join(hosts)}" for layer, hosts in diff.layers.items()]
        lines.append("")
    for name, changes in diff.sections.items():
        if not changes:
            continue
        counts = {k: sum(1 for c in changes if c.kind == k) for k in ("added", "removed", "changed")}
        summary = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
        lines += [f"**{name.replace('_', ' ')}** ({summary})", ""]
        for c in changes[:limit]:
            if c.kind == "changed":
                lines.append(f"- `{c.key}`: {_short(c.old)} -> {_short(c.new)}")
            else:
                lines.append(f"- {'+' if c.kind == 'added' else '-'} `{c.key}`: {_short(c.new or c.old)}")
        if len(changes) > limit:
            lines.append(f"- ... and {len(changes) - limit} more (`--json` lists every one)")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _short(value: str | None, width: int = 160) -> str:
    """A value on one line of the comment: a whole object added is cut (`--json` has it whole)."""
    text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _out_of_service(r: Rollout, limit: int) -> list[str]:
    """The rollout as a reviewer reads it: what is refused, why each member goes out, and the waves."""
    if r.empty:
        return []
    lines = []
    if r.refused:
        lines += ["**Refused** (no rollout makes these)", ""]
        lines += [f"- {why}" for why in r.refused]
        lines.append("")
    if not r.disruptions:
        return lines
    reboots = sum(d.reboot for d in r.disruptions.values())
    lines += [
        f"**Out of service** ({len(r.disruptions)} members, {reboots} rebooted; budget {r.max_gpus} GPUs"
        + (f", {len(r.out)} already out: {', '.join(r.out)}" if r.out else "")
        + ")",
        "",
    ]
    for reasons, names in _grouped(r).items():
        shown = ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
        lines.append(f"- {reasons}: {shown}")
    lines.append("")
    for i, wave in enumerate(r.waves[:limit], 1):
        lines.append(f"- wave {i}: {', '.join(wave)}")
    if len(r.waves) > limit:
        lines.append(f"- ... and {len(r.waves) - limit} more waves (`--json` lists every one)")
    if r.while_out:
        lines.append(f"- changed while out of service: {', '.join(r.while_out)}")
    lines += [f"- blocked: {n}: {why}" for n, why in list(r.blocked.items())[:limit]]
    lines.append("")
    return lines


def _firmware(diff: SiteDiff) -> list[str]:
    """Whether the nodes' firmware was read, and what could not be (its drift is in the rollout)."""
    if not diff.baselined:
        return []
    if diff.firmware is None:
        return [f"Firmware: {diff.baselined} nodes have a baseline; not read (`--firmware` reads their BMCs).", ""]
    f = diff.firmware
    lines = [
        f"**Firmware** ({len(f.drift) - len(f.drifted)} of {diff.baselined} nodes match their baseline, "
        f"{len(f.drifted)} differ, {len(f.unread) + len(f.unsupported)} not read)",
        "",
    ]
    lines += [f"- not read: {n}: {why}" for n, why in (f.unread | f.unsupported).items()]
    return [*lines, ""]


def _grouped(r: Rollout) -> dict[str, list[str]]:
    """Members by the same reasons (a Kubernetes bump names every node once, not each on a line)."""
    groups: dict[str, list[str]] = {}
    for d in r.disruptions.values():
        groups.setdefault("; ".join(d.reasons) + (" (reboot)" if d.reboot else ""), []).append(d.name)
    return groups
