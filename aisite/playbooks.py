"""Where the playbooks and roles are, which roles a playbook uses, and the hash that re-runs a layer."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
PLAYBOOKS = ROOT / "playbooks"
ROLES = ROOT / "roles"


def playbook_roles(playbook: Path) -> list[str]:
    """Roles a playbook applies (plays' `roles:` lists and import_role/include_role tasks), in order, with the
    roles those roles include in their own tasks (a shared role such as `packages`)."""
    found: list[str] = []

    def walk(node: Any, base: Path) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "roles" and isinstance(value, list):
                    for r in value:
                        found.append(r["role"] if isinstance(r, dict) else str(r))
                elif key in ("ansible.builtin.import_role", "ansible.builtin.include_role") and isinstance(value, dict):
                    found.append(str(value["name"]))
                elif key == "ansible.builtin.import_playbook" and isinstance(value, str):
                    walk(yaml.safe_load((base / value).read_text()), base)
                else:
                    walk(value, base)
        elif isinstance(node, list):
            for item in node:
                walk(item, base)

    walk(yaml.safe_load(playbook.read_text()), playbook.parent)
    roles = list(dict.fromkeys(found))
    for role in roles:  # grows while it is read: a role found in a role's tasks is read in turn, once
        found.clear()
        for tasks in sorted((ROLES / role / "tasks").glob("*.yml")):
            walk(yaml.safe_load(tasks.read_text()), tasks.parent)
        roles += [r for r in dict.fromkeys(found) if r not in roles]
    return roles


def _tree_files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def platform_text(files: dict[str, str]) -> str:
    """The rendered platform (file name -> content) as one text for the platform layer's trigger."""
    return "".join(f"{name}\n{text}" for name, text in sorted(files.items()))


def layer_trigger(layer: str, inventory: str, content: str = "") -> str:
    """sha256 of the inventory (which holds every variable), the layer's playbook and its roles' files, and what
    else the layer applies (the platform's rendered charts and objects)."""
    playbook = PLAYBOOKS / f"{layer}.yml"
    h = hashlib.sha256()
    h.update(inventory.encode())
    h.update(content.encode())
    h.update(playbook.read_bytes())
    for role in playbook_roles(playbook):
        role_dir = ROLES / role
        for f in _tree_files(role_dir):
            # molecule scenarios test a role; they do not change what it does to a site.
            if "molecule" in f.relative_to(role_dir).parts:
                continue
            h.update(str(f.relative_to(ROLES)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()
