"""`aisite init`: a site repository of one's own."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from aisite.cli.common import EXIT_INVALID, JsonOpt, out
from aisite.init import check_name, init_site


def init_command(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Where the site repository goes (made if missing).")],
    site: Annotated[
        str, typer.Option("--site", help="The site's name: its stack (stacks/Pulumi.SITE.yaml), its Pulumi stack.")
    ] = "example",
    as_json: JsonOpt = False,
) -> None:
    """Make a site repository: a commented example stack, the Pulumi project that imports aisite, .gitignore, CI
    templates and a README. Files already there are kept as they are; run it again to add what is missing."""
    problems = []
    why = check_name(site)
    if why:
        problems.append(f"--site: {why}")
    if directory.exists() and not directory.is_dir():
        problems.append(f"DIR: {directory} is not a directory")
    if problems:
        for p in problems:
            print(p, file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    done = init_site(directory, site)
    if as_json:
        doc = {
            "root": str(done.root),
            "site": site,
            "written": done.written,
            "unchanged": done.unchanged,
            "kept": done.kept,
            "git": done.git,
        }
        print(json.dumps(doc, indent=2))
        return
    for rel in done.written:
        out.print(f"[green]wrote[/] {rel}")
    for rel in done.unchanged:
        out.print(f"unchanged {rel}")
    for rel in done.kept:
        out.print(f"[yellow]kept[/] {rel} (there already, not the template's: left as it is)")
    out.print(done.git)
    out.print(
        f"\nNext, in {done.root}: edit stacks/Pulumi.{site}.yaml, then\n"
        f"  aisite validate {site}\n  aisite plan {site}\n  aisite render {site} --out rendered"
    )
