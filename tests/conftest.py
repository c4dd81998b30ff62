from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from aisite.loader import read_site_config, resolve_stack, stack_names

# CI replays the same examples every run (reproducible); a developer's run explores new ones.
settings.register_profile("ci", max_examples=60, derandomize=True, print_blob=True)
settings.register_profile("dev", max_examples=100)
settings.register_profile("deep", max_examples=1000)  # pytest --hypothesis-profile=deep, to hunt
settings.load_profile("ci" if os.environ.get("CI") else "dev")

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
    """The real `aisite` entry point in a subprocess, so exit codes and stderr are what a user gets.

    A whole-site deploy of the lab takes about 5 minutes on 2 cores (the podman connection costs ~2 s a task a
    host there): the limit only catches a hang."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("AISITE_", "PULUMI_"))}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "aisite", *args],
        cwd=ROOT,
        env=full_env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
