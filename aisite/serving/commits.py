"""A promotion's steps as commits to the site repository: the stack file's serving entry edited (its candidate
set, made champion or removed), the result checked as `aisite validate` checks a stack, signed, its signature
verified against the signers the policy names, and only then the branch moved.

The commit is made without touching the work tree or index (a blob, a tree from a scratch index, `git commit-tree`)
and the branch moves by compare-and-swap from the commit it was read at: a promotion either lands whole or leaves
the repository as it was.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from ruamel.yaml import YAML

from aisite.checks.serving import principals
from aisite.errors import SiteError
from aisite.loader import CONFIG_KEY, parse_site, site_config_of
from aisite.repo import GitError, git, verify_commit


class PromotionCommitError(RuntimeError):
    """The step could not be committed; the repository is as it was."""


def subject(name: str, version: str, step: str, detail: str = "") -> str:
    """A step's commit subject (the audit trail's line, for people; `decided` reads the trailers). detail: the
    canary's share, or why the candidate was rolled back."""
    return {
        "refused": f"serving {name}: {version} refused at the gate",
        "canary": f"serving {name}: canary {version} at {detail} %",
        "promoted": f"serving {name}: {version} promoted",
        "rolled-back": f"serving {name}: {version} rolled back: {detail}",
    }[step]


# Each step's commit says what it is of in trailers: the stack file (a refusal changes no file to say it), the
# served model and the candidate's version. `decided` reads them, never the prose of the subject.
TRAILERS = ("Aisite-Stack", "Aisite-Serving", "Aisite-Version")


def decided(
    repo: Path, stack_file: Path, name: str, trust: tuple[tuple[str, ...], tuple[str, ...]] | None = None
) -> set[str]:
    """The versions of serving `name` of this stack file that a promotion step was committed for in HEAD's history:
    each checkpoint is judged once, so the reconciler does not try a refused one again. With `trust` (the site's
    allowed-signers lines and the policy's signers, where the site verifies its commits), only steps whose own
    signature the policy trusts count: a commit merged under a signed tip is no step, whatever its trailers say."""
    rel = stack_file.resolve().relative_to(repo.resolve()).as_posix()
    fields = "%x00".join(f"%(trailers:key={key},valueonly,separator=%x20)" for key in TRAILERS)
    log = git(repo, "log", f"--format=%H%x00{fields}%x01", "--fixed-strings", f"--grep={TRAILERS[1]}: {name}", "HEAD")
    out: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="aisite-decided-") as scratch:
        signers = _signers_file(*trust, Path(scratch) / "allowed_signers") if trust else None
        for record in log.stdout.split("\x01"):
            commit, *values = [v.strip() for v in record.split("\x00")]
            if len(values) != len(TRAILERS) or values[:2] != [rel, name] or not values[2]:
                continue
            if signers is not None:
                try:
                    verify_commit(repo, commit, signers)
                except GitError:
                    continue
            out.add(values[2])
    return out


def _yaml() -> YAML:
    y = YAML()  # round-trip: it reads where each key is (line, column)
    y.preserve_quotes = True
    return y


def _span(lines: list[str], line: int, col: int) -> tuple[int, int]:
    """The lines of the key at (line, col): its own and every following line indented deeper (or blank)."""
    end = line + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > col):
        end += 1
    while end > line + 1 and not lines[end - 1].strip():
        end -= 1  # a blank line after it belongs to what follows
    return line, end


def _flow(key: str, col: int, values: dict[str, str | int]) -> str:
    """`key: {k: v, ...}` at `col`, strings double-quoted (JSON's quoting is YAML's): a version `on` or `no`
    stays a string."""
    inner = ", ".join(f"{k}: {json.dumps(v)}" for k, v in values.items())
    return f"{' ' * col}{key}: {{{inner}}}"


def edit_serving(text: str, name: str, change: str, candidate: dict[str, Any] | None = None) -> str:
    """The stack file's text with serving entry `name` changed, and nothing else: the lines of its champion and
    candidate are replaced, inserted or removed in place, so every other line (comments, layout) stays as the team
    wrote it.
    - "canary": its candidate set to `candidate` ({version, artifact, share}), after its champion;
    - "promote": the candidate made champion ({version, artifact}) and removed;
    - "rollback": the candidate removed, the champion kept."""
    doc = _yaml().load(text)
    site = doc["config"][CONFIG_KEY]
    entry = next((s for s in site.get("serving") or [] if s.get("name") == name), None)
    if entry is None:
        raise PromotionCommitError(f"the stack has no serving entry {name!r}")
    lines = text.splitlines()
    line, col = entry.lc.key("champion")
    champion = _span(lines, line, col)
    if change == "canary":
        assert candidate is not None
        if "candidate" in entry:
            raise PromotionCommitError(f"serving {name!r} has a candidate already")
        lines[champion[1] : champion[1]] = [_flow("candidate", col, candidate)]
    elif change in ("promote", "rollback"):
        if "candidate" not in entry:
            raise PromotionCommitError(f"serving {name!r} has no candidate to {change}")
        c = entry["candidate"]
        start, stop = _span(lines, *entry.lc.key("candidate"))
        del lines[start:stop]
        if change == "promote":
            new = _flow("champion", col, {"version": str(c["version"]), "artifact": str(c["artifact"])})
            offset = stop - start if start < champion[0] else 0
            lines[champion[0] - offset : champion[1] - offset] = [new]
    else:
        raise ValueError(change)
    out = "\n".join(lines) + ("\n" if text.endswith("\n") else "")
    _same_but(text, out, name)
    return out


