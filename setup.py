"""The wheel carries the tool's Ansible content inside the package (aisite/content: the aisite.site collection with
its playbooks, roles and plugins, ansible.cfg and the templates `aisite init` writes from), so
that an installed aisite deploys without a checkout (aisite.roots finds it there). An editable install reads the
checkout's own. Everything else is in pyproject.toml."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

# The build runs from the source tree; where the collection goes is aisite.roots' to say (standard library only).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from aisite.roots import COLLECTION_PARTS, COLLECTION_PATH

# The lock goes along as the site repositories' constraints, the shipped stacks as `aisite init --from`'s examples.
# The collection is the repository's top (COLLECTION_PARTS); the checkout's collections/ only links back to it.
CONTENT = ("ansible.cfg", "templates", "requirements.lock", "stacks")
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
            _copy(Path(name), dest / name)
        for name in COLLECTION_PARTS:
            _copy(Path(name), dest / COLLECTION_PATH / name)


def _copy(src: Path, dest: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dest, ignore=SKIP)
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)


setup(cmdclass={"build_py": BuildWithContent})
