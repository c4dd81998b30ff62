"""The one reader of JSON that another machine sent: a node's status or result line, a BMC's or a monitor's answer,
a checkpoint listing, an evaluation, an API server's answer, a model server's client. Standard library only: the
controller imports it, and it ships with the payloads (the model server, in the pods' images).

Python's json parses nesting recursively: a 30 KB document nested 5,000 levels raises RecursionError, which is no
ValueError and stops whatever caught only that. Here a document is refused, as a ForeignJSONError (a ValueError),
when it is larger than its caller's limit or nested deeper than `depth`, before json sees it; and NaN or Infinity
(which JSON does not have) are refused too. The caller turns the error into its source's own problem.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Deeper than any document aisite reads (a Kubernetes object, `ceph status`, a node's status: under 12).
MAX_DEPTH = 64
# A JSON string (its escapes included) and the brackets that nest, outside strings.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)  # unrolled: one step per run, not per character
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


class ForeignJSONError(ValueError):
    """A document refused: too large, too deep, or not JSON; the message says which, never the document."""


def depth(text: str) -> int:
    """How deeply the document's arrays and objects nest (brackets inside strings do not count)."""
    level = deepest = 0
    for c in _NOT_BRACKETS.sub("", _STRING.sub("", text)):
        if c in "[{":
            level += 1
            deepest = max(deepest, level)
        else:
            level -= 1
    return deepest


def _constant(name: str) -> Any:
    raise ForeignJSONError(f"{name} is not a JSON number")


def loads(data: str | bytes, limit: int, max_depth: int = MAX_DEPTH) -> Any:
    """The document in `data` (text, or UTF-8 bytes) of at most `limit` bytes and `max_depth` levels, parsed; else
    ForeignJSONError saying why."""
    # A character is at least one byte: a text longer than the limit is refused before it is encoded.
    size = len(data) if isinstance(data, bytes) or len(data) > limit else len(data.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise ForeignJSONError(f"{size} bytes, over the {limit} read")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError:
        raise ForeignJSONError("not UTF-8") from None
    if (levels := depth(text)) > max_depth:
        raise ForeignJSONError(f"nested {levels} levels, deeper than {max_depth}")
    try:
        return json.loads(text, parse_constant=_constant)
    except ForeignJSONError:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError; an int of over 4,300 digits
        raise ForeignJSONError(f"not JSON ({str(exc)[:120]})") from None
