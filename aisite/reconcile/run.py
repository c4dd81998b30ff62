"""One reconcile pass: fetch the branch, verify the commit's signature, check the site out, validate it, and run
`aisite deploy --changed` (or a full or check pass) from the checkout, so the commit's own playbooks and roles are
what reaches the site. Every pass is recorded in the status file and the metrics, whatever its outcome."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from aisite import repo
from aisite.apply import CONTRACT
from aisite.paths import STATE
from aisite.reconcile.state import (
    BusyError,
    PassRecord,
    load_status,
    lock,
    mark_interrupted,
    save_status,
    workdir,
    write_metrics,
)
from aisite.roots import SITE_DIR_ENV


@dataclass(frozen=True)
class Config:
    repo: str  # URL or path of the site repository
    branch: str
    stack: str  # a stack name under the repository's stacks/, or a path inside it
    allowed_signers: Path | None = None  # when set, only commits signed by a key listed there are applied
    engine: str = "ansible"  # ansible: aisite deploy; pulumi: pulumi up (needs the Pulumi CLI)
    wait: bool = False  # wait for the lock instead of leaving
    # The one commit an operator allows the site to move to although it does not descend from the applied one.
    allow_rewind: str | None = None
    # A check of part of the site (deploy's --layer and --limit); a pass applies the whole commit or nothing.
    check_layer: str | None = None
    check_limit: str | None = None
    # The SSH key that signs the automatic promotions' commits (site.serving[].promotion.automatic), where the
    # site verifies its commits.
    signing_key: Path | None = None


INTERRUPTED = "interrupted: the next pass completes what this one had not recorded as applied"


class Refused(repo.GitError):
    """A commit the chain of trust does not let reach the site."""


def _check_descent(clone: Path, cfg: Config, applied: str | None, rec: PassRecord) -> None:
    """Only a descendant of the applied commit is applied (a fast-forward): a branch pushed back to an older commit,
    or replaced by one from another history, is refused, unless an operator names that very commit."""
    if applied is None or rec.commit == applied:
        return
    if repo.descends(clone, applied, rec.commit):
        return
    if rec.commit == cfg.allow_rewind:  # the CLI takes a full hash only
        rec.rewound_from = applied
        rec.notes.append(f"moved back from {applied[:12]} to {rec.commit[:12]}, as allowed by --allow-rewind")
        return
    raise Refused(
        f"commit {rec.commit[:12]} does not descend from the applied commit {applied[:12]} (the branch was rewound "
        f"or replaced): refused. To move the site to it deliberately: --allow-rewind {rec.commit}"
    )


def _in_clone(clone: Path) -> dict[str, Any]:
    """Where a child of a pass runs: in the checkout, its site repository, whatever this process was pointed at."""
    return {"cwd": clone, "env": os.environ | {SITE_DIR_ENV: str(clone)}}


def _aisite(clone: Path, *args: str, fd: int, forward: list[subprocess.Popen[str]]) -> subprocess.CompletedProcess[str]:
    """Run the checkout's own aisite (python -m puts the checkout first on sys.path) with this interpreter. The
    child inherits the lock, so a reconcile that dies leaves it held until its deploy has stopped too; its output
    goes to files, not pipes, so it does not die with its reader half-way through (leaving Ansible unwatched)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as errs:
        proc = subprocess.Popen(
            [sys.executable, "-m", "aisite", *args],
            **_in_clone(clone),
            stdout=out,
            stderr=errs,
            text=True,
            pass_fds=(fd,),
        )
        forward.append(proc)
        try:
            proc.wait()
        finally:
            forward.remove(proc)
        out.seek(0)
        errs.seek(0)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), errs.read())


def _json(r: subprocess.CompletedProcess[str]) -> dict[str, Any] | None:
    text = r.stdout.strip()
    if not text.startswith("{"):
        return None
    doc = json.loads(text)
    return doc if isinstance(doc, dict) else None


def _link_state(clone: Path) -> None:
    """The checkout's .aisite is this machine's: the lab's keys, kubeconfigs and what each layer last applied."""
    link = clone / ".aisite"
    if link.is_symlink() and link.resolve() == STATE.resolve():
        return
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.is_dir():
        shutil.rmtree(link)
    STATE.mkdir(parents=True, exist_ok=True)
    link.symlink_to(STATE.resolve(), target_is_directory=True)


