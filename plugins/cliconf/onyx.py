# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""cliconf for NVIDIA Onyx, enough for ansible.netcommon.cli_config: read the running configuration, work out
which of the candidate's lines it lacks (Onyx prints its configuration flat, one full command per line), and
send those in configuration mode. mellanox.onyx, which has one, is not installable here."""

from __future__ import annotations

import json
from typing import Any

from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.cliconf import CliconfBase, enable_mode

DOCUMENTATION = """
author: aisite
name: onyx
short_description: cliconf for NVIDIA Onyx switches
description:
  - Reads the running configuration and pushes the candidate lines it lacks, in configuration mode.
version_added: 0.1.0
"""


def config_lines(text: str) -> list[str]:
    """Configuration lines without blanks, comments (## and !) and surrounding spaces."""
    return [s for s in (line.strip() for line in text.splitlines()) if s and not s.startswith(("#", "!"))]


def missing_lines(candidate: str, running: str, ignore: list[str] | None = None) -> list[str]:
    """The candidate's lines, in order, that the running configuration does not hold."""
    have = set(config_lines(running))
    skip = set(ignore or ())
    return [line for line in config_lines(candidate) if line not in have and line not in skip]


class Cliconf(CliconfBase):
    def get_device_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"network_os": "onyx"}
        reply = to_text(self.get("show version | json-print"), errors="surrogate_or_strict")
        try:
            data = json.loads(reply)
        except ValueError:
            return info
        info["network_os_version"] = data.get("Product release")
        info["network_os_model"] = data.get("Product model")
        return info

    @enable_mode
    def get_config(self, source: str = "running", flags: Any = None, format: str | None = None) -> str:
        if source != "running":
            raise ValueError(f"fetching configuration from {source} is not supported")
        return to_text(self.send_command("show running-config"), errors="surrogate_or_strict")

    @enable_mode
    def edit_config(
        self, candidate: Any = None, commit: bool = True, replace: Any = None, comment: Any = None
    ) -> dict[str, list[str]]:
        lines = candidate if isinstance(candidate, list) else config_lines(candidate or "")
        responses = []
        if commit and lines:
            for cmd in ["configure terminal", *lines, "exit"]:
                responses.append(to_text(self.send_command(cmd), errors="surrogate_or_strict"))
        return {"request": lines, "response": responses}

    def get_diff(  # noqa: PLR0917 (CliconfBase's signature)
        self,
        candidate: Any = None,
        running: Any = None,
        diff_match: str = "line",
        diff_ignore_lines: list[str] | None = None,
        path: Any = None,
        diff_replace: Any = None,
    ) -> dict[str, Any]:
        if diff_match not in ("line", "none"):
            raise ValueError(f"diff_match {diff_match!r}: Onyx configuration is flat, only 'line' or 'none'")
        text = candidate if isinstance(candidate, str) else "\n".join(candidate or [])
        if diff_match == "none":
            return {"config_diff": "\n".join(config_lines(text)), "banner_diff": {}}
        return {"config_diff": "\n".join(missing_lines(text, running or "", diff_ignore_lines)), "banner_diff": {}}

    def get(  # noqa: PLR0917 (CliconfBase's signature)
        self,
        command: str | None = None,
        prompt: Any = None,
        answer: Any = None,
        sendonly: bool = False,
        newline: bool = True,
        check_all: bool = False,
        output: Any = None,
    ) -> Any:
        if not command:
            raise ValueError("must provide value of command to execute")
        return self.send_command(
            command=command, prompt=prompt, answer=answer, sendonly=sendonly, newline=newline, check_all=check_all
        )

    def get_device_operations(self) -> dict[str, bool]:
        return {
            "supports_diff_replace": False,
            "supports_commit": False,
            "supports_rollback": False,
            "supports_defaults": False,
            "supports_onbox_diff": False,
            "supports_commit_comment": False,
            "supports_multiline_delimiter": False,
            "supports_diff_match": True,
            "supports_diff_ignore_lines": True,
            "supports_generate_diff": True,
            "supports_replace": False,
        }

    def get_option_values(self) -> dict[str, list[str]]:
        return {"format": ["text"], "diff_match": ["line", "none"], "diff_replace": [], "output": []}

    def get_capabilities(self) -> str:
        result = super().get_capabilities()
        result["rpc"] += ["get_diff"]
        result["device_operations"] = self.get_device_operations()
        result.update(self.get_option_values())
        return json.dumps(result)
