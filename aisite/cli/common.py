"""What every `aisite` command shares: the Typer app, the consoles, exit codes, loading a stack."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.console import Console

from aisite.errors import SiteError
from aisite.loader import load_site
from aisite.model import Site
from aisite.plan import Plan, build_plan

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
LAYERS = ("oob", "fabric", "hosts", "cluster", "platform", "workloads")
# Playbooks run only when asked (`deploy --layer NAME`), not by a whole-site deploy or --changed.
OPTIONAL_LAYERS = ("reconciler", "pull")

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="An on-prem AI cluster site, as code.",
)
# Piped output (logs, CI) is not cut to 80 columns.
out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

StackArg = Annotated[str, typer.Argument(help="A stack name under stacks/ (e.g. lab) or a path to a stack file.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for programs instead of tables.")]


def group_sizes(inv: dict[str, Any]) -> dict[str, int]:
    """Hosts per inventory group: how the progress bars know each play's host count."""
    return {name: len(g["hosts"]) for name, g in inv["all"]["children"].items()}


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