def _deploy(
    cfg: Config, clone: Path, *, mode: str, fd: int, rec: PassRecord, forward: list[subprocess.Popen[str]]
) -> None:
    if cfg.engine == "pulumi":
        if shutil.which("pulumi") is None:
            rec.outcome = "failed"
            rec.errors.append(
                "the Pulumi CLI is not installed on this machine: nothing was applied (use --engine ansible to apply "
                "the layers with aisite deploy)"
            )
            return
        args = ["pulumi", "up", "--stack", cfg.stack, "--yes", "--non-interactive", "--skip-preview"]
        args += ["--refresh"] if mode == "full" else []
        if mode == "check":
            args = ["pulumi", "preview", "--stack", cfg.stack, "--non-interactive", "--diff"]
        r = subprocess.run(args, **_in_clone(clone), capture_output=True, text=True, check=False, pass_fds=(fd,))
        rec.outcome = "applied" if r.returncode == 0 else "failed"
        if r.returncode != 0:
            rec.errors.append(" ".join((r.stderr or r.stdout).split()[-60:]))
        return
    args = ["deploy", cfg.stack, "--json"]
    args += {"changed": ["--changed"], "full": [], "check": ["--check"]}[mode]
    if mode == "check":
        args += ["--layer", cfg.check_layer] if cfg.check_layer else []
        args += ["--limit", cfg.check_limit] if cfg.check_limit else []
    r = _aisite(clone, *args, fd=fd, forward=forward)
    doc = _json(r)
    if doc is None:
        rec.outcome = "failed"
        rec.errors.append(f"aisite deploy exited {r.returncode}: " + " ".join(r.stderr.split()[-60:]))
        return
    # A deploy of another contract (aisite.apply.CONTRACT) says other things under these keys: not read as this one.
    # Before the key existed the shape was v1's.
    if (contract := doc.get("contract", CONTRACT)) != CONTRACT:
        rec.outcome = "failed"
        rec.errors.append(
            f"aisite deploy of the commit answers in {str(contract)[:64]!r}; this reconciler reads {CONTRACT}"
        )
        return
    rec.layers = {run["layer"]: run["hosts"] for run in doc.get("runs", [])}
    rec.changed = {h: c["changed"] for h, c in doc.get("recap", {}).items() if c.get("changed")}
    tasks: dict[str, list[str]] = {}
    for change in doc.get("changes", []):
        host, _, task = change.partition(": ")
        tasks.setdefault(host, []).append(task)
    if mode == "check":
        rec.drifted, rec.changed = tasks, {}
    else:
        rec.changed_tasks = tasks
    rec.errors += [str(f) for f in doc.get("failures", [])]
    if doc.get("status") != "successful":
        rec.outcome = "failed"
    elif mode == "check":
        rec.outcome = "drift" if rec.drifted else "unchanged"
    else:
        rec.outcome = "applied" if doc.get("runs") else "unchanged"


PROMOTE_BRANCH = "aisite-promote"  # the work clone's branch the automatic promotions commit on


def _promote(cfg: Config, clone: Path, *, fd: int, rec: PassRecord, forward: list[subprocess.Popen[str]]) -> None:
    """The automatic promotions the applied commit's stack asks for, run by the commit's own aisite. Each step is a
    commit pushed to the site's branch (fast-forward only) before it acts; the next pass applies them."""

    def failed(said: str) -> None:  # the pass applied the site all the same: its outcome stays
        rec.promotions.append({"state": "failed", "error": said})
        rec.errors.append(f"automatic promotion: {said}")

    try:
        repo.git(clone, "checkout", "--quiet", "-B", PROMOTE_BRANCH, rec.commit)
        has_origin = repo.git(clone, "remote", "get-url", "origin", check=False).returncode == 0
        repo.git(clone, "remote", "set-url" if has_origin else "add", "origin", cfg.repo)
    except repo.GitError as exc:
        failed(str(exc))
        return
    args = ["promote", cfg.stack, "--automatic", "--push", cfg.branch, "--json"]
    args += ["--signing-key", str(cfg.signing_key)] if cfg.signing_key else []
    r = _aisite(clone, *args, fd=fd, forward=forward)
    try:
        outcomes = (_json(r) or {}).get("outcomes")
    except ValueError:
        outcomes = None
    if r.returncode != 0 or not isinstance(outcomes, list):
        failed(f"aisite promote exited {r.returncode}: " + (" ".join(r.stderr.split()[-60:]) or "no message"))
        return
    for o in outcomes:
        if isinstance(o, dict):
            entry: dict[str, Any] = {k: str(o.get(k, "")) for k in ("serving", "candidate", "state", "note")}
            commits = o.get("commits")
            entry["commits"] = [str(c.get("commit", "")) for c in commits or [] if isinstance(c, dict)]
            rec.promotions.append(entry)


