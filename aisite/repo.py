"""The site repository, through the git command: a file at a revision, fetching a branch into a work clone,
checking a commit out and verifying its signature."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

# Commands run with no prompt and no pager, whatever the user's git configuration says.
_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", "LC_ALL": "C"}


class GitError(RuntimeError):
    """A git command failed; the message is the command and what git said."""


def git(
    cwd: Path, *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        ["git", *args], cwd=cwd, env=os.environ | _ENV | (env or {}), capture_output=True, text=True, check=False
    )
    if check and r.returncode != 0:
        said = (r.stderr or r.stdout).strip().splitlines()
        raise GitError(f"git {' '.join(args)} (in {cwd}): {said[-1] if said else f'exit {r.returncode}'}")
    return r


def toplevel(path: Path) -> Path:
    """The work tree that holds `path`."""
    start = path if path.is_dir() else path.parent
    return Path(git(start.resolve(), "rev-parse", "--show-toplevel").stdout.strip())


def file_at(path: Path, rev: str) -> str:
    """The text of `path` (in a git work tree) as it is at `rev`."""
    top = toplevel(path)
    rel = path.resolve().relative_to(top)
    commit = git(top, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if commit.returncode != 0:
        raise GitError(f"{rev!r} is not a commit of the repository at {top}")
    shown = git(top, "show", f"{commit.stdout.strip()}:{rel.as_posix()}", check=False)
    if shown.returncode != 0:
        raise GitError(f"{rel} does not exist at {rev} in {top}")
    return shown.stdout


def fetch(url: str, branch: str, clone: Path) -> str:
    """Fetch `branch` of `url` into the work clone (made on first use); the commit at its tip."""
    if not (clone / ".git").is_dir():
        clone.mkdir(parents=True, exist_ok=True)
        git(clone, "init", "--quiet")
    git(clone, "fetch", "--quiet", "--force", "--no-tags", url, f"+refs/heads/{branch}:refs/remotes/origin/{branch}")
    return git(clone, "rev-parse", f"refs/remotes/origin/{branch}^{{commit}}").stdout.strip()


def checkout(clone: Path, commit: str) -> None:
    """Put the work tree at `commit` exactly (edits and stray files gone), keeping its state directory."""
    git(clone, "-c", "advice.detachedHead=false", "checkout", "--quiet", "--force", "--detach", commit)
    git(clone, "clean", "--quiet", "-ffdx", "-e", ".aisite")


# The armour line that opens each kind of commit signature git can carry.
_SIGNATURE_KINDS = {
    "-----BEGIN SSH SIGNATURE-----": "ssh",
    "-----BEGIN PGP SIGNATURE-----": "OpenPGP",
    "-----BEGIN PGP MESSAGE-----": "OpenPGP",
    "-----BEGIN SIGNED MESSAGE-----": "X.509",
}


def signature_kind(clone: Path, commit: str) -> str | None:
    """ssh, OpenPGP, X.509 or unknown for a signed commit; None for an unsigned one (read from the commit object's
    gpgsig header, not from any verifier)."""
    raw = git(clone, "cat-file", "commit", commit).stdout
    header = raw.split("\n\n", 1)[0]
    for line in header.splitlines():
        if line.startswith(("gpgsig ", "gpgsig-sha256 ")):
            armour = line.split(" ", 1)[1].strip()
            return _SIGNATURE_KINDS.get(armour, "unknown")
    return None


def verify_commit(clone: Path, commit: str, allowed_signers: Path) -> str:
    """Who signed `commit` with an SSH key listed in `allowed_signers` (OpenSSH format); GitError otherwise.

    Only SSH signatures count: an OpenPGP or X.509 signature is refused before any verifier runs, so no GPG keyring
    or certificate store of this machine is ever consulted. The verification runs with no global or system git
    configuration (a user's gpg.ssh.program or revocation settings do not apply) and ssh-keygen named explicitly."""
    kind = signature_kind(clone, commit)
    if kind is None:
        raise GitError(f"commit {commit[:12]} is not signed")
    if kind != "ssh":
        raise GitError(
            f"commit {commit[:12]} has an {kind} signature: only SSH signatures by a key in the site's allowed "
            "signers are accepted (keyrings and certificate stores are never consulted)"
        )
    isolated = {
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GNUPGHOME": os.devnull,
    }
    r = git(
        clone,
        "-c",
        f"gpg.ssh.allowedSignersFile={allowed_signers.resolve()}",
        "-c",
        "gpg.ssh.program=ssh-keygen",
        "-c",
        "gpg.program=/bin/false",
        "-c",
        "gpg.x509.program=/bin/false",
        "verify-commit",
        "--verbose",
        commit,
        check=False,
        env=isolated,
    )
    said = r.stderr.strip()
    if r.returncode != 0:
        raise GitError(f"commit {commit[:12]}: signature not accepted: {said.splitlines()[-1] if said else 'refused'}")
    # e.g. 'Good "git" signature for alice@example.com with ED25519 key SHA256:...'
    good = [line for line in said.splitlines() if line.startswith("Good ")]
    if not good:
        raise GitError(f"commit {commit[:12]}: no good signature reported: {said.splitlines()[-1] if said else ''}")
    return good[-1]


def descends(clone: Path, ancestor: str, commit: str) -> bool:
    """`commit` is `ancestor` or one of its descendants (a fast-forward from it); False also when `ancestor` is not
    in the clone at all (git answers 128)."""
    return git(clone, "merge-base", "--is-ancestor", ancestor, commit, check=False).returncode == 0


def commit_subject(clone: Path, commit: str) -> str:
    return git(clone, "log", "-1", "--format=%s", commit).stdout.strip()


def copy_checkout(top: Path, dest: Path) -> None:
    """The files of the work tree at `top` (tracked, and untracked but not ignored) as they are now, into `dest`:
    a site repository made of this checkout (the tests' and benchmarks' sites). A link to a folder stays a link (the
    collection's place, collections/ansible_collections/aisite/site, is one to the top), a link to a file is copied
    as the file."""
    for rel in git(top, "ls-files", "-co", "--exclude-standard").stdout.splitlines():
        src = top / rel
        if src.is_symlink() and src.is_dir():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).symlink_to(src.readlink())
        elif src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_bytes(src.read_bytes())


def verified_tip(url: str, branch: str, allowed_signers: Sequence[str]) -> str:
    """The commit at `branch` of `url`, fetched into a scratch clone and verified as a reconcile verifies one
    (an SSH signature by one of `allowed_signers`, OpenSSH lines); GitError otherwise, and with no signers."""
    if not allowed_signers:
        raise GitError("no allowed signers: an unverified commit is trusted for nothing")
    with tempfile.TemporaryDirectory(prefix="aisite-tip-") as scratch:
        clone = Path(scratch) / "clone"
        tip = fetch(url, branch, clone)
        signers = Path(scratch) / "allowed_signers"
        signers.write_text("".join(f"{line}\n" for line in allowed_signers))
        verify_commit(clone, tip, signers)
    return tip
