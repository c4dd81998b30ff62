"""Re-render manifests/<site>/ for every stack under stacks/ (`make manifests`)."""

from __future__ import annotations

import shutil
from pathlib import Path

from aisite.loader import load_site, stack_names
from aisite.plan import Plan, build_plan
from aisite.render.bundle import write_bundle
from aisite.render.manifests import gitops_files, manifest_files
from aisite.roots import SITE


def rendered(plan: Plan) -> dict[str, dict[str, str]]:
    """A site's directories under manifests/ and their files."""
    return {plan.site: manifest_files(plan), f"gitops/{plan.site}": gitops_files(plan)}


def write(root: Path, dirs: dict[str, dict[str, str]]) -> dict[str, int]:
    """Replace those directories under root/manifests/ (the repository's own, or a test's or bench's site); the
    files written in each."""
    counts = {}
    for site, files in dirs.items():
        site_dir = root / "manifests" / site
        shutil.rmtree(site_dir, ignore_errors=True)
        counts[site] = len(write_bundle(files, site_dir)) if files else 0
    return counts


def main() -> None:
    # Every stack rendered first: a stack that fails to render leaves every committed directory as it was.
    dirs: dict[str, dict[str, str]] = {}
    for stack in stack_names():
        dirs |= rendered(build_plan(load_site(stack)))
    for site, count in write(SITE, dirs).items():
        if count:
            print(f"manifests/{site}: {count} file(s)")


if __name__ == "__main__":
    main()
