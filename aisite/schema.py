"""The JSON Schema of a stack file, generated from the model the validator uses (aisite.model): the loader reads a
stack strictly as JSON is read (aisite.loader), so a document the schema refuses, aisite refuses too
(tests/test_schema.py feeds both). `aisite schema` prints it; docs/reference/stack.schema.json is a copy."""

from __future__ import annotations

import ast
import copy
from functools import cache
from pathlib import Path
from typing import Any

from aisite import model
from aisite.model import Site

# Where the site lives in a Pulumi stack file (stacks/Pulumi.<stack>.yaml).
SITE_KEY = "aisite:site"
# The schema's identity: the same for every release whose stack files it describes (a new one only with a change
# that makes a valid stack file invalid).
SCHEMA_ID = "urn:aisite:stack-schema:v1"


def schema() -> dict[str, Any]:
    """The JSON Schema of a stack file: Pulumi's `config:` with the site under `aisite:site`, each key described."""
    return copy.deepcopy(_schema())


def site_schema() -> dict[str, Any]:
    """The schema of the site alone (what `config.aisite:site` holds), with the definitions it refers to."""
    whole = schema()
    site: dict[str, Any] = whole["properties"]["config"]["properties"][SITE_KEY]
    return site | {"$defs": whole["$defs"]}


def field_comments() -> dict[str, dict[str, str]]:
    """Class -> field -> the comment lines right above the field in aisite/model/ (its meaning, said once)."""
    out: dict[str, dict[str, str]] = {}
    for path in sorted(Path(model.__file__).parent.glob("*.py")):
        out |= _comments(path.read_text())
    return out


def _comments(source: str) -> dict[str, dict[str, str]]:
    lines = source.splitlines()
    out: dict[str, dict[str, str]] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        fields: dict[str, str] = {}
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                said: list[str] = []
                at = item.lineno - 2
                while at >= 0 and lines[at].strip().startswith("#"):
                    said.insert(0, lines[at].strip().lstrip("#").strip())
                    at -= 1
                if said:
                    fields[item.target.id] = " ".join(said)
        out[node.name] = fields
    return out


@cache
def _schema() -> dict[str, Any]:
    site = Site.model_json_schema()
    comments = field_comments()
    for name, definition in [("Site", site), *site.get("$defs", {}).items()]:
        said = comments.get(name, {})
        for key, prop in definition.get("properties", {}).items():
            if key in said and "description" not in prop:
                prop["description"] = said[key]
    defs = site.pop("$defs", {})
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "aisite stack file (stacks/Pulumi.<stack>.yaml)",
        "type": "object",
        "properties": {
            "config": {
                "type": "object",
                "properties": {SITE_KEY: site},
                "required": [SITE_KEY],
            }
        },
        "required": ["config"],
        "$defs": defs,
    }
