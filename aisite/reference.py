"""The stack file's reference, from the model itself: every key with its type, default, constraints and what it
means (the comment above its field in aisite/model/), and the JSON Schema an editor checks and completes stack
files with. Both are generated (`python -m aisite.reference --write`) into docs/ and a test keeps them current."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from aisite.schema import SITE_KEY, schema

DOCS = Path(__file__).resolve().parent.parent / "docs"
KEYS = DOCS / "reference" / "stack-keys.md"
SCHEMA = DOCS / "reference" / "stack.schema.json"


def _type(node: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in node:
        return str(node["$ref"]).rsplit("/", 1)[1]
    if "enum" in node:
        return " | ".join(json.dumps(v) for v in node["enum"])
    if "const" in node:
        return json.dumps(node["const"])
    for union in ("anyOf", "oneOf"):
        if union in node:
            return " | ".join(_type(n, defs) for n in node[union])
    kind = node.get("type", "any")
    if kind == "array":
        return f"list[{_type(node.get('items', {}), defs)}]"
    if kind == "object" and "additionalProperties" in node and isinstance(node["additionalProperties"], dict):
        return f"map[str, {_type(node['additionalProperties'], defs)}]"
    return str(kind)


CONSTRAINTS = (
    ("minimum", ">= {}"),
    ("exclusiveMinimum", "> {}"),
    ("maximum", "<= {}"),
    ("exclusiveMaximum", "< {}"),
    ("minLength", "length >= {}"),
    ("maxLength", "length <= {}"),
    ("minItems", "items >= {}"),
    ("maxItems", "items <= {}"),
    ("pattern", "matches `{}`"),
)


def _constraints(node: dict[str, Any]) -> str:
    found = [fmt.format(node[k]) for k, fmt in CONSTRAINTS if k in node]
    for union in ("anyOf", "oneOf"):
        for n in node.get(union, []):
            found += [fmt.format(n[k]) for k, fmt in CONSTRAINTS if k in n]
    return "; ".join(found)


def _default(value: Any) -> str:
    # An object's own keys say their defaults in its section; a long one here would say it twice.
    if isinstance(value, dict) and value:
        return "its keys' defaults"
    return json.dumps(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def keys_markdown() -> str:
    """Every key of a site, as a table per section, each object type once (in the order they are first met)."""
    s = schema()
    defs = s["$defs"]
    root = s["properties"]["config"]["properties"][SITE_KEY]
    out = [
        "# Stack file keys",
        "",
        "Generated from `aisite/model/` by `python -m aisite.reference --write` (a test keeps it current); the",
        "JSON Schema beside it (`stack.schema.json`) is the same, for editors. A stack file holds the site under",
        f"`config: {SITE_KEY}:`. Every key not marked required has the default shown; a key the model does not know",
        "is refused.",
        "",
    ]
    todo: list[tuple[str, dict[str, Any]]] = [("site", root)]
    seen: set[str] = set()
    while todo:
        title, node = todo.pop(0)
        required = set(node.get("required", []))
        out += [f"## `{title}`", ""]
        if node.get("description"):
            out += [_cell(node["description"]), ""]
        out += ["| key | type | default | constraints | meaning |", "|---|---|---|---|---|"]
        for key, prop in node.get("properties", {}).items():
            default = "required" if key in required else _default(prop.get("default"))
            out.append(
                f"| `{key}` | {_cell(_type(prop, defs))} | {_cell(default)} | {_cell(_constraints(prop))} "
                f"| {_cell(prop.get('description', ''))} |"
            )
            for ref in _refs(prop):
                if ref not in seen:
                    seen.add(ref)
                    todo.append((ref, defs[ref]))
        out.append("")
    return "\n".join(out)


def _refs(node: Any) -> list[str]:
    """The object types a key's value may be, in the order they appear."""
    if isinstance(node, dict):
        found = [node["$ref"].rsplit("/", 1)[1]] if isinstance(node.get("$ref"), str) else []
        for v in node.values():
            found += [r for r in _refs(v) if r not in found]
        return found
    if isinstance(node, list):
        out: list[str] = []
        for v in node:
            out += [r for r in _refs(v) if r not in out]
        return out
    return []


