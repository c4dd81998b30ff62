from __future__ import annotations

import copy
import datetime as dt
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import settings
from xdist.scheduler import LoadFileScheduling

from aisite.loader import read_site_config, resolve_stack, stack_names
from aisite.repo import copy_checkout

# CI replays the same examples every run (reproducible); a developer's run explores new ones. No deadline: an
# example's time is a benchmark's business, and Hypothesis's 200 ms failed a plan property on a loaded machine
# ("Test took 546.27ms ... on a subsequent run it took 12.80 ms": FlakyFailure, no property broken).
settings.register_profile("ci", max_examples=60, derandomize=True, print_blob=True, deadline=None)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile("deep", max_examples=1000, deadline=None)  # pytest --hypothesis-profile=deep, to hunt
settings.load_profile("ci" if os.environ.get("CI") else "dev")

ROOT = Path(__file__).resolve().parent.parent
STACKS = stack_names()


def pulling(stack_text: str, layers: str) -> str:
    """A lab stack's text whose nodes pull these layers (gitops.pull_layers, e.g. "[hosts]"), without Ceph: its
    cluster-wide steps run from the first monitor, so validate refuses a site that pulls them."""
    line = "      interval_seconds: 120\n"
    assert line in stack_text
    ceph = re.compile(r"^      ceph:\n(?:(?: {8}.*)?\n)*", re.M)  # storage_nodes.ceph and its block
    return ceph.sub("", stack_text.replace(line, f"{line}      pull_layers: {layers}\n"))


def site_problems(data: dict[str, Any]) -> list[str]:
    """Every problem a site mapping is refused with, as `path: message` lines (it must be refused)."""
    from aisite.errors import SiteError
    from aisite.loader import parse_site

    with pytest.raises(SiteError) as exc:
        parse_site(data, "test")
    found = [str(p) for p in exc.value.problems]
    assert len(found) == len(set(found)), f"a problem reported twice: {found}"
    return found


def assert_reported(found: list[str], want: dict[str, str]) -> None:
    """Each path of `want` has a problem whose message holds its words."""
    for path, words in want.items():
        assert any(p.startswith(f"{path}: ") and words in p for p in found), (path, found)


def stack_data(stack: str) -> dict[str, Any]:
    return copy.deepcopy(read_site_config(resolve_stack(stack)))


@pytest.fixture
def lab() -> dict[str, Any]:
    """The lab stack's site mapping, a fresh copy to mutate."""
    return stack_data("lab")


def run_cli(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The real `aisite` entry point in a subprocess, so exit codes and stderr are what a user gets.

    The limit only catches a hang: a whole-site run of the lab took 561 s on 2 cores and over 900 s on a loaded
    machine (a fresh-clone CI run, 2026-11-28), where a 900 s limit failed it."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("AISITE_", "PULUMI_"))}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "aisite", *args],
        cwd=ROOT,
        env=full_env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=2400,
        check=False,
    )


# ------------------------------------------------------------------------- site repositories (reconcile tests)
def git(repo: Path, *args: str) -> str:
    env = os.environ | {
        "GIT_AUTHOR_NAME": "Site Admin",
        "GIT_AUTHOR_EMAIL": "admin@example.com",
        "GIT_COMMITTER_NAME": "Site Admin",
        "GIT_COMMITTER_EMAIL": "admin@example.com",
    }
    r = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=False)
    assert r.returncode == 0, f"git {' '.join(args)}: {r.stderr}"
    return r.stdout.strip()


def make_site_repo(dest: Path, stacks: dict[str, str] | None = None) -> Path:
    """A site repository as a team has one: this project (the working tree's files, as they are now) on branch
    main, plus `stacks` (file name under stacks/ -> text), committed."""
    copy_checkout(ROOT, dest)
    for name, text in (stacks or {}).items():
        (dest / "stacks" / name).write_text(text)
    git(dest, "init", "--quiet", "--initial-branch=main")
    git(dest, "add", "-A")
    git(dest, "commit", "--quiet", "-m", "The site")
    return dest


def commit_file(repo: Path, rel: str, text: str, message: str, signing_key: Path | None = None) -> str:
    """Write one file and commit it (signed with an SSH key when one is given); the new commit."""
    (repo / rel).write_text(text)
    git(repo, "add", rel)
    sign = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={signing_key}"] if signing_key else []
    git(repo, *sign, "commit", "--quiet", *(["-S"] if signing_key else []), "-m", message)
    return git(repo, "rev-parse", "HEAD")


def ssh_signer(tmp: Path, principal: str) -> tuple[Path, str]:
    """An SSH key for signing commits, and its allowed-signers line."""
    key = tmp / f"{principal.split('@', maxsplit=1)[0]}_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", principal, "-f", str(key)], check=True)
    return key, f"{principal} {(key.with_suffix('.pub')).read_text().strip()}"


# ------------------------------------------------------------------------- rotation (CI's budget)
# Each lab scenario group here runs one day in seven under AISITE_ITEST_ROTATE=1 (CI), the rest every day: pull
# mode; the BMC scenarios (power, boot devices, errors, the provider); the three-tier lab with acceptance, the bench
# and the health check; the reconciler's passes; the whole-site second run; the VM's restarts (a changed BMC
# password, a mistyped boot MAC, a BIOS change rolled back); the costlier faults (a spine lost or hung, a miswire, a
# storage node lost during a read, the rolled driver change, and the served model's three promotions, whose
# rolled-back canary fails live), one failure of the fabric running every day. Sized from their seconds
# (docs/development.md): no day's group costs much more than another's.
ROTATION_GROUPS = ("pull", "bmcs", "three-tier", "reconcile", "second-run", "restarts", "faults")


def loopback_kubeconfig(folder: Path, port: int) -> Path:
    """A kubeconfig for a test's API server on a loopback port (plain HTTP, a token that is no secret)."""
    path = folder / "kubeconfig"
    cluster = {"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
        "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def rotation_due(day: dt.date) -> str:
    """The rotating group of lab scenarios CI runs on this day (one each day, in turn)."""
    return ROTATION_GROUPS[day.toordinal() % len(ROTATION_GROUPS)]


def rotation_skip(group: str, day: dt.date) -> str | None:
    """Why a test of `group` does not run on `day` under AISITE_ITEST_ROTATE=1, or None when it runs."""
    assert group in ROTATION_GROUPS, f"unknown rotating group {group!r}: one of {ROTATION_GROUPS}"
    if rotation_due(day) == group:
        return None
    later = next(
        day + dt.timedelta(days=k)
        for k in range(1, len(ROTATION_GROUPS) + 1)
        if rotation_due(day + dt.timedelta(days=k)) == group
    )
    return (
        f"rotated out of today's CI run ({rotation_due(day)!r} runs today; {group!r} next on {later.isoformat()}): "
        "CI's 90-minute budget; a run without AISITE_ITEST_ROTATE=1 runs every group"
    )


LAB_TESTS = "tests/lab/"


class _LabInOneScope(LoadFileScheduling):
    """`--dist loadfile`, but the lab's test files are one unit: they run in order on one worker, over one lab."""

    def _split_scope(self, nodeid: str) -> str:
        return LAB_TESTS if nodeid.startswith(LAB_TESTS) else super()._split_scope(nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadFileScheduling | None:
    return _LabInOneScope(config, log) if config.getoption("dist") == "loadfile" else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("AISITE_ITEST_ROTATE") != "1":
        return
    today = dt.date.today()
    for item in items:
        mark = item.get_closest_marker("rotating")
        if mark is not None and (why := rotation_skip(str(mark.args[0]), today)):
            item.add_marker(pytest.mark.skip(reason=why))
