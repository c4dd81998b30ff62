"""The wheel carries the tool's Ansible content inside the package (aisite/content: the aisite.site collection with
its playbooks, roles and plugins, ansible.cfg and the templates `aisite init` writes from), so
that an installed aisite deploys without a checkout (aisite.roots finds it there). An editable install reads the
checkout's own. Everything else is in pyproject.toml."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

# The lock goes along as the site repositories' constraints, the shipped stacks as `aisite init --from`'s examples.
CONTENT = ("ansible.cfg", "collections", "templates", "requirements.lock", "stacks")
# A role's molecule scenarios (and their testinfra conftest) test it here; an installed site never runs them (and
# change scopes skip them).
SKIP = shutil.ignore_patterns("molecule", "conftest.py", "__pycache__", "*.pyc", ".pytest_cache")


class BuildWithContent(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        dest = Path(self.build_lib) / "aisite" / "content"
        shutil.rmtree(dest, ignore_errors=True)
        for name in CONTENT:
            src = Path(name)
            if src.is_dir():
                shutil.copytree(src, dest / name, ignore=SKIP)
            else:
                dest.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / name)


setup(cmdclass={"build_py": BuildWithContent})
