"""Everything `aisite render` writes for a site, computed in memory first so bad input writes nothing."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from aisite.plan import Plan
from aisite.render.cabling import cables_csv, fabric_svg, racks_svg
from aisite.render.inventory import inventory_yaml
from aisite.render.manifests import gitops_files, manifest_files
from aisite.render.slurm import topology_conf


def bundle(plan: Plan) -> dict[str, str]:
    """Relative path -> content."""
    files = {
        "inventory.yml": inventory_yaml(plan),
        "plan.json": plan.to_json() + "\n",
    }
    files.update({f"manifests/{name}": text for name, text in manifest_files(plan).items()})
    files.update({f"gitops/{name}": text for name, text in gitops_files(plan).items()})
    files["cabling/cables.csv"] = cables_csv(plan)
    files["cabling/fabric.svg"] = fabric_svg(plan)
    if plan.power_racks:
        files["cabling/racks.svg"] = racks_svg(plan)
    if slurm := topology_conf(plan):
        files["slurm/topology.conf"] = slurm
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


# The file `aisite render` leaves in a directory it wrote: the one kind of existing directory it will replace.
MARKER = ".aisite-render"


class OutputError(Exception):
    """An output directory that render must not replace."""


def check_output(out: Path) -> None:
    """`--out` must be new, empty, or a directory render wrote before: it is replaced whole."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise OutputError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise OutputError(
            f"{out} is not empty and was not written by aisite render (no {MARKER}): it would be replaced whole; "
            "choose a new or empty directory"
        )


@contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A temporary directory beside `out` to render into; on success it replaces `out` whole (no stale file
    survives), on any failure it is removed and `out` is left as it was."""
    check_output(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.new-"))
    try:
        yield stage
        _confined(stage)
        (stage / MARKER).write_text("written by aisite render; replaced whole by the next render\n")
        os.chmod(stage, 0o755)
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        if out.exists():
            out.rename(old)
        try:
            stage.rename(out)
        except OSError:
            if old.exists():
                old.rename(out)
            raise
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _confined(stage: Path) -> None:
    # What was written under the stage is plain files and directories in it: no link leads out of it.
    root = stage.resolve()
    for path in stage.rglob("*"):
        if path.is_symlink() or not path.resolve().is_relative_to(root):
            raise OutputError(f"{path.relative_to(stage)} is a link or lies outside the output: nothing replaced")


def render_into(out: Path, files: dict[str, str], extra: Callable[[Path], None] | None = None) -> list[Path]:
    """Write `files` (and whatever `extra` renders into the stage) as the whole new content of `out`."""
    with staged(out) as stage:
        write_bundle(files, stage)
        if extra:
            extra(stage)
    return sorted(p for p in out.rglob("*") if p.is_file() and p.name != MARKER)
