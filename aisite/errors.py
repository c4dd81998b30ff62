"""Problems found in a site, each with the key path where it was found."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class SiteError(Exception):
    """A site that cannot be planned; carries every problem found, not only the first."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source = source
        # Two rules may notice the same fact: each problem is reported once, in the order found.
        self.problems = list(dict.fromkeys(problems))
        super().__init__(f"{source}: {len(self.problems)} problem(s)\n" + "\n".join(str(p) for p in self.problems))


def join_path(base: str, *parts: str | int) -> str:
    """`site` + ('gpu_nodes', 1, 'nodes', 3) -> `site.gpu_nodes[1].nodes[3]`."""
    out = base
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


class RecordError(ValueError):
    """A record this machine keeps (members.json, health's state.json) cannot be read as this version writes it:
    said (exit 1), never guessed at."""