ENVIRONMENT = DOCS / "reference" / "environment.md"
MODULES = DOCS / "reference" / "modules.md"
# What the CLI and the project's scripts read from the environment (a test holds every AISITE_ variable the code
# names to this list), and what aisite sets itself for the programs it runs.
VARIABLES = (
    (
        "(each `secrets.<name>.password_from.env`)",
        "you",
        "A secret's value, named by the stack (the lab's BMC "
        "password: `AISITE_LAB_BMC_PASSWORD`, which `make lab` generates into `.aisite/lab/bmc-password`).",
    ),
    (
        "AISITE_BENCH_BMC",
        "you",
        "The BMC password of the generated sites `make bench` validates (never used to reach one).",
    ),
    (
        "AISITE_SITE_DIR",
        "you, aisite",
        "The site repository (stacks/, .aisite/): what `aisite --site-dir DIR` sets for itself and its children; "
        "the reconciler sets it to the checkout it deploys from. Unset: the site repository the current directory "
        "is in (a directory with stacks/ and Pulumi.yaml), else the tool's checkout.",
    ),
    ("ANSIBLE_VAULT_PASSWORD_FILE", "you", "The file with the password of a secret's `password_from.vault_file`."),
    (
        "AISITE_LAB_MIRROR",
        "you",
        "The Debian mirror the lab's images are built from (default http://deb.debian.org/debian).",
    ),
    ("AISITE_LAB_VM_ACCEL", "you", "`kvm` to run the lab's VM nodes under KVM where /dev/kvm exists (default tcg)."),
    (
        "XDG_CACHE_HOME",
        "you",
        "The cache the OS images `aisite provision` builds go under (`$XDG_CACHE_HOME/aisite/images`, "
        "default ~/.cache).",
    ),
    (
        "AISITE_SONIC_YANG",
        "you",
        "scripts/sonic-yang.sh: where SONiC's YANG models are (default ../shared/sonic-yang).",
    ),
    (
        "AISITE_ITEST_REUSE_LAB",
        "you (CI)",
        "`1`: the lab integration tests use the running lab and its deploy (`make lab`'s).",
    ),
    (
        "AISITE_ITEST_ROTATE",
        "you (CI)",
        "`1`: the costliest lab scenario groups take turns, one a day (tests/conftest.py).",
    ),
    (
        "AISITE_TEST_PART",
        "you (CI)",
        "`make test`'s part: `all` (default), `unit` (the linters, molecule and every test file but the lab "
        "integration tests) or `lab` (those alone); CI runs the unit part beside `make lab`, the lab part after.",
    ),
    ("PYTEST_WORKERS", "you", "`make test`'s pytest workers (default 2; its lab part: 1)."),
    ("AISITE_MOLECULE_JOBS", "you", "Molecule scenarios run at once (scripts/molecule.sh: 2; `make test`: 1)."),
    (
        "AISITE_MOLECULE_ALL",
        "you",
        "`1`: `make test` runs every molecule scenario, not only those whose inputs changed.",
    ),
    ("AISITE_MOLECULE_STALE_DAYS", "you", "A molecule pass older than this many days runs again (14)."),
    ("AISITE_MOLECULE_REFRESH", "you", "How many of those stale passes one `make test` runs again (1)."),
    ("AISITE_MOLECULE_CHANGED_ONLY", "make test", "Set by scripts/test.sh: molecule.sh runs the changed scenarios."),
    (
        "AISITE_NODE_IMAGE, AISITE_FRR_IMAGE, AISITE_MOLECULE_INSTANCE",
        "molecule.sh",
        "The lab images and the instance name a scenario runs with.",
    ),
    ("AISITE_SECRET_<NAME>", "aisite", "Each secret's value, handed to Ansible in its environment (never in a file)."),
    (
        "AISITE_STEP, AISITE_URL, AISITE_NODES, AISITE_WORKLOAD, AISITE_BOOT_CONTROLLER_TOKEN, AISITE_HOSTKEY_<KEY>",
        "aisite",
        "Set by aisite in what it runs: a job's pods, a reconcile step, a node's installer.",
    ),
    ("CONTAINERS_CONF", "aisite", "aisite/lab/containers.conf, for every podman the lab runs."),
)


