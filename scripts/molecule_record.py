"""Which molecule scenarios `make test` runs: those whose inputs changed since they last passed.

A scenario's inputs are the files it can read: its role and every role that role or the scenario includes (by
`include_role`/`import_role` name, `role:` or a meta dependency, followed to the end), the shared molecule base,
the project's plugins and collection, ansible.cfg, the pinned Python tree and the lab image's recipe; a scenario
that runs the project itself (the reconciler's clones HEAD and installs it) has the project's code as well. Their
digest (path and content of each, links followed) is kept in `.ci/molecule-passed.json` by scripts/molecule.sh when
the scenario passes, with the day, the commit and its seconds. A scenario whose digest is recorded there was run,
converged, idempotent and verified on exactly these files: `make test` says so and does not run it again;
`AISITE_MOLECULE_ALL=1 make test` (or `bash scripts/molecule.sh`) runs every one. What the digest cannot see, the
Debian archive moving on, is caught by running the stalest passes again (`refresh`).

    molecule_record.py digest ROLE[/SCENARIO]          the inputs' digest
    molecule_record.py unchanged ROLE[/SCENARIO]       exit 0 and say when it passed, if its digest is recorded
    molecule_record.py passed ROLE[/SCENARIO] SECONDS  record a pass (scripts/molecule.sh, after `molecule test`)
    molecule_record.py stalest DAYS N ROLE...          of the roles named, the N recorded longest ago, if over DAYS
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / ".ci" / "molecule-passed.json"
# The aisite.site collection is the repository's top (aisite.roots.COLLECTION_PARTS): its roles, playbooks and
# plugins; collections/ansible_collections/aisite/site links back to it.
ROLES = "roles"
# Read by every scenario: the molecule base, the collection's plugins and metadata (aisite.site.guarded_file), the
# Ansible settings, the pinned tree molecule, ansible-core and testinfra come from, testinfra's podman switch, and
# the node image's recipe (its packages and base). Not the collection's other roles, nor its playbooks.
SHARED = (
    ".config/molecule",
    "galaxy.yml",
    "meta",
    "plugins",
    "collections",
    "ansible.cfg",
    "requirements.lock",
    f"{ROLES}/conftest.py",
    "aisite/lab/images.py",
    "aisite/lab/containers.conf",
)
# Scenarios that run the project itself inside their instance (the reconciler's prepare clones HEAD and installs it).
PROJECT = (
    "aisite",
    "playbooks",
    "roles",
    "stacks",
    "pyproject.toml",
    "requirements.txt",
    "__main__.py",
    # How the project installs (its content copied into the package).
    "setup.py",
    "MANIFEST.in",
)
RUNS_THE_PROJECT = frozenset({"reconciler"})
# A role named where a role is named: `include_role`/`import_role`'s `name:`, a play's or meta's `role:`, a meta
# dependency given as a bare string, by its full name (aisite.site.packages) or its short one. Over-reading (a
# `name:` that happens to match a role) only adds inputs.
_ROLE_REF = re.compile(
    r"""(?:\bname|\brole|^\s*-)\s*:?\s*["']?(?:aisite\.site\.)?([a-z][a-z0-9_]*)["']?\s*$""", re.MULTILINE
)


def _split(run: str) -> tuple[str, str]:
    role, _, scenario = run.partition("/")
    return role, scenario or "default"


def _roles() -> set[str]:
    return {p.name for p in (ROOT / ROLES).iterdir() if (p / "tasks").is_dir()}


def _referenced(files: list[Path], roles: set[str]) -> set[str]:
    found: set[str] = set()
    for f in files:
        if f.suffix in (".yml", ".yaml") and f.is_file():
            found |= {m for m in _ROLE_REF.findall(f.read_text(errors="replace")) if m in roles}
    return found


