"""The two roots: the tool's Ansible content (the aisite.site collection: its playbooks, roles and plugins; and
ansible.cfg), which ships with the package, and the site repository (stacks/, .aisite/, manifests/), which is the
user's.

A checkout of aisite is both: its content sits beside the package, and it is the lab's site repository. An
installed wheel holds the content inside the package (aisite/content, copied there by setup.py's build), and the
site repository is the one `aisite init` made.
"""

from __future__ import annotations

import os
from pathlib import Path

from aisite import SITE_DIR_ENV

__all__ = ["COLLECTION", "COLLECTION_PATH", "CONTENT", "PACKAGE", "SITE", "SITE_DIR_ENV", "find_site", "is_site"]

PACKAGE = Path(__file__).resolve().parent
_SHIPPED = PACKAGE / "content"


# Where the aisite.site collection sits under the content root (ansible.cfg's collections_path is `collections`).
COLLECTION_PATH = Path("collections", "ansible_collections", "aisite", "site")


def _content_root() -> Path:
    return _SHIPPED if (_SHIPPED / COLLECTION_PATH).is_dir() else PACKAGE.parent


CONTENT = _content_root()
COLLECTION = CONTENT / COLLECTION_PATH


def is_site(path: Path) -> bool:
    """A site repository: a Pulumi project with its stacks (what `aisite init` writes)."""
    return (path / "stacks").is_dir() and (path / "Pulumi.yaml").is_file()


def find_site(start: Path) -> Path | None:
    """The site repository `start` is in (itself or the nearest parent that is one)."""
    for d in (start, *start.parents):
        if is_site(d):
            return d
    return None


def site_root() -> Path:
    """$AISITE_SITE_DIR, else the site repository the current directory is in, else the tool's checkout (the lab's
    site repository), else the current directory (a command then says that it has no stacks)."""
    chosen = os.environ.get(SITE_DIR_ENV)
    if chosen:
        return Path(chosen).resolve()
    cwd = Path.cwd()
    return find_site(cwd) or (CONTENT if is_site(CONTENT) else cwd)


SITE = site_root()
