"""`aisite init`: a site repository of one's own."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from aisite.cli.common import EXIT_INVALID, JsonOpt, out
from aisite.init import check_name, example_stacks, init_site, wheel_of, wheel_problems


def init_command(  # noqa: PLR0917 - Typer passes every option positionally
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Where the site repository goes (made if missing).")],
    site: Annotated[
        str, typer.Option("--site", help="The site's name: its stack (stacks/Pulumi.SITE.yaml), its Pulumi stack.")
    ] = "example",
    example: Annotated[
        str | None,
        typer.Option(
            "--from", help="Start from a stack aisite ships (dc1, h100pod, gb200, ...) instead of the template."
        ),
    ] = None,
    wheel: Annotated[
        Path | None,
        typer.Option(help="The aisite wheel the site installs: requirements.txt names it by its sha256."),
    ] = None,
    wheel_url: Annotated[
        str | None, typer.Option(help="Where your team serves that wheel (https); default its file URL here.")
    ] = None,
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
    if example is not None and example not in example_stacks():
        problems.append(f"--from: {example!r} is not a shipped stack: {', '.join(example_stacks())}")
    problems += wheel_problems(wheel, wheel_url)
    if problems:
        for p in problems:
            print(p, file=sys.stderr)
        raise typer.Exit(EXIT_INVALID)
    done = init_site(directory, site, wheel_of(wheel, wheel_url) if wheel else None, example or "")
    if as_json:
        doc = {
            "root": str(done.root),
            "site": site,
            "written": done.written,
            "unchanged": done.unchanged,
            "kept": done.kept,
            "git": done.git,
            "pinned_by_digest": wheel is not None,
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
    if wheel is None:
        out.print(
            "[yellow]note[/]: requirements.txt names aisite by its version only; `--wheel PATH` names the exact wheel "
            "by its sha256, so no index is ever asked for a package called aisite"
        )
    out.print(
        f"\nNext, in {done.root}: edit stacks/Pulumi.{site}.yaml, then\n"
        f"  aisite validate {site}\n  aisite plan {site}\n  aisite render {site} --out rendered"
    )
