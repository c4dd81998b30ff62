"""`aisite init DIR`: a site repository of its own, made from the templates the package ships (templates/site and
templates/ci): a commented example stack, the Pulumi project that imports the package, .gitignore, CI, a README.

Idempotent: a file that is there already is kept as it is (reported as kept, or unchanged when it equals the
template), so init never overwrites a team's work; running it again adds what is missing."""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

from ruamel.yaml import YAML

from aisite.fields import dns_label
from aisite.render.bundle import write_bundle
from aisite.roots import CONTENT
from aisite.schema import SITE_KEY

TEMPLATES = CONTENT / "templates"
# The lock of every package aisite was tested with (the checkout's, and a copy in the wheel's content).
LOCK = "requirements.lock"


@dataclass
class Initialised:
    root: Path
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # there already, different from the template: left alone
    git: str = ""  # what was done about a git repository


@dataclass(frozen=True)
class Wheel:
    """The aisite wheel a site repository installs, by its digest: pip takes that file and asks no index for a
    package named aisite."""

    url: str  # https://... on the team's server, or file:///... on this machine
    sha256: str

    @property
    def requirement(self) -> str:
        return f"aisite @ {self.url}#sha256={self.sha256}"


def wheel_of(path: Path, url: str | None) -> Wheel:
    """The wheel at `path` (read for its digest), served at `url` (default: its file URL here)."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return Wheel(url or path.resolve().as_uri(), digest)


def wheel_problems(path: Path | None, url: str | None) -> list[str]:
    out = []
    if path is not None and (not path.is_file() or not path.name.startswith("aisite-") or path.suffix != ".whl"):
        out.append(f"--wheel: {path} is not an aisite wheel file (aisite-*.whl)")
    if url is not None and (path is None or not url.startswith("https://") or not url.endswith(f"/{path.name}")):
        out.append("--wheel-url: an https URL ending in the --wheel file's name (where your team serves it)")
    if url is not None and any(c in url for c in " #\"'`$"):
        out.append("--wheel-url: no spaces, '#', quotes or '$'")
    return out


def project_name(root: Path) -> str:
    """The Pulumi project: the site repository's own name (its directory), as Pulumi spells a project."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", root.resolve().name).strip("-.") or "site"
    return name[:100]


def example_stacks() -> list[str]:
    """The stacks the package ships (`aisite init --from NAME`)."""
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in (CONTENT / "stacks").glob("Pulumi.*.yaml"))


def _from_example(example: str, site: str) -> str:
    """A shipped stack as the new site's: its text, comments and layout kept, with the site's name."""
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 120
    doc = yaml.load((CONTENT / "stacks" / f"Pulumi.{example}.yaml").read_text())
    doc["config"][SITE_KEY]["name"] = site
    buf = io.StringIO()
    yaml.dump(doc, buf)
    return buf.getvalue()


def site_files(site: str, project: str | None = None, wheel: Wheel | None = None, example: str = "") -> dict[str, str]:
    """Path in the site repository -> text, for a site named `site` (a DNS label: checked by the caller)."""
    version = importlib.metadata.version("aisite")
    requirement = wheel.requirement if wheel else f"aisite=={version}"
    values = {"site": site, "project": project or f"aisite-{site}", "version": version, "requirement": requirement}
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
    if example:
        out[f"stacks/Pulumi.{site}.yaml"] = _from_example(example, site)
    # The versions aisite was tested with: every install of the site repository resolves to them.
    out["constraints.txt"] = (CONTENT / LOCK).read_text()
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


def init_site(root: Path, site: str, wheel: Wheel | None = None, example: str = "") -> Initialised:
    """Write the site repository's files under `root` (made if missing); what was written, found, kept."""
    files = site_files(site, project_name(root), wheel, example)  # every template read before anything is written
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
