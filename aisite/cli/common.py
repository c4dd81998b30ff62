"""What every `aisite` command shares: the Typer app, the consoles, exit codes, loading a stack."""

from __future__ import annotations

import importlib.metadata
import json
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from typer import core as typer_core

from aisite.errors import SiteError
from aisite.loader import load_site, resolve_stack, stack_names
from aisite.model import Site
from aisite.plan import Plan, build_plan
from aisite.playbooks import LAYERS, OPTIONAL_LAYERS
from aisite.repo import GitError, file_at

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2

# Help names a value's kind as a terminal's help does (TEXT, FLOAT, PATH, a choice's words) and a flag by its name
# alone: typer 0.29's own `<str>` and `<bool>` read as markup, in a terminal and piped. Its display_type is the one
# place every option and argument is shown through (typer is pinned: a new version is checked by test_cli).
_typer_display_type = typer_core._TyperParameter.display_type
_TYPE_WORDS = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "bool": "BOOLEAN"}


def _display_type(self: Any, ctx: Any) -> str:
    if getattr(self, "is_flag", False):
        return ""
    label = str(_typer_display_type(self, ctx)).removeprefix("<").removesuffix(">")
    return label if "|" in label else _TYPE_WORDS.get(label, label.upper())


typer_core._TyperParameter.display_type = _display_type  # type: ignore[method-assign]

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="An on-prem AI cluster site, as code.",
    # -h as well as --help, on every command (click hands the names down to the subcommands' contexts).
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"aisite {importlib.metadata.version('aisite')}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _options(
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    site_dir: Annotated[
        Path | None,
        typer.Option(
            "--site-dir",
            metavar="DIR",
            help="The site repository (stacks/, .aisite/): default $AISITE_SITE_DIR, else the one the current "
            "directory is in, else the tool's checkout. Read before the command (aisite.entry).",
        ),
    ] = None,
) -> None:
    """An on-prem AI cluster site, as code."""


# Piped output (logs, CI) is not cut to 80 columns.
out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


def complete_stack(incomplete: str) -> list[str]:
    """Shell completion of a STACK: the site repository's stack names."""
    return [name for name in stack_names() if name.startswith(incomplete)]


def complete_layer(incomplete: str) -> list[str]:
    """Shell completion of --layer: every layer a deploy runs, then those it runs only when asked."""
    return [name for name in (*LAYERS, *OPTIONAL_LAYERS) if name.startswith(incomplete)]


StackArg = Annotated[
    str,
    typer.Argument(
        help="A stack name under stacks/ (e.g. lab) or a path to a stack file.", autocompletion=complete_stack
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for programs instead of tables.")]


def invalid(exc: SiteError, as_json: bool = False) -> typer.Exit:
    if as_json:
        doc = {
            "valid": False,
            "source": exc.source,
            "errors": [{"path": p.path, "message": p.message} for p in exc.problems],
        }
        print(json.dumps(doc, indent=2))
    # One problem per line, plain text, so editors and scripts can parse them.
    print(f"error: {exc.source}: {len(exc.problems)} problem(s)", file=sys.stderr)
    for p in exc.problems:
        print(str(p), file=sys.stderr)
    return typer.Exit(EXIT_INVALID)


def load_plan(stack: str, as_json: bool = False) -> Plan:
    return load_site_plan(stack, as_json)[1]


def load_site_plan(stack: str, as_json: bool = False) -> tuple[Site, Plan]:
    try:
        site = load_site(stack)
    except SiteError as exc:
        raise invalid(exc, as_json) from None
    return site, build_plan(site)


def load_plan_at(stack: str, revision: str, as_json: bool = False) -> Plan:
    """The plan of the stack's file as it was at a Git revision (what `diff` and `maintenance start` compare
    the working tree with); a revision that is not there is invalid input (exit 2)."""
    path = resolve_stack(stack)
    try:
        text = file_at(path, revision)
    except GitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID) from None
    with tempfile.TemporaryDirectory(prefix="aisite-at-") as tmp:
        old = Path(tmp) / path.name
        old.write_text(text)
        return load_plan(str(old), as_json)
