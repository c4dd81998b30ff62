"""The lab's generated BMC password (`make lab`): one every BMC of the lab stack accepts, kept in a 0600 file.

    python -m aisite.lab.password .aisite/lab/bmc-password [STACK]

A file left by an earlier version that the BMCs would refuse (24 characters: more than IPMI's 20 bytes) is
replaced, saying why; `lab up` then reconfigures the emulators for the new password.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from aisite.errors import Problem
from aisite.lab.bmc import emulator_problems
from aisite.loader import load_site
from aisite.plan import build_plan
from aisite.secrets import resolve, username_of

# 16 characters of [A-Za-z0-9_-] (96 bits): within IPMI 1.5's 16 bytes and 2.0's 20, plain ASCII for Redfish.
LENGTH_BYTES = 12
# What scripts/lab.sh hands the file's content to aisite as (the lab stack's password_from).
ENV = "AISITE_LAB_BMC_PASSWORD"


def generate() -> str:
    return secrets.token_urlsafe(LENGTH_BYTES)


def refusals(stack: str, password: str) -> list[Problem]:
    """Why the stack's BMCs (or their emulators) would refuse `password` for the secrets it is given to: what
    `deploy` and `lab up` would say, resolved the same way."""
    plan = build_plan(load_site(stack))
    fed = [name for name, src in plan.secrets.items() if src.get("env") == ENV]
    _, problems = resolve(plan, environ={ENV: password})
    mine = [p for p in problems if p.path in {f"site.secrets.{name}" for name in fed}]
    return mine + [p for name in fed for p in emulator_problems(name, username_of(plan, name), password)]


def ensure(path: Path, stack: str = "lab") -> str | None:
    """Keep a good password file, or write a new one; returns what was done when it was not kept as it was."""
    if path.is_file() and path.read_text().strip():
        problems = refusals(stack, path.read_text().strip())
        if not problems:
            return None
        why = "; ".join(p.message for p in problems)
        action = f"replaced {path}, which the lab's BMCs would refuse ({why})"
    else:
        action = f"generated the lab's BMC password into {path} (0600, git-ignored)"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(generate() + "\n")
    tmp.replace(path)
    return action


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__, file=sys.stderr)
        return 2
    said = ensure(Path(argv[0]), *argv[1:])
    if said:
        print(f"lab: {said}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
