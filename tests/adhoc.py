"""A project module run as Ansible runs it (ad hoc, on localhost), its result as JSON."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run_module(
    name: str, args: dict[str, Any], check: bool = False, *, library: Path | None = None, diff: bool = False
) -> dict[str, Any]:
    """`library`: a role's own modules (its library/ folder)."""
    env = os.environ | {
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_LOCALHOST_WARNING": "0",
    }
    cmd = [str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local", "-m", name]
    r = subprocess.run(
        [
            *cmd,
            "-a",
            json.dumps(args),
            *(["--check"] if check else []),
            *(["--diff"] if diff else []),
            *(["--module-path", str(library)] if library else []),
        ],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    doc = json.loads(r.stdout)
    result: dict[str, Any] = doc["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return result


def load_module(name: str) -> ModuleType:
    """A project module's source, imported as Ansible's collection loader would name it (its module_utils beside)."""
    collections = str(ROOT / "collections")
    if collections not in sys.path:
        sys.path.append(collections)
    return importlib.import_module(f"ansible_collections.aisite.site.plugins.modules.{name}")
