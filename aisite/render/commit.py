"""Re-render manifests/<site>/ for every stack under stacks/ (`make manifests`)."""

from __future__ import annotations

import shutil

from aisite.loader import ROOT, load_site, stack_names
from aisite.plan import build_plan
from aisite.render.bundle import write_bundle
from aisite.render.manifests import gitops_files, manifest_files


def main() -> None:
    # Every stack rendered first: a stack that fails to render leaves every committed directory as it was.
    rendered = {}
    for stack in stack_names():
        plan = build_plan(load_site(stack))
        rendered[plan.site] = manifest_files(plan)
        rendered[f"gitops/{plan.site}"] = gitops_files(plan)
    for site, files in rendered.items():
        site_dir = ROOT / "manifests" / site
        shutil.rmtree(site_dir, ignore_errors=True)
        if files:
            written = write_bundle(files, site_dir)
            print(f"manifests/{site}: {len(written)} file(s)")


if __name__ == "__main__":
    main()
