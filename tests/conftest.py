from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aisite.loader import read_site_config, resolve_stack, stack_names

ROOT = Path(__file__).resolve().parent.parent
STACKS = stack_names()


def stack_data(stack: str) -> dict[str, Any]:
    return copy.deepcopy(read_site_config(resolve_stack(stack)))


@pytest.fixture
def lab() -> dict[str, Any]:
    """The lab stack's site mapping, a fresh copy to mutate."""
    return stack_data("lab")


def run_cli(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The real `aisite` entry point in a subprocess, so exit codes and stderr are what a user gets."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("AISITE_", "PULUMI_"))}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "aisite", *args],
        cwd=ROOT,
        env=full_env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
