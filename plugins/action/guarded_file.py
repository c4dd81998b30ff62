# Write a file unless the state the file_state role read shows it already as it would be written: the mode, owner
# and group are given once and read by both the comparison and the write (a copied `when:` guard that repeated
# them kept a file of the right content at a wrong mode forever once the task's mode changed).
from __future__ import annotations

import hashlib
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import lookup_loader
from ansible_collections.aisite.site.plugins.modules.guarded_file import (
    ARGUMENT_SPEC,
    MUTUALLY_EXCLUSIVE,
    REQUIRED_ONE_OF,
)


def expected_state(content: str, mode: str, owner: str, group: str) -> str:
    """The file as file_state reads it: `<mode as stat %a prints it>:<owner>:<group>:<sha1 of the content>`."""
    return f"{int(mode, 8):o}:{owner}:{group}:{hashlib.sha1(content.encode()).hexdigest()}"


class ActionModule(ActionBase):
    # No remote temporary directory of its own: only the copy it hands a write to needs one, and makes it.
    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        del tmp
        _, args = self.validate_argument_spec(
            argument_spec=ARGUMENT_SPEC, mutually_exclusive=MUTUALLY_EXCLUSIVE, required_one_of=REQUIRED_ONE_OF
        )
        mode = args["mode"]
        if not (isinstance(mode, str) and 3 <= len(mode) <= 4 and all(c in "01234567" for c in mode)):
            raise AnsibleActionFail(f"mode must be octal digits in a string, such as '0644', not {mode!r}")
        if args["src"] is not None:
            # The template lookup renders as the template module does (the role's templates/, ansible_managed).
            lookup = lookup_loader.get("ansible.builtin.template", loader=self._loader, templar=self._templar)
            content = lookup.run([args["src"]], variables=task_vars)[0]
        else:
            content = args["content"]
        dest = args["dest"]
        current = (task_vars.get("file_state_current") or {}).get(dest)
        if current == expected_state(content, mode, args["owner"], args["group"]):
            return {**result, "changed": False, "dest": dest}
        copy_args = {k: args[k] for k in ("dest", "mode", "owner", "group", "unsafe_writes")}
        copy_args["content"] = content
        if args["validate"]:
            copy_args["validate"] = args["validate"]
        task = self._task.copy()
        task.args = copy_args
        copy = self._shared_loader_obj.action_loader.get(
            "ansible.legacy.copy",
            task=task,
            connection=self._connection,
            play_context=self._play_context,
            loader=self._loader,
            templar=self._templar,
            shared_loader_obj=self._shared_loader_obj,
        )
        written: dict[str, Any] = copy.run(task_vars=task_vars)
        return {**result, **written}
