"""Where the playbooks and roles are, and which roles a playbook uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from aisite.roots import CONTENT

# The tool's content (aisite.roots): the checkout's, or the one shipped inside the installed package.
PLAYBOOKS = CONTENT / "playbooks"
ROLES = CONTENT / "roles"
# The project's own Ansible plugins (aisite.site.*), found through ansible.cfg's collections_path.
COLLECTION = CONTENT / "collections" / "ansible_collections" / "aisite" / "site"


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
