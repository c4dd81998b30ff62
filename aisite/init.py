"""`aisite init DIR`: a site repository of its own, made from the templates the package ships (templates/site and
templates/ci): a commented example stack, the Pulumi project that imports the package, .gitignore, CI, a README.

Idempotent: a file that is there already is kept as it is (reported as kept, or unchanged when it equals the
template), so init never overwrites a team's work; running it again adds what is missing."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

from aisite.fields import dns_label
from aisite.render.bundle import write_bundle
from aisite.roots import CONTENT

TEMPLATES = CONTENT / "templates"


@dataclass
class Initialised:
    root: Path
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # there already, different from the template: left alone
    git: str = ""  # what was done about a git repository


def site_files(site: str) -> dict[str, str]:
    """Path in the site repository -> text, for a site named `site` (a DNS label: checked by the caller)."""
    version = importlib.metadata.version("aisite")
    values = {"site": site, "project": f"aisite-{site}", "version": version}
    src = TEMPLATES / "site"
    files = {
        f"stacks/Pulumi.{site}.yaml": src / "stacks" / "Pulumi.example.yaml",
        "Pulumi.yaml": src / "Pulumi.yaml",
        "__main__.py": src / "__main__.py",
        "requirements.txt": src / "requirements.txt",
        ".gitignore": src / "gitignore",
        "README.md": src / "README.md",
    }
    out = {rel: Template(path.read_text()).substitute(values) for rel, path in files.items()}
    # The CI files are shell and workflow syntax full of `$`: only their one placeholder is replaced (the site's
    # name, a DNS label, is safe in YAML and shell as it is).
    for ci in sorted((TEMPLATES / "ci").glob("*.yml")):
        out[f"ci/{ci.name}"] = ci.read_text().replace("${site}", site)
    return out


def check_name(site: str) -> str | None:
    """Why `site` cannot name a site (None when it can): the model's rule for site.name."""
    try:
        dns_label(site)
    except ValueError as exc:
        return str(exc)
    return None


def _git_init(root: Path) -> str:
    git = shutil.which("git")
    if git is None:
        return "git is not installed: no repository made (run git init yourself)"
    inside = subprocess.run(
        [git, "-C", str(root), "rev-parse", "--is-inside-work-tree"], capture_output=True, text=True, check=False
    )
    if inside.returncode == 0 and inside.stdout.strip() == "true":
        return "already in a git repository"
    r = subprocess.run(
        [git, "init", "--quiet", "--initial-branch=main", str(root)], capture_output=True, text=True, check=False
    )
    return "git repository made (branch main)" if r.returncode == 0 else f"git init failed: {r.stderr.strip()}"


def init_site(root: Path, site: str) -> Initialised:
    """Write the site repository's files under `root` (made if missing); what was written, found, kept."""
    files = site_files(site)  # every template read before anything is written
    root.mkdir(parents=True, exist_ok=True)
    done = Initialised(root.resolve())
    missing = {}
    for rel, text in files.items():
        path = root / rel
        if path.is_file() or path.is_symlink():
            (done.unchanged if path.is_file() and path.read_text(errors="replace") == text else done.kept).append(rel)
        else:
            missing[rel] = text
    write_bundle(missing, root)
    done.written = list(missing)
    done.git = _git_init(root)
    return done
