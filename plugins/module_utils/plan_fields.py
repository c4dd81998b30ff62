# The plan's fields as a module receives them (the controller's data, yet checked again on the node): each narrowed to
# the type that reaches a command before any command runs.
from __future__ import annotations

import re
from typing import Any


class PlanError(ValueError):
    """A plan field outside what the module writes; nothing has run."""


def matching(value: Any, pattern: re.Pattern[str], what: str, noun: str = "one") -> str:
    """`value` when it is a string the pattern matches; else a PlanError naming it as `what`."""
    if not isinstance(value, str) or not pattern.match(value):
        raise PlanError(f"{what} {value!r} is not {noun} aisite writes")
    return value


def integer(value: Any, low: int, high: int, what: str) -> int:
    """`value` when it is an integer (not a bool) from `low` to `high`; else a PlanError naming it as `what`."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise PlanError(f"{what} must be an integer from {low} to {high}, not {value!r}")
    return value
