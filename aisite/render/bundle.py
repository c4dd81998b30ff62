"""Everything `aisite render` writes for a site, computed in memory first so bad input writes nothing."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from aisite.plan import Plan
from aisite.render.inventory import inventory_yaml
from aisite.render.manifests import gitops_files, manifest_files


def bundle(plan: Plan) -> dict[str, str]:
    """Relative path -> content."""
    files = {
        "inventory.yml": inventory_yaml(plan),
        "plan.json": json.dumps(plan.to_dict(), indent=2) + "\n",
    }
    files.update({f"manifests/{name}": text for name, text in manifest_files(plan).items()})
    files.update({f"gitops/{name}": text for name, text in gitops_files(plan).items()})
    return files


def write_bundle(files: dict[str, str], out: Path) -> list[Path]:
    """Write each file atomically (temp file + rename), so a reader never sees half a file."""
    written: list[Path] = []
    for rel, text in sorted(files.items()):
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        written.append(path)
    return written
