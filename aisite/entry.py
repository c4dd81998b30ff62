"""The `aisite` command's entry point. `--site-dir DIR` names the site repository; it is read here, before any
module computes its paths from the site's root (aisite.roots), and handed down to every child process."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from aisite import SITE_DIR_ENV

SITE_DIR_OPTION = "--site-dir"


def site_dir_arg(argv: list[str]) -> str | None:
    """The value of --site-dir among the options before the command (where the top-level options go)."""
    for i, arg in enumerate(argv):
        if not arg.startswith("-"):
            return None
        if arg == SITE_DIR_OPTION:
            return argv[i + 1] if i + 1 < len(argv) else ""
        if arg.startswith(SITE_DIR_OPTION + "="):
            return arg.split("=", 1)[1]
    return None


def main() -> None:
    chosen = site_dir_arg(sys.argv[1:])
    if chosen is not None:
        if not chosen or not Path(chosen).is_dir():
            print(f"{SITE_DIR_OPTION}: {chosen!r} is not a directory", file=sys.stderr)
            sys.exit(2)
        os.environ[SITE_DIR_ENV] = str(Path(chosen).resolve())
    from aisite.cli import main as cli_main  # after the site is chosen: modules read it on import

    cli_main()
