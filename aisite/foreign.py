"""Foreign data: what a node, BMC, boot client, cluster or commit sends back. Shown through one helper, and
numbers taken only when finite and inside the bounds the caller knows.

A node's word reaches an operator's terminal (health, accept, reconcile and provision tables) and the records a
later pass reads; it must neither paint the terminal (ESC sequences: OSC 52 writes the clipboard, OSC 0 the title,
CSI 2J clears the screen), nor be read as rich markup (`[/x]` raises), nor run to megabytes."""

from __future__ import annotations

import math
import re
from typing import Any

from rich.markup import escape

# The one reader of another machine's JSON (bounded in size and depth), shared with the payloads it ships with.
from aisite.payloads.foreign_json import ForeignJSONError, loads

__all__ = ["RECORD_LIMIT", "ForeignJSONError", "clean", "loads", "number", "record", "show"]

# Escape sequences as terminals parse them: CSI (ESC [ ... final byte), OSC/DCS/SOS/PM/APC strings up to their
# terminator (BEL or ST) or the end, then any other two-byte ESC sequence. Their 8-bit forms (C1: 0x9b CSI,
# 0x9d OSC, ...) start the same way on terminals that take them.
_SEQUENCES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -~]?"
)
DEFAULT_LIMIT = 200
# The most of a node's record (health's status.json, pull's state.json) the status playbooks read and the
# controller parses; the playbooks' *_max_bytes say the same (a test holds them equal).
RECORD_LIMIT = 2 << 20


def record(value: Any, what: str, limit: int = RECORD_LIMIT) -> Any:
    """A node's record as a status playbook returns it: its text, parsed by `loads` within `limit`; its size in
    bytes where the file was over the bound (not read); None where it has none. A document already parsed (the
    controller's own callers and tests) is returned as it is. Refused: ForeignJSONError naming `what`."""
    if isinstance(value, str):
        try:
            return loads(value, limit)
        except ForeignJSONError as exc:
            raise ForeignJSONError(f"{what}: {exc}") from None
    if isinstance(value, int) and not isinstance(value, bool):
        raise ForeignJSONError(f"{what}: {value} bytes, over the {limit} read")
    return value


def clean(value: Any, limit: int = DEFAULT_LIMIT) -> str:
    """Foreign text as plain, printable, bounded text: escape sequences and control characters removed (a newline
    or tab becomes a space, so a field cannot start a line of its own), at most `limit` characters (an ellipsis
    says it was cut). Anything that is not a string (a number, a list, None) is shown by its repr, bounded."""
    text = value if isinstance(value, str) else _repr(value)
    # Bound first, so a megabyte is not scanned: sequences are removed from a window a little wider than shown.
    window = text[: limit * 4 + 64]
    window = _SEQUENCES.sub("", window)
    window = re.sub(r"[\t\n\r\v\f]+", " ", window)
    # What is left that a terminal does not print as itself: C0 and C1, DEL, and the format characters that
    # reorder or hide text (bidirectional overrides, zero-width marks), separators, unassigned code points.
    window = "".join(c for c in window if c.isprintable()).strip()
    if len(window) > limit or len(text) > len(text[: limit * 4 + 64]):
        return window[: max(0, limit - 1)] + "…"
    return window


def _repr(value: Any) -> str:
    try:
        return repr(value)
    except ValueError:  # an int too long to print (10**5000)
        return f"<{type(value).__name__}>"


def show(value: Any, limit: int = DEFAULT_LIMIT) -> str:
    """Foreign text for rich output: `clean`, with rich markup escaped (`[red]`, `[/x]` shown as written)."""
    return escape(clean(value, limit))


def number(value: Any, low: float, high: float) -> float | None:
    """A number from a node, or None: JSON numbers only (not bools, not strings), finite, within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        f = float(value)
    except OverflowError:  # an int beyond a float (10**400)
        return None
    return f if math.isfinite(f) and low <= f <= high else None
