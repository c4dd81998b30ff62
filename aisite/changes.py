"""What changed: the one definition `aisite deploy --changed`, `aisite reconcile`, `aisite diff` and the Pulumi
layers' triggers share.

A layer's state is one hash per host it targets: the host's variables as Ansible sees them (the site's variables,
its groups, its own) together with the layer's code (its playbook, its roles' files and what else it applies, the
platform's rendered charts and objects). A host needs the layer when its hash differs from the one recorded at its
last successful run; a change to the code or to a site-wide variable therefore reaches every host, a change to
one node's settings that node alone. The layer's trigger (what Pulumi compares) is the hash of those hashes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from aisite.plan import Plan
from aisite.playbooks import PLAYBOOKS, ROLES, playbook_roles
from aisite.render.inventory import inventory
from aisite.render.manifests import layer_files, manifest_files

LOCALHOST = "localhost"


@dataclass(frozen=True)
class LayerState:
    layer: str
    hosts: dict[str, str]  # host -> sha256 of the layer's code and the host's variables

    @property
    def trigger(self) -> str:
        return _sha(json.dumps(sorted(self.hosts.items())) + self.layer)

    def pending(self, applied: Mapping[str, str]) -> list[str]:
        """Hosts whose state is not the one last applied to them, in inventory order."""
        return [h for h, digest in self.hosts.items() if applied.get(h) != digest]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def host_groups(inv: Mapping[str, Any]) -> dict[str, list[str]]:
    """host -> the inventory groups it is in, in inventory order."""
    groups: dict[str, list[str]] = {}
    for group, body in inv["all"]["children"].items():
        for host in (body or {}).get("hosts") or {}:
            groups.setdefault(host, []).append(group)
    return groups


def _digest(value: Any) -> str:
    return _sha(json.dumps(value, sort_keys=True, default=str))


def host_digests(inv: Mapping[str, Any]) -> dict[str, str]:
    """host -> a digest of the variables Ansible gives it: the site's, its groups', its own, and its group names.

    Each part is hashed once (the site's variables, which list every host, once for the site, not once per host),
    so the cost is linear in the inventory. localhost (the controller, where the platform plays run) has the
    site's variables only."""
    common = _digest(inv["all"].get("vars") or {})
    children = inv["all"]["children"]
    groups_digest = {g: _digest((body or {}).get("vars") or {}) for g, body in children.items()}
    out = {LOCALHOST: _sha(common + "[]")}
    for host, groups in host_groups(inv).items():
        own: dict[str, Any] = {}
        for g in groups:
            own |= children[g]["hosts"][host] or {}
        out[host] = _sha(common + "".join(groups_digest[g] for g in groups) + _digest(own) + _digest(sorted(groups)))
    return out


def resolve_pattern(pattern: str, inv: Mapping[str, Any]) -> list[str] | None:
    """The hosts an Ansible host pattern of names and groups (`a:b`, `a,b`, `all`, `localhost`) selects, in
    inventory order; None for a pattern this does not read (exclusions, intersections, wildcards, ranges).
    Empty groups are absent from the inventory: a name it does not hold selects nothing."""
    groups = host_groups(inv)
    members: dict[str, list[str]] = {}
    for host, gs in groups.items():
        for g in gs:
            members.setdefault(g, []).append(host)
    chosen: set[str] = set()
    for raw in pattern.replace(",", ":").split(":"):
        part = raw.strip()
        if not part:
            continue
        if any(c in part for c in "!&*?[~"):
            return None
        if part == "all":
            chosen |= set(groups)
        elif part == LOCALHOST or part in groups:
            chosen.add(part)
        elif part in members:
            chosen |= set(members[part])
        # Anything else matches no host, as in Ansible (an OS group the site has no switch of, say).
    order = [LOCALHOST, *groups]
    return [h for h in order if h in chosen]


def layer_targets(layer: str, inv: Mapping[str, Any]) -> list[str]:
    """Hosts the layer's plays run on (every host when a play's pattern is one this does not read)."""
    plays = yaml.safe_load((PLAYBOOKS / f"{layer}.yml").read_text()) or []
    hosts: list[str] = []
    for play in plays:
        if not isinstance(play, dict) or "hosts" not in play:
            continue
        selected = resolve_pattern(str(play["hosts"]), inv)
        hosts += selected if selected is not None else [LOCALHOST, *host_groups(inv)]
    return list(dict.fromkeys(hosts))


def _tree_files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def contents_text(files: Mapping[str, str]) -> str:
    """Rendered files (name -> content) as one text, for the layer that applies them."""
    return "".join(f"{name}\n{text}" for name, text in sorted(files.items()))


def site_layer_inputs(plan: Plan) -> tuple[dict[str, Any], dict[str, str]]:
    """What the layers' states are computed from: the inventory, and per layer the text of the rendered files it
    applies (the platform's charts and objects, the workloads' jobs)."""
    return inventory(plan), {name: contents_text(files) for name, files in layer_files(manifest_files(plan)).items()}


def layer_code(layer: str, content: str = "") -> str:
    """sha256 of the layer's playbook, its roles' files (not their molecule scenarios) and `content` (what else
    the layer applies: the platform's rendered charts and objects)."""
    playbook = PLAYBOOKS / f"{layer}.yml"
    h = hashlib.sha256()
    h.update(content.encode())
    h.update(playbook.read_bytes())
    for role in playbook_roles(playbook):
        role_dir = ROLES / role
        for f in _tree_files(role_dir):
            if "molecule" in f.relative_to(role_dir).parts:
                continue
            h.update(str(f.relative_to(ROLES)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def layer_state(
    layer: str, inv: Mapping[str, Any], content: str = "", digests: Mapping[str, str] | None = None
) -> LayerState:
    code = layer_code(layer, content)
    hosts = digests if digests is not None else host_digests(inv)
    return LayerState(layer, {h: _sha(code + hosts[h]) for h in layer_targets(layer, inv)})


def layer_states(layers: Iterable[str], inv: Mapping[str, Any], contents: Mapping[str, str]) -> dict[str, LayerState]:
    digests = host_digests(inv)
    return {name: layer_state(name, inv, contents.get(name, ""), digests) for name in layers}