def reconcile_pass(cfg: Config, mode: str = "changed", on_step: Callable[[str], None] | None = None) -> PassRecord:
    """One pass (mode: changed | full | check). Raises state.BusyError when another pass of the stack runs and
    cfg.wait is false."""
    step = on_step or (lambda _msg: None)
    forward: list[subprocess.Popen[str]] = []

    interrupted: list[int] = []

    def stop(signum: int, _frame: FrameType | None) -> None:
        # A running deploy is asked to stop (it cancels Ansible) and waited for; without one, stop now. Either
        # way the pass ends as interrupted and the next redoes whatever had not been recorded as applied.
        interrupted.append(signum)
        for proc in forward:
            proc.send_signal(signum)
        if not forward:
            raise KeyboardInterrupt

    with lock(cfg.stack, cfg.wait, step) as fd:
        previous = signal.signal(signal.SIGTERM, stop)
        status = load_status(cfg.stack, step)
        mark_interrupted(status)
        status.repo, status.branch = cfg.repo, cfg.branch
        clone = workdir(cfg.stack) / "repo"
        if status.full_pass_due and mode == "changed":
            mode = "full"
        rec = PassRecord(commit="", started=time.time(), mode=mode)
        if mode == "full" and status.full_pass_due:
            rec.notes.append("a full pass: the status file had been lost")
        if mode == "check" and (cfg.check_layer or cfg.check_limit):
            rec.notes.append(
                f"checked only layer {cfg.check_layer or 'every layer'} on {cfg.check_limit or 'every host'}"
            )
        # Recorded as running first: a pass whose reconcile is killed shows as interrupted, not as nothing.
        status.passes.append(rec)
        save_status(status)
        try:
            step(f"fetching {cfg.branch} from {cfg.repo}")
            rec.commit = repo.fetch(cfg.repo, cfg.branch, clone)
            rec.subject = repo.commit_subject(clone, rec.commit)
            if cfg.allowed_signers is not None:
                step(f"verifying the signature of {rec.commit[:12]}")
                rec.signer = repo.verify_commit(clone, rec.commit, cfg.allowed_signers)
            _check_descent(clone, cfg, status.applied_commit, rec)
            repo.checkout(clone, rec.commit)
            _link_state(clone)
            step(f"validating {cfg.stack} at {rec.commit[:12]}")
            valid = _aisite(clone, "validate", cfg.stack, "--json", fd=fd, forward=forward)
            doc = _json(valid)
            if interrupted:
                raise KeyboardInterrupt
            if valid.returncode != 0:
                rec.outcome = "refused"
                errors = (doc or {}).get("errors") or []
                rec.errors = [f"{e['path']}: {e['message']}" for e in errors] or [valid.stderr.strip()[-2000:]]
            else:
                step(f"{'checking' if mode == 'check' else 'applying'} {rec.commit[:12]} ({mode})")
                _deploy(cfg, clone, mode=mode, fd=fd, rec=rec, forward=forward)
                automatic = ((doc or {}).get("summary") or {}).get("automatic_promotions")
                if automatic and mode != "check" and rec.outcome in ("applied", "unchanged") and not interrupted:
                    step(f"promoting the newest checkpoints of {', '.join(map(str, automatic))}")
                    _promote(cfg, clone, fd=fd, rec=rec, forward=forward)
            if interrupted:
                raise KeyboardInterrupt
        except Refused as exc:
            rec.outcome = "refused"
            rec.errors.append(str(exc))
            status.not_descendant_total += 1
        except repo.GitError as exc:
            rec.outcome = "refused" if cfg.allowed_signers is not None and rec.commit and not rec.signer else "failed"
            rec.errors.append(str(exc))
        except KeyboardInterrupt:
            rec.outcome = "failed"
            rec.errors.append(INTERRUPTED)
        finally:
            signal.signal(signal.SIGTERM, previous)
            rec.seconds = round(time.time() - rec.started, 1)
            if rec.outcome == "running":  # an error no step expected: the pass did not complete
                rec.outcome = "failed"
            if rec.outcome in ("applied", "unchanged") and mode != "check":
                status.applied_commit = rec.commit
                status.last_success = time.time()
                if mode == "full":
                    status.full_pass_due = False
            elif rec.outcome in ("failed", "refused"):
                status.failures_total += 1
            for p in rec.promotions:
                if p["state"] != "idle":
                    status.promotions_total[p["state"]] = status.promotions_total.get(p["state"], 0) + 1
            save_status(status)
            write_metrics(status)
        return rec


def watch(
    cfg: Config,
    interval: float,
    full_every: float | None,
    on_pass: Callable[[PassRecord], None],
    on_step: Callable[[str], None] | None = None,
) -> None:
    """Poll: a pass every `interval` seconds, a full pass every `full_every` (reverting drift); until stopped."""
    last_full = time.time()
    while True:
        mode = "changed"
        if full_every is not None and time.time() - last_full >= full_every:
            mode, last_full = "full", time.time()
        try:
            rec = reconcile_pass(cfg, mode, on_step)
            on_pass(rec)
            if INTERRUPTED in rec.errors:
                # SIGTERM reached the pass (which recorded it): the watch stops too.
                raise KeyboardInterrupt
        except BusyError as exc:
            # A pass of its own (the push hook's, a timer's) is running: this round is skipped, not stacked up.
            if on_step:
                on_step(f"skipped: {exc}")
        time.sleep(interval)
