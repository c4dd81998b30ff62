"""The post-receive hook of a bare site repository: a push to the site's branch runs one reconcile pass."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from aisite.roots import SITE


def post_receive(stack: str, branch: str, allowed_signers: Path | None = None) -> str:
    """The hook's text. It runs this installation's aisite from its own directory with this interpreter, waits
    for a pass already running (pushes in a row are applied in turn), and reports the pass to whoever pushed."""
    signers = f" --allowed-signers {shlex.quote(str(allowed_signers.resolve()))}" if allowed_signers else ""
    return f"""#!/bin/sh
# Rendered by `aisite reconcile hook`: a push to {branch} reconciles stack {stack}.
set -u
repo=$(cd "${{GIT_DIR:-.}}" && pwd)
# The pass runs git in its own clone: none of this repository's GIT_* variables may reach it.
unset $(git rev-parse --local-env-vars)
run=0
while read -r old new ref; do
  [ "$ref" = "refs/heads/{branch}" ] && run=1
done
[ "$run" = 1 ] || exit 0
cd {shlex.quote(str(SITE))} || exit 1
exec {shlex.quote(sys.executable)} -m aisite --site-dir {shlex.quote(str(SITE))} reconcile {shlex.quote(stack)} \\
  --repo "$repo" --branch {shlex.quote(branch)} --once --wait{signers}
"""
