# A storage tool's CLI driven from a module: argument lists (never a shell), JSON answers read under a size cap,
# changes recorded as text (reported, and only recorded in check mode), a change's stdout dropped unread (it may
# hold a secret: radosgw-admin prints a new user's keys) and its error said from stderr.
from __future__ import annotations

import json
from typing import Any

from ansible.module_utils.basic import AnsibleModule

LIMIT = 1 << 24  # what a command's JSON may hold: a large cluster's pool list is well under


class JsonCli:
    def __init__(self, module: AnsibleModule, tool: str, base: list[str], json_args: list[str]) -> None:
        self.module = module
        self.tool = tool
        self.base = [module.get_bin_path(tool, required=True), *base]
        self.json_args = json_args
        self.actions: list[str] = []

    def read(self, *args: str, missing_rc: int | None = None) -> Any:
        """The command's JSON answer; None when it exits `missing_rc` (the thing asked for does not exist)."""
        what = f"{self.tool} {' '.join(args)}"
        rc, out, err = self.module.run_command([*self.base, *args, *self.json_args])
        if rc != 0:
            if missing_rc is not None and rc == missing_rc:
                return None
            self.module.fail_json(msg=f"{what} failed: {(err or out)[-400:]}")
        if len(out) > LIMIT:
            self.module.fail_json(msg=f"{what}: over {LIMIT} bytes of output")
        try:
            return json.loads(out)
        except ValueError as e:
            self.module.fail_json(msg=f"{what}: not JSON ({e})")

    def do(self, *args: str) -> None:
        self.actions.append(" ".join(args))
        if self.module.check_mode:
            return
        rc, _out, err = self.module.run_command([*self.base, *args])
        if rc != 0:
            self.module.fail_json(msg=f"{self.tool} {' '.join(args)} failed: {err[-400:]}", actions=self.actions)
