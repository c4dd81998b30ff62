"""Loading a stack file into a validated Site: YAML, then the typed model, then the cross-field checks."""

from __future__ import annotations

import copy
import difflib
import json
import math
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from aisite import model
from aisite.checks import check_site
from aisite.errors import Problem, SiteError, join_path
from aisite.fields import CONTROL
from aisite.roots import SITE
from aisite.schema import SITE_KEY

CONFIG_KEY = SITE_KEY
# The site repository's stacks (aisite.roots: the current one, or the tool's checkout for the lab).
STACKS_DIR = SITE / "stacks"
_SECRET_WORDS = ("password", "passwd", "secret", "token")
# Limits on a stack file before it is parsed into a model (README, "Inputs"): a real site's file is tens of KiB,
# a few levels deep. Past these it is refused, not parsed: a YAML bomb of aliases or nesting costs nothing.
MAX_STACK_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 24
MAX_VALUES = 1_000_000
# Keys whose values may span lines (PEM certificates); every other string is one line without control characters.
_MULTILINE_KEYS = frozenset({"ca"})
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StackLoader(_Loader):  # type: ignore[misc]
    """A safe loader that notes every key given twice in one mapping (YAML would keep the last one silently: two
    `secrets.bmc` entries would become one)."""

    duplicates: list[tuple[int, str]]

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) or key is None:
                if key in seen:
                    self.duplicates.append((key_node.start_mark.line + 1, str(key)))
                seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


# YAML 1.2's core schema, as Pulumi's reader and the JSON Schema's validators read a stack. Booleans are `true` and
# `false` only: YAML 1.1's yes/no/on/off stay text (`power: on` is "on"). Integers are decimal, 0o octal or 0x hex:
# 1.1's sexagesimal made a MAC such as 10:20:30:40:50:55 the number 3,906,645,055 and `0755` octal. A date is text.
_YAML11 = ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:timestamp")
_StackLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _YAML11]
    for first, resolvers in _Loader.yaml_implicit_resolvers.items()
}
_StackLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_StackLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
)
_StackLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+.0123456789"),
)


def _yaml12_int(loader: Any, node: yaml.ScalarNode) -> int:
    text = str(loader.construct_scalar(node))
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text, 10)


_StackLoader.add_constructor("tag:yaml.org,2002:int", _yaml12_int)


def resolve_stack(stack: str) -> Path:
    """A stack name under stacks/ (`lab`) or a path to a stack file."""
    candidate = Path(stack)
    if candidate.suffix in (".yaml", ".yml") or "/" in stack:
        return candidate
    return STACKS_DIR / f"Pulumi.{stack}.yaml"


def stack_names() -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in STACKS_DIR.glob("Pulumi.*.yaml"))


def read_site_config(path: Path) -> dict[str, Any]:
    src = str(path)
    if not path.is_file():
        if not STACKS_DIR.is_dir():
            where = f"{SITE} is not a site repository (no stacks/): `aisite init DIR` makes one; --site-dir names one"
        else:
            where = f"known stacks in {STACKS_DIR}: {', '.join(stack_names()) or 'none'}"
        raise SiteError(src, [Problem(src, f"no such stack file ({where})")])
    size = path.stat().st_size
    if size > MAX_STACK_BYTES:
        raise SiteError(src, [Problem(src, f"{size} bytes: a stack file is at most {MAX_STACK_BYTES} bytes")])
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SiteError(src, [Problem(src, f"not UTF-8 text (byte {exc.start})")]) from None
    return site_config_of(text, src)


def site_config_of(text: str, src: str) -> dict[str, Any]:
    """The site mapping of a stack file's text, read as every command reads it (YAML 1.2, keys given once)."""
    try:
        _check_depth(text, src)
        loader = _StackLoader(text)  # a safe loader: plain data only
        loader.duplicates = []
        try:
            doc = loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{src}:{mark.line + 1}:{mark.column + 1}" if mark else src
        raise SiteError(src, [Problem(where, f"not valid YAML: {getattr(exc, 'problem', exc)}")]) from None
    if loader.duplicates:
        raise SiteError(
            src,
            [
                Problem(f"{src}:{line}", f"key {key!r} is given twice in one mapping")
                for line, key in sorted(loader.duplicates)
            ],
        )
    config = doc.get("config") if isinstance(doc, dict) else None
    site = config.get(CONFIG_KEY) if isinstance(config, dict) else None
    if not isinstance(site, dict):
        raise SiteError(src, [Problem("config", f"{src} has no mapping at config.{CONFIG_KEY!r}")])
    return site


