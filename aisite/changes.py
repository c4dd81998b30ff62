"""What changed: the one definition `aisite deploy --changed`, `aisite reconcile`, `aisite diff` and the Pulumi
layers' triggers share.

A layer's state is one hash per host it targets: the variables the layer reads as Ansible gives them to the host
(of the site's, its groups' and its own variables, those its playbook and roles name; of a mapping they read by
attribute, those attributes alone) together with the layer's code (its playbook, its roles' files and what else it
applies, the platform's rendered charts and objects). A host needs the layer when its hash differs from the one
recorded at its last successful run: a change reaches the layers that read it, on the hosts it belongs to (a
benchmark's batch size runs the workloads alone, an NTP server the hosts that set time). The layer's trigger
(what Pulumi compares) is the hash of those hashes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from aisite.plan import Plan
from aisite.playbooks import COLLECTION, PLAYBOOKS, PLUGINS, ROLES, playbook_roles
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


def run_limit(state: LayerState, pending: list[str]) -> str | None:
    """The --limit that runs the layer on `pending` (some of its hosts), None for the whole layer: also when only
    the controller is pending, as Ansible refuses a --limit that leaves only localhost (not an inventory host).
    `aisite deploy --changed` and the Pulumi layers run the same."""
    whole = pending == list(state.hosts) or set(pending) <= {LOCALHOST}
    return None if whole else ",".join(pending)


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


Reads = Mapping[str, frozenset[str] | None]  # variable -> the attributes read (None: the whole value)


def _selected(variables: Mapping[str, Any], reads: Reads | None) -> dict[str, Any]:
    if reads is None:
        return dict(variables)
    out: dict[str, Any] = {}
    for name, attrs in reads.items():
        if name in variables:
            value = variables[name]
            out[name] = value if attrs is None or not isinstance(value, Mapping) else {a: value.get(a) for a in attrs}
    return out


def host_digests(inv: Mapping[str, Any], reads: Reads | None = None) -> dict[str, str]:
    """host -> a digest of the variables Ansible gives it that `reads` names (all of them when None): the site's,
    its groups', its own, and its group names.

    Each part is hashed once (the site's variables, which list every host, once for the site, not once per host),
    so the cost is linear in the inventory. localhost (the controller, where the platform plays run) has the
    site's variables only."""
    common = _digest(_selected(inv["all"].get("vars") or {}, reads))
    children = inv["all"]["children"]
    groups_digest = {g: _digest(_selected((body or {}).get("vars") or {}, reads)) for g, body in children.items()}
    out = {LOCALHOST: _sha(common + "[]")}
    for host, groups in host_groups(inv).items():
        own: dict[str, Any] = {}
        for g in groups:
            own |= children[g]["hosts"][host] or {}
        own = _selected(own, reads)
        out[host] = _sha(common + "".join(groups_digest[g] for g in groups) + _digest(own) + _digest(sorted(groups)))
    return out


def inventory_names(inv: Mapping[str, Any]) -> set[str]:
    """Every variable name the inventory sets, at any level."""
    names = set(inv["all"].get("vars") or {})
    for body in inv["all"]["children"].values():
        names |= set((body or {}).get("vars") or {})
        for host_vars in ((body or {}).get("hosts") or {}).values():
            names |= set(host_vars or {})
    return names


# Jinja comments (not a shell's ${#x}) and whole-line YAML/shell comments: what names a variable without reading it.
_JINJA_COMMENTS = re.compile(r"(?<!\$)\{#.*?#\}", re.S)
_LINE_COMMENTS = re.compile(r"^[ \t]*#.*$", re.M)


@functools.cache
def layer_files_text(layer: str) -> tuple[str, ...]:
    """The texts a layer runs, comments removed: its playbook and its roles' files, not their molecule scenarios
    or argument specs (a spec names a variable without reading it)."""
    # A role's task file named after another layer runs for that layer alone (preflight's per-layer checks).
    others = {f"{p.stem}.yml" for p in PLAYBOOKS.glob("*.yml")} - {f"{layer}.yml"}
    texts = [(PLAYBOOKS / f"{layer}.yml").read_text()]
    for role in playbook_roles(PLAYBOOKS / f"{layer}.yml"):
        for f in _tree_files(ROLES / role):
            rel = f.relative_to(ROLES / role)
            if "molecule" in rel.parts or rel.name == "argument_specs.yml":
                continue
            if not (rel.parts[0] == "tasks" and rel.name in others):
                texts.append(f.read_text(errors="replace"))
    return tuple(_LINE_COMMENTS.sub("", _JINJA_COMMENTS.sub("", t)) for t in texts)


def _uses(name: str, text: str) -> list[str | None]:
    """The attributes `text` reads of variable `name` (None for a use of the whole value), a Jinja alias
    (`{% set k = name %}`, itself no use) read as the name itself. `name is defined`-style tests read nothing."""
    definition = re.compile(rf"set (\w+) = {re.escape(name)}\s*-?%\}}")
    aliases, text = set(definition.findall(text)), definition.sub("", text)
    return [
        m.group(1)
        for n in [name, *aliases]
        for m in re.finditer(rf"(?<![\w.]){re.escape(n)}(?!\w)(?:\.(\w+)|( is ))?", text)
        if not m.group(2)
    ]


def layer_reads(layer: str, names: Iterable[str]) -> dict[str, frozenset[str] | None]:
    """The inventory variables a layer's playbook and roles name, each with the attributes they read of it (None
    when a file uses the value whole). Connection variables (ansible_*) shape every play: always read."""
    texts = layer_files_text(layer)
    out: dict[str, frozenset[str] | None] = {}
    for name in sorted(names):
        if name.startswith("ansible_"):
            out[name] = None
            continue
        uses = [u for t in texts for u in _uses(name, t)]
        if uses:
            out[name] = None if None in uses else frozenset(u for u in uses if u)
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


def site_layer_inputs(
    plan: Plan, applies: Mapping[str, Mapping[str, str]] | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """What the layers' states are computed from: the inventory, and per layer the text of the rendered files it
    applies (the platform's charts and objects, the workloads' jobs: `applies`, where the caller rendered them)."""
    files = applies if applies is not None else layer_files(manifest_files(plan))
    return inventory(plan), {name: contents_text(layer) for name, layer in files.items()}


# A layer uses the collection's plugins where it names one (a module, aisite.site.guarded_file; a filter,
# aisite.site.lldp_miswires): its roles' full names (aisite.site.common) are no use of them.
_PLUGIN_USE = re.compile(
    r"aisite\.site\.(?!(?:" + "|".join(sorted(p.name for p in ROLES.iterdir() if p.is_dir())) + r")\b)(\w+)"
)


def layer_code(layer: str, content: str = "") -> str:
    """sha256 of the layer's playbook, its roles' files (not their molecule scenarios), the project's plugins where
    the layer uses them, and `content` (what else the layer applies: the platform's rendered charts and objects)."""
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
    for f in _plugin_files(frozenset(m.group(1) for t in layer_files_text(layer) for m in _PLUGIN_USE.finditer(t))):
        h.update(str(f.relative_to(COLLECTION)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _plugin_files(names: frozenset[str]) -> list[Path]:
    """The collection's plugin files a layer runs: those of the modules, actions and filters it names (a module's
    file is named for it, a filter's file defines it) and, where it names any, the code and docs they share."""
    if not names:
        return []
    files = []
    for f in _tree_files(PLUGINS):
        kind = f.relative_to(PLUGINS).parts[0]
        if (
            kind in ("module_utils", "doc_fragments")
            or f.stem in names
            or (kind == "filter" and any(f"def {n}(" in f.read_text(errors="replace") for n in names))
        ):
            files.append(f)
    return files


def layer_state(layer: str, inv: Mapping[str, Any], content: str = "") -> LayerState:
    code = layer_code(layer, content)
    hosts = host_digests(inv, layer_reads(layer, inventory_names(inv)))
    return LayerState(layer, {h: _sha(code + hosts[h]) for h in layer_targets(layer, inv)})


def layer_states(layers: Iterable[str], inv: Mapping[str, Any], contents: Mapping[str, str]) -> dict[str, LayerState]:
    return {name: layer_state(name, inv, contents.get(name, "")) for name in layers}
