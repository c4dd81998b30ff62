# The health check's directories and files in one module run. Each task costs a module run on the node, and on a
# node emulated in software (the lab's VM) a run takes 10-20 s: the role's ten files and directories, as a task
# each, took 190 s of a lab deploy (2026-11-29).
from __future__ import annotations

import hashlib
import os
import shlex
import tempfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: node_health_files
short_description: Directories and files, each written only where it differs, in one module run
description:
  - Makes each directory, then writes each file whose content, mode, owner or group differs from what is asked
    (atomically, through a temporary file in the same directory, checked by I(validate) first where given).
  - Supports check mode and diff mode.
options:
  directories:
    description: Directories to make, in order.
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: The directory., type: path, required: true}
      mode: {description: Its mode as octal digits in a string., type: str, required: true}
      owner: {description: Its owner., type: str, required: true}
      group: {description: Its group., type: str, required: true}
  files:
    description: Files to write.
    type: list
    elements: dict
    default: []
    suboptions:
      dest: {description: The file; its directory must exist or be among I(directories)., type: path, required: true}
      content: {description: What it holds (text)., type: str, required: true}
      mode: {description: Its mode as octal digits in a string., type: str, required: true}
      owner: {description: Its owner., type: str, required: true}
      group: {description: Its group., type: str, required: true}
      validate:
        description: A command run on the new content before it replaces the file; C(%s) is its path. No shell.
        type: str
"""

EXAMPLES = r"""
- name: Node health | Directories, the check, the node's settings and its units
  node_health_files:
    directories:
      - {path: /opt/aisite-health, mode: "0755", owner: root, group: root}
    files:
      - dest: /opt/aisite-health/node.py
        content: "{{ lookup('ansible.builtin.file', 'node.py', rstrip=false) }}"
        mode: "0644"
        owner: root
        group: root
"""

RETURN = r"""
changed_paths:
  description: The directories made or changed and the files written, in order.
  type: list
  elements: str
  returned: always
"""

_ENTRY = {
    "mode": {"type": "str", "required": True},
    "owner": {"type": "str", "required": True},
    "group": {"type": "str", "required": True},
}
ARGUMENT_SPEC: dict[str, Any] = {
    "directories": {
        "type": "list",
        "elements": "dict",
        "default": [],
        "options": {"path": {"type": "path", "required": True}, **_ENTRY},
    },
    "files": {
        "type": "list",
        "elements": "dict",
        "default": [],
        "options": {
            "dest": {"type": "path", "required": True},
            "content": {"type": "str", "required": True},
            "validate": {"type": "str"},
            **_ENTRY,
        },
    },
}


def _mode(module: AnsibleModule, value: str, what: str) -> int:
    if not (3 <= len(value) <= 4 and all(c in "01234567" for c in value)):
        module.fail_json(msg=f"{what}: mode must be octal digits in a string, such as '0644', not {value!r}")
    return int(value, 8)


def _attributes(module: AnsibleModule, path: str, entry: dict[str, Any], changed: bool) -> bool:
    """Mode, owner and group as asked (each set only where it differs; nothing set in check mode)."""
    mode = _mode(module, entry["mode"], path)
    changed = module.set_owner_if_different(path, entry["owner"], changed)
    changed = module.set_group_if_different(path, entry["group"], changed)
    return bool(module.set_mode_if_different(path, mode, changed))


def _sha1(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha1(f.read()).hexdigest()
    except FileNotFoundError:
        return None


def _write(module: AnsibleModule, entry: dict[str, Any], diffs: list[dict[str, str]]) -> bool:
    dest, data = entry["dest"], entry["content"].encode()
    if os.path.isdir(dest):
        module.fail_json(msg=f"{dest}: is a directory")
    if _sha1(dest) == hashlib.sha1(data).hexdigest():
        return _attributes(module, dest, entry, False)
    if module._diff:
        before = ""
        if os.path.exists(dest):
            with open(dest, encoding="utf-8", errors="replace") as f:
                before = f.read()
        diffs.append({"before_header": dest, "after_header": dest, "before": before, "after": entry["content"]})
    if module.check_mode:
        return True
    fd, tmp = tempfile.mkstemp(prefix=".aisite-", dir=os.path.dirname(dest))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if entry["validate"]:
            if "%s" not in entry["validate"]:
                module.fail_json(msg=f"{dest}: validate must name the file as %s: {entry['validate']!r}")
            rc, out, err = module.run_command([a.replace("%s", tmp) for a in shlex.split(entry["validate"])])
            if rc != 0:
                module.fail_json(msg=f"{dest}: the new content failed validation (exit {rc})", stdout=out, stderr=err)
        os.chmod(tmp, _mode(module, entry["mode"], dest))
        module.atomic_move(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    _attributes(module, dest, entry, True)
    return True


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    changed_paths: list[str] = []
    diffs: list[dict[str, str]] = []
    for entry in module.params["directories"]:
        path = entry["path"]
        made = False
        if not os.path.isdir(path):
            if os.path.exists(path):
                module.fail_json(msg=f"{path}: exists and is not a directory")
            made = True
            if not module.check_mode:
                os.makedirs(path, mode=_mode(module, entry["mode"], path))
                _attributes(module, path, entry, True)  # makedirs' mode is masked by the umask
        if made or (os.path.isdir(path) and _attributes(module, path, entry, False)):
            changed_paths.append(path)
    for entry in module.params["files"]:
        if _write(module, entry, diffs):
            changed_paths.append(entry["dest"])
    result: dict[str, Any] = {"changed": bool(changed_paths), "changed_paths": changed_paths}
    if module._diff and diffs:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
