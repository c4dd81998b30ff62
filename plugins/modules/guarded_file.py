# The documentation and argument spec of the guarded_file action (plugins/action/guarded_file.py does the work on
# the controller; this module never runs on a host).
from __future__ import annotations

DOCUMENTATION = r"""
---
module: guarded_file
short_description: Write a file unless the state read before shows it already as it would be written
description:
  - Renders O(src) (a template of the role, as M(ansible.builtin.template) does) or takes O(content), and compares
    V(<mode>:<owner>:<group>:<sha1>) with what the project's C(file_state) role read of O(dest) into
    C(file_state_current); equal, nothing runs on the host. Otherwise M(ansible.builtin.copy) writes it with that
    mode, owner and group, so a file with the right content and a wrong mode or owner is corrected too.
  - Without C(file_state_current) for O(dest), the copy always runs (it is idempotent itself, only slower).
  - Mode, owner and group are given once, here: the comparison and the write read the same values.
options:
  dest:
    description: Absolute path of the file on the host.
    type: path
    required: true
  src:
    description: A template of the role (found as M(ansible.builtin.template) finds it).
    type: str
  content:
    description: The file's content, as is.
    type: str
  mode:
    description: Octal permissions as a string, such as V("0644").
    type: str
    required: true
  owner:
    description: Owner of the file.
    type: str
    default: root
  group:
    description: Group of the file.
    type: str
    default: root
  validate:
    description: A command that checks the new file before it replaces the old (C(%s) for its path).
    type: str
  unsafe_writes:
    description: Write in place where an atomic rename cannot be done (a bind-mounted file).
    type: bool
    default: false
notes:
  - Exactly one of O(src) and O(content).
author: aisite
"""

EXAMPLES = r"""
- name: Include the file_state role first, for the files this role writes
  ansible.builtin.include_role:
    name: file_state
  vars:
    file_state_paths: [/etc/chrony/chrony.conf]

- name: Configure chrony
  aisite.site.guarded_file:
    src: chrony.conf.j2
    dest: /etc/chrony/chrony.conf
    mode: "0644"
  notify: Restart chrony
"""

RETURN = r"""
dest:
  description: The file's path.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

ARGUMENT_SPEC = {
    "dest": {"type": "path", "required": True},
    "src": {"type": "str"},
    "content": {"type": "str"},
    "mode": {"type": "str", "required": True},
    "owner": {"type": "str", "default": "root"},
    "group": {"type": "str", "default": "root"},
    "validate": {"type": "str"},
    "unsafe_writes": {"type": "bool", "default": False},
}
MUTUALLY_EXCLUSIVE = [["src", "content"]]
REQUIRED_ONE_OF = [["src", "content"]]


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        mutually_exclusive=MUTUALLY_EXCLUSIVE,
        required_one_of=REQUIRED_ONE_OF,
        supports_check_mode=True,
    )
    module.fail_json(msg="aisite.site.guarded_file runs as an action plugin on the controller, not on the host")


if __name__ == "__main__":
    main()