def _first_sentence(doc: str | None) -> str:
    text = " ".join((doc or "").split())
    return text.split(". ")[0].rstrip(".") + "." if text else ""


def environment_markdown() -> str:
    """What the CLI reads beside the stack: the environment, and the files under .aisite/ (aisite/paths.py)."""
    import inspect

    from aisite import paths

    out = [
        "# What aisite reads: the environment and its files",
        "",
        "Generated by `python -m aisite.reference --write` (the files from `aisite/paths.py`); a test keeps it",
        "current. A stack is read from `stacks/Pulumi.<name>.yaml` or the path given.",
        "",
        "## Environment variables",
        "",
        "| variable | set by | what for |",
        "|---|---|---|",
    ]
    out += [f"| `{name}` | {who} | {_cell(what)} |" for name, who, what in VARIABLES]
    out += [
        "",
        "## Files under `.aisite/` (this machine's, git-ignored)",
        "",
        f"`SITE` is the site's name, `STACK` the stack's. The state root is `{paths.STATE.name}/` in the site "
        "repository (`AISITE_SITE_DIR` above).",
        "",
        "| path | what | from |",
        "|---|---|---|",
    ]
    for name, fn in inspect.getmembers(paths, inspect.isfunction):
        if fn.__module__ != paths.__name__:
            continue
        params = list(inspect.signature(fn).parameters)
        if len(params) != 1:
            continue
        where = fn(params[0].upper())
        shown = str(
            where.relative_to(paths.STATE.resolve())
            if where.is_absolute() and where.is_relative_to(paths.STATE.resolve())
            else where.relative_to(paths.STATE)
        )
        out.append(f"| `.aisite/{shown}` | {_cell(_first_sentence(fn.__doc__))} | `paths.{name}` |")
    out += [
        f"| `.aisite/{paths.CACHE.relative_to(paths.STATE)}` | The lab images' build contexts and rootfs. "
        "| `paths.CACHE` |",
        "| `$XDG_CACHE_HOME/aisite/images` | The OS images `aisite provision` installs, shared by every clone. "
        "| `paths.IMAGES` |",
        "",
    ]
    return "\n".join(out)


def modules_markdown() -> str:
    """aisite's packages in the order they import one another, and every module with what it holds."""
    from aisite import modules

    known = modules.modules()
    graph = modules.module_graph(known)
    packages = modules.package_graph(graph)
    out = [
        "# aisite's modules",
        "",
        "Generated by `python -m aisite.reference --write` from each module's docstring and the imports between them",
        "(aisite/modules.py); a test keeps it current, and tests/test_imports.py keeps the imports one way.",
        "",
        "## Packages, lowest first",
        "",
        "Each row imports only from the rows above it (a top-level module counts as a package of its own).",
        "",
        "| level | packages |",
        "|---|---|",
    ]
    for i, layer in enumerate(modules.layers(packages)):
        out.append(f"| {i} | {', '.join(f'`{p}`' for p in layer)} |")
    out += ["", "## Modules", "", "| module | what it holds |", "|---|---|"]
    root = known["aisite"].parent.parent
    for path in known.values():
        out.append(f"| `{path.relative_to(root)}` | {_cell(modules.summary(path))} |")
    return "\n".join([*out, ""])


def write() -> list[Path]:
    KEYS.parent.mkdir(parents=True, exist_ok=True)
    KEYS.write_text(keys_markdown())
    SCHEMA.write_text(json.dumps(schema(), indent=2, sort_keys=False) + "\n")
    ENVIRONMENT.write_text(environment_markdown())
    MODULES.write_text(modules_markdown())
    return [KEYS, SCHEMA, ENVIRONMENT, MODULES]


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        print("usage: python -m aisite.reference --write", file=sys.stderr)
        sys.exit(2)
    for p in write():
        print(p)