def _check_depth(text: str, src: str) -> None:
    """Nesting is measured on the event stream, before any object is built (the composer recurses per level)."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark else 0
                raise SiteError(src, [Problem(f"{src}:{line}", f"nested deeper than {MAX_DEPTH} levels: refused")])
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def raw_problems(data: Any) -> list[Problem]:
    """What is wrong with a site's data before its model sees it: too many values (YAML aliases expand), too deep,
    keys that are not strings, control characters in any key or string (a newline is allowed only in a PEM `ca`).
    Iterative and bounded: a hostile document cannot make this recurse or run long."""
    problems: list[Problem] = []
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    seen = 0
    while stack:
        value, loc = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            return [Problem("site", f"more than {MAX_VALUES} values (after YAML aliases): refused")]
        if len(loc) > MAX_DEPTH:
            return [Problem(join_path("site", *loc[:MAX_DEPTH]), f"nested deeper than {MAX_DEPTH} levels")]
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    problems.append(Problem(join_path("site", *loc), f"key {key!r} is not a string"))
                    continue
                if CONTROL.search(key):
                    problems.append(Problem(join_path("site", *loc), f"key {key!r} has control characters"))
                    continue
                stack.append((item, (*loc, key)))
        elif isinstance(value, list):
            stack.extend((item, (*loc, i)) for i, item in reversed(list(enumerate(value))))
        elif value is not None and not isinstance(value, (str, int, float)):
            # An explicit YAML tag (!!binary, !!set, !!timestamp): not something JSON, Pulumi or the schema holds.
            problems.append(Problem(join_path("site", *loc), f"a {type(value).__name__} is not a stack value"))
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(Problem(join_path("site", *loc), f"{value!r} is not a finite number"))
        elif isinstance(value, str):
            text = value.replace("\n", "") if loc and loc[-1] in _MULTILINE_KEYS else value
            if CONTROL.search(text):
                problems.append(Problem(join_path("site", *loc), f"{value[:60]!r} has control characters"))
    return sorted(problems, key=lambda p: p.path)


def _known_fields(cls: type[BaseModel], seen: set[str]) -> None:
    for name, info in cls.model_fields.items():
        seen.add(name)
        for arg in _model_args(info.annotation):
            if arg.__name__ not in seen:
                seen.add(arg.__name__)
                _known_fields(arg, seen)


def _model_args(tp: Any) -> list[type[BaseModel]]:
    out: list[type[BaseModel]] = []
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        out.append(tp)
    for arg in getattr(tp, "__args__", ()) or ():
        out.extend(_model_args(arg))
    return out


_FIELDS: set[str] = set()
_known_fields(model.Site, _FIELDS)


def _fields_at(loc: tuple[Any, ...]) -> set[str]:
    """The keys the model at `loc` accepts (its siblings suggest a misspelt key best); empty if it cannot be told."""
    models: list[type[BaseModel]] = [model.Site]
    for part in loc:
        if not isinstance(part, str):
            continue  # a list index or dict key: the same models hold the item
        owner = next((m for m in models if part in m.model_fields), None)
        if owner is None:
            return set()
        models = _model_args(owner.model_fields[part].annotation)
    return {f for m in models for f in m.model_fields}


def _message(err: Any) -> str:
    kind = err["type"]
    key = err["loc"][-1] if err["loc"] else ""
    if kind == "extra_forbidden":
        if isinstance(key, str) and any(w in key.lower() for w in _SECRET_WORDS):
            return (
                f"unknown key {key!r}: secrets are never written in a stack file; reference a secret declared "
                "under site.secrets (its password_from names an env variable, Pulumi secret or vault file)"
            )
        close = difflib.get_close_matches(str(key), _fields_at(err["loc"][:-1]) or _FIELDS, n=1)
        return f"unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
    if kind == "missing":
        return "required key is missing"
    msg: str = err["msg"]
    if msg.startswith("Value error, "):
        return msg[len("Value error, ") :]
    value = err.get("input")
    if not isinstance(value, (dict, list)):
        msg += f" (got {value!r})"
    if isinstance(value, bool) and kind in _TEXT_ERRORS:
        msg += ": YAML reads an unquoted true or false as a boolean; quote it"
    elif isinstance(value, str) and kind in _NUMBER_ERRORS:
        msg += ": a number or boolean is written without quotes"
    return msg


# Where a boolean came in for text, and text for a number or boolean: the stack is read as JSON is (strictly), so a
# quoted "64" is not 64 (the JSON Schema says the same).
_TEXT_ERRORS = frozenset({"string_type", "literal_error", "enum", "ip_v4_address", "ip_v4_network"})
_NUMBER_ERRORS = frozenset({"int_type", "float_type", "bool_type", "int_parsing", "float_parsing", "bool_parsing"})


def parse_site(data: dict[str, Any], source: str = "<site>") -> model.Site:
    """The typed Site, or SiteError listing every problem: shape errors first, cross-field checks when shapes pass."""
    raw = raw_problems(data)
    if raw:
        raise SiteError(source, raw)
    try:
        site = _validate(data)
    except ValidationError as exc:
        problems = [Problem(join_path("site", *err["loc"]), _message(err)) for err in exc.errors()]
        raise SiteError(source, problems + _checks_without(data, exc)) from None
    problems = check_site(site)
    if problems:
        raise SiteError(source, problems)
    return site


def _validate(data: dict[str, Any]) -> model.Site:
    # Strictly, as JSON: the coercions the JSON Schema describes and no others (no "64" for 64, no "yes" for true),
    # so the schema and the validator agree (tests/test_schema.py).
    return model.Site.model_validate_json(json.dumps(data), strict=True)


def _checks_without(data: dict[str, Any], exc: ValidationError) -> list[Problem]:
    """The cross-key checks, run on what parsed, so one bad value does not hide the rest: each key that did not
    parse is left out where the model can do without it (an optional key, a map's entry), the checks run on the
    rest and say what they left out; where a key it cannot do without failed, they say they did not run."""
    left_out: set[tuple[str | int, ...]] = set()
    for err in exc.errors():
        at = _optional_prefix(tuple(err["loc"]))
        if at is None:
            return [Problem("site", f"cross-key checks not run: {join_path('site', *err['loc'])} is required")]
        left_out.add(at)
    trimmed = copy.deepcopy(data)
    for at in sorted(left_out, key=len, reverse=True):
        parent: Any = trimmed
        for part in at[:-1]:
            if isinstance(parent, dict):
                parent = parent.get(part)
            elif isinstance(parent, list) and isinstance(part, int) and 0 <= part < len(parent):
                parent = parent[part]
            else:
                parent = None
        if isinstance(parent, dict):
            parent.pop(at[-1], None)
    paths = sorted(join_path("site", *at) for at in left_out)
    try:
        site = _validate(trimmed)
    except ValidationError:
        return [Problem("site", f"cross-key checks not run: the site does not parse without {', '.join(paths)}")]
    found = [p for p in check_site(site) if not any(p.path.startswith(x) or x in p.message for x in paths)]
    if not found:
        return []
    return [*found, Problem("site", f"cross-key checks ran without {', '.join(paths)}: they did not parse")]


def _optional_prefix(loc: tuple[Any, ...]) -> tuple[str | int, ...] | None:
    """`loc` itself when the model can do without it (an optional key, whose default then stands, or a key it does
    not know); None otherwise. Nothing above it is left out: a section or map entry gone would make the checks
    report what refers to it (a secret used but not declared), which is not the site's problem."""
    models: list[type[BaseModel]] = [model.Site]
    for i, part in enumerate(loc):
        if not isinstance(part, str):
            continue  # a list index or map key: the same models hold the item
        owner = next((m for m in models if part in m.model_fields), None)
        if owner is None:
            known = {f for m in models for f in m.model_fields}
            # A key no model here knows at the end of the path: an unknown key, removable. Else a map's key.
            if i == len(loc) - 1 and known:
                return loc
            continue
        if i == len(loc) - 1:
            return loc if not owner.model_fields[part].is_required() else None
        models = _model_args(owner.model_fields[part].annotation)
    return None


def load_site(stack: str | Path) -> model.Site:
    path = resolve_stack(str(stack))
    return parse_site(read_site_config(path), str(path))
