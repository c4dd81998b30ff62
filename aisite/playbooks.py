"""Where the playbooks and roles are, and which roles a playbook uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from aisite.roots import COLLECTION

__all__ = ["COLLECTION", "LAYERS", "OPTIONAL_LAYERS", "PLAYBOOKS", "PLUGINS", "ROLES", "playbook_roles", "role_name"]

# The tool's content is the aisite.site collection (aisite.roots): the checkout's, or the one shipped inside the
# installed package. Its playbooks name its roles by their full names (aisite.site.common).
PLAYBOOKS = COLLECTION / "playbooks"
ROLES = COLLECTION / "roles"
PLUGINS = COLLECTION / "plugins"
_PREFIX = "aisite.site."
# The site's layers, each a playbook of its name, in the order a whole deploy runs them (site.yml imports them so);
# the optional ones run only when asked by name (`deploy --layer NAME`), never by a whole-site deploy or --changed.
LAYERS = ("oob", "fabric", "hosts", "cluster", "platform", "workloads")
OPTIONAL_LAYERS = ("reconciler", "pull")


def role_name(name: str) -> str:
    """A role's folder under ROLES, from the name a playbook or task gives it (aisite.site.common or common)."""
    return name.removeprefix(_PREFIX)


def playbook_roles(playbook: Path) -> list[str]:
    """Roles a playbook applies (plays' `roles:` lists and import_role/include_role tasks), in order, with the
    roles those roles include in their own tasks (a shared role such as `packages`)."""
    found: list[str] = []

    def walk(node: Any, base: Path) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "roles" and isinstance(value, list):
                    for r in value:
                        found.append(role_name(r["role"] if isinstance(r, dict) else str(r)))
                elif key in ("ansible.builtin.import_role", "ansible.builtin.include_role") and isinstance(value, dict):
                    found.append(role_name(str(value["name"])))
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