def _same_but(before: str, after: str, name: str) -> None:
    """The edit changed serving entry `name`'s champion and candidate and nothing else (read back as YAML)."""
    a, b = yaml.safe_load(before), yaml.safe_load(after)
    for doc in (a, b):
        for s in doc["config"][CONFIG_KEY].get("serving") or []:
            if s.get("name") == name:
                s.pop("champion", None)
                s.pop("candidate", None)
    if a != b:
        raise PromotionCommitError(f"editing serving {name!r} would change more of the stack than it: not written")


def _checked(text: str, source: str) -> None:
    """The new stack as `aisite validate` reads it: a step that would break the site is never committed."""
    try:
        parse_site(site_config_of(text, source), source)
    except SiteError as exc:
        shown = "; ".join(str(p) for p in exc.problems[:5])
        raise PromotionCommitError(f"the changed stack would not validate: {shown}") from None


@dataclass(frozen=True)
class Signing:
    key: Path  # the SSH private key (or its .pub with an agent) git signs with
    allowed_signers: tuple[str, ...]  # OpenSSH allowed-signers lines: gitops.allowed_signers
    signers: tuple[str, ...]  # the principals the policy lets sign promotions; empty: any allowed signer


def commit_step(
    repo: Path, stack_file: Path, text: str, message: str, signing: Signing | None, *, about: tuple[str, str] = ("", "")
) -> str:
    """Commit `text` as the new content of `stack_file` on the checked-out branch; the new commit. `about`: the
    served model and the candidate's version the step is of (trailers `decided` reads)."""
    rel = stack_file.resolve().relative_to(repo.resolve()).as_posix()
    branch = git(repo, "symbolic-ref", "--quiet", "HEAD", check=False).stdout.strip()
    if not branch:
        raise PromotionCommitError(f"{repo}: HEAD is detached; a promotion commits to a branch")
    if git(repo, "status", "--porcelain", "--", rel).stdout.strip():
        raise PromotionCommitError(f"{rel} has uncommitted changes in {repo}: commit or discard them first")
    _checked(text, rel)
    trailers = "".join(f"{k}: {v}\n" for k, v in zip(TRAILERS, (rel, *about), strict=True) if v)
    message = f"{message.rstrip()}\n\n{trailers}"
    head = git(repo, "rev-parse", "HEAD").stdout.strip()
    with tempfile.TemporaryDirectory(prefix="aisite-promote-") as scratch:
        blob = Path(scratch) / "stack"
        blob.write_text(text)
        sha = git(repo, "hash-object", "-w", "--", str(blob)).stdout.strip()
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        git(repo, "read-tree", head, env=env)
        git(repo, "update-index", "--cacheinfo", f"100644,{sha},{rel}", env=env)
        tree = git(repo, "write-tree", env=env).stdout.strip()
        sign = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={signing.key}"] if signing else []
        new = git(repo, *sign, "commit-tree", tree, "-p", head, *(["-S"] if signing else []), "-m", message)
        commit = new.stdout.strip()
        if signing:
            _verify(repo, commit, signing, Path(scratch) / "allowed_signers")
    # The branch moves only from the commit the change was made on.
    try:
        git(repo, "update-ref", "-m", "aisite promote", branch, commit, head)
    except GitError as exc:
        raise PromotionCommitError(f"{branch} moved while the step was prepared: {exc}") from None
    git(repo, "checkout", "--quiet", "HEAD", "--", rel)  # the work tree and index follow the new commit
    return commit


def push(repo: Path, branch: str, commit: str) -> None:
    """`commit` onto `branch` of the repository's `origin`, as a fast-forward only: where someone else moved the
    branch meanwhile, the step is not published (and does not act)."""
    try:
        git(repo, "push", "--quiet", "origin", f"{commit}:refs/heads/{branch}")
    except GitError as exc:
        raise PromotionCommitError(
            f"committed {commit[:12]} here, but origin's {branch} did not take it (moved meanwhile?): {exc}; "
            "the step was not published and did not act"
        ) from None


def _signers_file(allowed_signers: tuple[str, ...], signers: tuple[str, ...], path: Path) -> Path:
    """The allowed-signers lines of the principals the policy lets sign promotions (all, where it names none),
    written to `path` for git's verifier."""
    wanted = set(signers)
    lines = [line for line in allowed_signers if not wanted or principals(line) & wanted]
    if not lines:
        raise PromotionCommitError("no allowed signer is among the policy's signers: nobody can sign a promotion")
    path.write_text("\n".join(lines) + "\n")
    os.chmod(path, 0o600)
    return path


def _verify(repo: Path, commit: str, signing: Signing, path: Path) -> None:
    """The commit's signature by a key the policy trusts (a reconciler would refuse it otherwise)."""
    try:
        verify_commit(repo, commit, _signers_file(signing.allowed_signers, signing.signers, path))
    except GitError as exc:
        who = ", ".join(sorted(signing.signers)) or "any of site.gitops.allowed_signers"
        raise PromotionCommitError(f"the step's signature is not one the policy trusts ({who}): {exc}") from None
