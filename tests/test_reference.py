"""The stack file's reference (docs/reference/): generated from the model, current, and the JSON Schema an editor
uses agrees with the model on the shipped stacks and on keys the model refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator

from aisite import reference
from aisite.model import Site

ROOT = Path(__file__).resolve().parent.parent
STACKS = sorted((ROOT / "stacks").glob("Pulumi.*.yaml"))


def test_the_committed_reference_is_what_the_model_generates() -> None:
    """`python -m aisite.reference --write` after a change to aisite/model/: the docs say the model's keys."""
    assert reference.KEYS.read_text() == reference.keys_markdown(), "run: python -m aisite.reference --write"
    assert json.loads(reference.SCHEMA.read_text()) == reference.schema(), "run: python -m aisite.reference --write"


def test_the_modules_page_is_what_the_modules_say() -> None:
    """docs/reference/modules.md after a module is added, moved or its docstring changed; every module says what it
    holds (a module without a docstring would be a blank row)."""
    assert reference.MODULES.read_text() == reference.modules_markdown(), "run: python -m aisite.reference --write"
    blank = [line for line in reference.MODULES.read_text().splitlines() if line.endswith("|  |")]
    assert not blank, f"modules without a docstring: {blank}"


def _models(model: Any, seen: set[str]) -> None:
    seen.add(model.__name__)
    for f in model.model_fields.values():
        for arg in _types(f.annotation):
            if isinstance(arg, type) and hasattr(arg, "model_fields") and arg.__name__ not in seen:
                _models(arg, seen)


def _types(annotation: Any) -> list[Any]:
    out = [annotation]
    for arg in getattr(annotation, "__args__", ()) or ():
        out += _types(arg)
    for meta in getattr(annotation, "__metadata__", ()) or ():
        out += _types(meta)
    origin = getattr(annotation, "__origin__", None)
    return [*out, origin] if origin is not None else out


def test_every_key_of_every_model_is_in_the_reference() -> None:
    text = reference.KEYS.read_text()
    models: set[str] = set()
    _models(Site, models)
    sections = {line[4:-1] for line in text.splitlines() if line.startswith("## `")}
    assert models - {"Site"} <= sections, models - sections
    from aisite import model

    for name in models - {"Site"}:
        section = text.split(f"## `{name}`", 1)[1].split("\n## ", 1)[0]
        for key, field in getattr(model, name).model_fields.items():
            assert f"| `{field.alias or key}` |" in section, (name, key)
    # The model's comments are the meaning: one said once, read from aisite/model/.
    assert "| `max_quarantined_racks` | integer | 1 | >= 0; <= 10000 | An NVL72 rack whose NVLink fabric" in text


def test_the_shipped_stacks_pass_the_schema_and_unknown_keys_do_not() -> None:
    validator = Draft202012Validator(json.loads(reference.SCHEMA.read_text()))
    assert len(STACKS) >= 5
    for path in STACKS:
        doc = yaml.safe_load(path.read_text())
        assert [e.message for e in validator.iter_errors(doc)] == [], path.name
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.lab.yaml").read_text())
    site = doc["config"]["aisite:site"]
    site["helth"] = {}  # a misspelt key
    site["health"] = {"max_quarantined_racks": -1}
    site["fabric"] = {"topology": "ring"}
    found = sorted(".".join(map(str, e.path)) for e in validator.iter_errors(doc))
    assert found == [
        "config.aisite:site",
        "config.aisite:site.fabric.topology",
        "config.aisite:site.health.max_quarantined_racks",
    ], found


def test_every_variable_the_code_names_and_every_state_path_is_on_the_environment_page() -> None:
    import re

    from aisite import paths

    page = reference.ENVIRONMENT.read_text()
    assert page == reference.environment_markdown(), "run: python -m aisite.reference --write"
    sources = [*(ROOT / "aisite").rglob("*.py"), *(ROOT / "scripts").iterdir(), ROOT / "Makefile", ROOT / ".ci" / "run"]
    named = {m for f in sources if f.is_file() for m in re.findall(r"\bAISITE_[A-Z0-9_]*[A-Z0-9]", f.read_text())}
    # AISITE_SECRET_ and AISITE_HOSTKEY_ are prefixes of names made per secret and per key type.
    missing = sorted(n for n in named if n not in page and not n.startswith(("AISITE_SECRET", "AISITE_HOSTKEY")))
    assert missing == [], missing
    functions = [n for n, v in vars(paths).items() if callable(v) and getattr(v, "__module__", "") == paths.__name__]
    assert functions and all(f"`paths.{n}`" in page for n in functions), functions
