# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""network_cli terminal handling for NVIDIA Onyx (mellanox.onyx, which has one, is not installable here)."""

from __future__ import annotations

import json
import re
from typing import ClassVar

from ansible.errors import AnsibleConnectionFailure
from ansible.module_utils.common.text.converters import to_bytes
from ansible.plugins.terminal import TerminalBase


class TerminalModule(TerminalBase):
    # Onyx prompts: "switch [standalone: master] > ", "... # ", "... (config) # ",
    # "... (config interface ethernet 1/1) # ".
    terminal_stdout_re: ClassVar[list[re.Pattern[bytes]]] = [
        re.compile(rb"(?:\r?\n)?\S+ \[[^\]]*\] (?:\([^)]*\) )?[>#] ?$")
    ]
    terminal_stderr_re: ClassVar[list[re.Pattern[bytes]]] = [
        re.compile(rb"% ?Unrecognized command"),
        re.compile(rb"% ?Incomplete command"),
        re.compile(rb"% ?Invalid input"),
        re.compile(rb"% ?Ambiguous command"),
        re.compile(rb"(?m)^%\s+\S.*$"),
    ]

    def on_open_shell(self) -> None:
        try:
            self._exec_cli_command(b"no cli session paging enable")
        except AnsibleConnectionFailure as e:
            raise AnsibleConnectionFailure("unable to turn off paging on the Onyx CLI") from e

    def on_become(self, passwd: str | None = None) -> None:
        prompt = self._get_prompt()
        if prompt and prompt.rstrip().endswith(b"#"):
            return
        cmd: dict[str, object] = {"command": "enable"}
        if passwd:
            cmd |= {"prompt": r"[\r\n]?[Pp]assword: ?$", "answer": passwd, "prompt_retry_check": True}
        try:
            self._exec_cli_command(to_bytes(json.dumps(cmd)))
        except AnsibleConnectionFailure as e:
            raise AnsibleConnectionFailure("unable to enter enable mode on the Onyx CLI") from e