def _tracked(paths: list[str]) -> list[Path]:
    """The tracked files under `paths` (build output, caches and molecule's own files are not inputs)."""
    out = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--", *paths], capture_output=True, check=True
    ).stdout.decode()
    return sorted(ROOT / p for p in out.split("\0") if p)


def role_closure(run: str) -> list[str]:
    """The role of `run` and every role it, or its scenario, includes."""
    role, scenario = _split(run)
    roles = _roles()
    seen: set[str] = set()
    todo = {role} | _referenced(_tracked([f"{ROLES}/{role}/molecule/{scenario}"]), roles)
    while todo:
        r = todo.pop()
        seen.add(r)
        files = [f for f in _tracked([f"{ROLES}/{r}"]) if "/molecule/" not in str(f)]
        todo |= _referenced(files, roles) - seen
    return sorted(seen)


def inputs(run: str) -> list[Path]:
    role, scenario = _split(run)
    paths = [*SHARED, f"{ROLES}/{role}/molecule/{scenario}"]
    paths += [f"{ROLES}/{r}/{sub}" for r in role_closure(run) for sub in _role_parts(r)]
    if role in RUNS_THE_PROJECT:
        paths += PROJECT
    own = ROOT / ROLES / role / "molecule" / scenario
    # The project it installs holds the roles' scenarios but never reads another one (nor does the package ship them).
    return sorted(
        f
        for f in set(_tracked(paths))
        if not (f.is_relative_to(ROOT / ROLES) and "molecule" in f.relative_to(ROOT / ROLES).parts[1:2])
        or f.is_relative_to(own)
    )


def _role_parts(role: str) -> list[str]:
    # A role's own files, not its other scenarios.
    return [p.name for p in (ROOT / ROLES / role).iterdir() if p.name != "molecule"]


def digest(run: str) -> str:
    h = hashlib.sha256()
    for f in inputs(run):
        h.update(str(f.relative_to(ROOT)).encode() + b"\0")
        h.update(hashlib.sha256(_content(f)).digest())
    return h.hexdigest()[:16]


def _content(f: Path) -> bytes:
    # A link to a folder (collections/ansible_collections/aisite/site, the repository's top) counts by where it
    # points; a link to a file by the file's content.
    if f.is_symlink() and f.is_dir():
        return b"link:" + str(f.readlink()).encode()
    return f.read_bytes() if f.exists() else b"(gone)"


def _load() -> dict[str, dict[str, object]]:
    return dict(json.loads(RECORD.read_text())) if RECORD.is_file() else {}


def _commit() -> str:
    git = ["git", "-C", str(ROOT), "rev-parse", "--short=10", "HEAD"]
    r = subprocess.run(git, capture_output=True, text=True, check=False)
    return r.stdout.strip() or "unknown"


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, run = argv[0], argv[1]
    if cmd == "digest":
        print(digest(run))
        return 0
    if cmd == "unchanged":
        rec = _load().get(run)
        if rec is None or rec.get("inputs") != digest(run):
            return 1
        print(
            f"its inputs are those it passed on {rec['passed']} at {rec['commit']} ({rec['seconds']} s; "
            f"digest {rec['inputs']} in .ci/molecule-passed.json)"
        )
        return 0
    if cmd == "passed" and len(argv) == 3:
        data = _load()
        data[run] = {
            "inputs": digest(run),
            "passed": dt.date.today().isoformat(),
            "commit": _commit(),
            "seconds": int(argv[2]),
        }
        RECORD.parent.mkdir(exist_ok=True)
        RECORD.write_text(json.dumps(dict(sorted(data.items())), indent=2) + "\n")
        return 0
    if cmd == "stalest" and len(argv) >= 3:
        days, n, runs = int(argv[1]), int(argv[2]), argv[3:]
        data = _load()
        cutoff = (dt.date.today() - dt.timedelta(days=days)).isoformat()
        old = sorted((str(data[r]["passed"]), r) for r in runs if r in data and str(data[r]["passed"]) < cutoff)
        print(" ".join(r for _, r in old[:n]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
