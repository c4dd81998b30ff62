"""The two roots: the tool's Ansible content (the aisite.site collection: its playbooks, roles and plugins; and
ansible.cfg), which ships with the package, and the site repository (stacks/, .aisite/, manifests/), which is the
user's.

A checkout of aisite is both: the repository is the collection (galaxy.yml, roles/, playbooks/, plugins/ and meta/
at its top, as Kubespray's is; `collections/ansible_collections/aisite/site` links back to it so that ansible.cfg's
collections_path finds it by name), and it is the lab's site repository. An installed wheel holds the content
inside the package (aisite/content, the collection copied to its place under collections/ by setup.py's build),
and the site repository is the one `aisite init` made.
"""

from __future__ import annotations

import os
from pathlib import Path

from aisite import SITE_DIR_ENV

__all__ = [
    "COLLECTION",
    "COLLECTION_PARTS",
    "COLLECTION_PATH",
    "CONTENT",
    "PACKAGE",
    "SITE",
    "SITE_DIR_ENV",
    "find_site",
    "is_site",
]

PACKAGE = Path(__file__).resolve().parent
_SHIPPED = PACKAGE / "content"


# Where the aisite.site collection sits under the content root (ansible.cfg's collections_path is `collections`):
# in a checkout a link to the repository's top, in the wheel the collection's copy.
COLLECTION_PATH = Path("collections", "ansible_collections", "aisite", "site")
# The collection's own parts, at the repository's top (setup.py copies them to COLLECTION_PATH in the wheel).
COLLECTION_PARTS = ("galaxy.yml", "meta", "playbooks", "plugins", "roles")


def _content_root() -> Path:
    return _SHIPPED if (_SHIPPED / COLLECTION_PATH).is_dir() else PACKAGE.parent


CONTENT = _content_root()
# Resolved: the checkout's own top (not the path through the link), so that paths under it compare and print as
# the repository's.
COLLECTION = (CONTENT / COLLECTION_PATH).resolve()


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
