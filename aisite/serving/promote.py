"""`aisite promote STACK SERVING --version V`: a new checkpoint of the training workload reaches the served model
by the stack's policy, every step a signed commit to the site repository.

The states, as the GPU Operator's upgrade walks its nodes (each outcome a commit):

    evaluating --(does not beat the champion)--> refused       (an empty commit: the figures, the audit trail)
        |
        +--(beats it by the margin)--> canary  (commit: the candidate at the canary's share)
                                          |
                     (every live limit held)--> promoted       (commit: the candidate made champion)
                     (a limit crossed)-------> rolled-back     (commit: the candidate removed)

The runtime does the work after each commit: on the lab, aisite.lab.serving (the lab's processes); on a site,
aisite.serving.cluster (Jobs, the commit's objects applied as the reconciler applies them, pods' counters, through
the cluster's API server).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from pydantic import TypeAdapter

from aisite.fields import DnsLabel, RelPath, field_problem
from aisite.loader import load_site
from aisite.plan import Plan, ServingPlan, build_plan
from aisite.plan.types import PromotionPlan
from aisite.serving.commits import Signing, commit_step, edit_serving, subject
from aisite.serving.policy import (
    Gate,
    ServerFigures,
    Verdict,
    Window,
    gate,
    judge,
    parse_evaluation,
    parse_servers,
    windows,
)

Say = Callable[[str], None]


class PromoteError(Exception):
    """The promotion could not run (bad request, no policy, a canary already running); nothing was committed."""


class Runtime(Protocol):
    def evaluate(self, plan: Plan, s: ServingPlan, artifact: str, dataset: str) -> str: ...
    def apply(self, plan: Plan, s: ServingPlan) -> None: ...
    # Each of the role's servers' /metrics text, by where it was read (a replica, a pod).
    def metrics(self, plan: Plan, s: ServingPlan, role: str) -> dict[str, str]: ...
    def traffic(self, plan: Plan, s: ServingPlan, seconds: float) -> dict[str, dict[str, Any]]: ...
    # (file name stem, modification time) of the checkpoints in models/NAME/, a bounded listing of the storage.
    def checkpoints(self, plan: Plan, s: ServingPlan) -> list[tuple[str, float]]: ...


@dataclass
class Outcome:
    serving: str
    candidate: str
    state: str  # refused, promoted, rolled-back; idle: nothing to promote (auto.promote_pending)
    gate: dict[str, Any]
    commits: list[dict[str, str]] = field(default_factory=list)  # {step, commit, subject}
    canary: dict[str, Any] | None = None  # the candidate's window and the limits crossed
    traffic: dict[str, dict[str, Any]] = field(default_factory=dict)  # per answering version, the canary's requests
    note: str = ""  # why an idle one is


VERSION: TypeAdapter[str] = TypeAdapter(DnsLabel)
_ARTIFACT: TypeAdapter[str] = TypeAdapter(RelPath)


def check_candidate(version: str, artifact: str) -> None:
    """The candidate's version and checkpoint path, held to the stack's types before either is used (a path
    inside the tenant's storage, never out of it); PromoteError listing both problems."""
    problems = [
        f"{what}: {why}"
        for what, adapter, value in (("--version", VERSION, version), ("--artifact", _ARTIFACT, artifact))
        if (why := field_problem(adapter, value))
    ]
    if problems:
        raise PromoteError("; ".join(problems))


def _serving(plan: Plan, name: str) -> ServingPlan:
    s = next((x for x in plan.serving if x.name == name), None)
    if s is None:
        known = ", ".join(x.name for x in plan.serving) or "none"
        raise PromoteError(f"site.serving: no served model {name!r} (the site serves: {known})")
    return s


def _canary(plan: Plan, s: ServingPlan, version: str, runtime: Runtime, *, out: Outcome, say: Say) -> Verdict:
    """The candidate served at its share for the canary's seconds, its live figures judged."""
    policy = s.promotion
    assert policy is not None
    runtime.apply(plan, s)

    def read() -> dict[str, ServerFigures]:
        return parse_servers(runtime.metrics(plan, s, "candidate"), f"{s.name}'s candidate", version)

    before = read()
    say(f"{s.name}: canary of {version} for {policy.canary.seconds} s at {policy.canary.share} %")
    start = time.monotonic()
    out.traffic = runtime.traffic(plan, s, policy.canary.seconds)
    result = judge(policy.canary, windows(before, read()))
    out.canary = {
        "seconds": round(time.monotonic() - start, 1),
        "window": asdict(result.window) | {"error_rate": result.window.error_rate},
        "crossed": result.crossed,
    }
    return result


def _committed(stack_file: Path, name: str) -> tuple[Plan, ServingPlan]:
    """The stack's plan as the last step left it, and the served model in it."""
    plan = build_plan(load_site(stack_file))
    return plan, _serving(plan, name)


def _prepared(stack_file: Path, name: str) -> tuple[Plan, ServingPlan, PromotionPlan]:
    """The stack's plan, the served model and its policy."""
    plan, s = _committed(stack_file, name)
    if s.promotion is None:
        raise PromoteError(f"serving {name!r} has no promotion policy (site.serving[].promotion)")
    return plan, s, s.promotion


def _signer(plan: Plan, policy: PromotionPlan, signing: Signing | None) -> Signing | None:
    """Who signs the steps: a key the model's own policy's signers name, where the site verifies its commits."""
    if signing is None and plan.gitops and plan.gitops.allowed_signers:
        raise PromoteError("the site verifies its commits (gitops.allowed_signers): give --signing-key")
    return None if signing is None else replace(signing, signers=tuple(policy.signers))


@dataclass(frozen=True)
class PromoteContext:
    """What a promotion acts with: the site repository its steps are committed to (signed with `signing` where
    given), `publish` (called with each step's commit before the step acts: a push to the site's remote; when it
    raises, the promotion stops there), the runtime that does the work, and `say` for its progress."""

    repo: Path
    runtime: Runtime
    signing: Signing | None
    say: Say
    publish: Callable[[str], None] | None = None


@dataclass
class _Steps:
    """Where a promotion's steps go: each committed (signed), published before it acts, recorded in the outcome."""

    ctx: PromoteContext
    stack_file: Path
    signing: Signing | None  # the context's, narrowed to the model's own policy's signers
    out: Outcome

    def __call__(self, step: str, text: str, message: str) -> None:
        about = (self.out.serving, self.out.candidate)
        sha = commit_step(self.ctx.repo, self.stack_file, text, message, self.signing, about=about)
        if self.ctx.publish is not None:
            self.ctx.publish(sha)
        self.out.commits.append({"step": step, "commit": sha, "subject": message.splitlines()[0]})
        self.ctx.say(f"{about[0]}: committed {sha[:12]} {message.splitlines()[0]}")

    def end(self, state: str, why: str, body: str) -> None:
        """The canary's last step: the candidate made champion (promoted) or removed (rolled-back), committed,
        then the committed stack's objects applied."""
        name, version = self.out.serving, self.out.candidate
        self.out.state = state
        text = edit_serving(self.stack_file.read_text(), name, "promote" if state == "promoted" else "rollback")
        self(state, text, f"{subject(name, version, state, why)}\n" + (f"\n{body}\n" if body else ""))
        self.ctx.runtime.apply(*_committed(self.stack_file, name))


def promote(
    stack_file: Path,
    name: str,
    version: str,
    artifact: str,
    ctx: PromoteContext,
) -> Outcome:
    """Evaluate `artifact` as `version` against the champion; refuse it, or run its canary and promote it or roll
    it back: each step a commit (PromoteContext)."""
    check_candidate(version, artifact)
    runtime, say = ctx.runtime, ctx.say
    plan, s, policy = _prepared(stack_file, name)
    champion = s.versions[0]
    if len(s.versions) > 1:
        raise PromoteError(f"serving {name!r} runs a canary already ({s.versions[1].version}): let it finish first")
    if version == champion.version:
        raise PromoteError(f"{version!r} is the champion's version")
    signing = _signer(plan, policy, ctx.signing)

    say(f"{name}: evaluating {champion.version} and {version} on {policy.dataset} ({policy.metric})")
    scores = [
        parse_evaluation(runtime.evaluate(plan, s, a, policy.dataset), f"the evaluation of {a}")
        for a in (champion.artifact, artifact)
    ]
    verdict: Gate = gate(policy, *scores)
    out = Outcome(name, version, "refused", asdict(verdict) | {"reason": verdict.reason})
    commit = _Steps(ctx, stack_file, signing, out)
    text = stack_file.read_text()
    if not verdict.passed:
        say(f"{name}: {version} refused at the gate: {verdict.reason}")
        commit("refused", text, f"{subject(name, version, 'refused')}\n\n{verdict.reason}\n")
        return out
    say(f"{name}: {version} passes the gate: {verdict.reason}")
    candidate = {"version": version, "artifact": artifact, "share": policy.canary.share}
    commit(
        "canary",
        edit_serving(text, name, "canary", candidate),
        f"{subject(name, version, 'canary', str(policy.canary.share))}\n\n{verdict.reason}\n",
    )
    plan, s = _committed(stack_file, name)
    try:
        result = _canary(plan, s, version, runtime, out=out, say=say)
    except Exception as exc:  # any failure of the canary rolls it back: a canary is never left running unjudged
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        reason = f"the canary could not be judged: {first[:200]}"
        say(f"{name}: {reason}")
        result = Verdict(Window(0, 0, None, None), [reason])
    w = result.window
    figures = (
        f"{w.requests} requests, error rate {w.error_rate:.4f}, p95 "
        + ("n/a" if w.p95_ms is None else f"{w.p95_ms:.1f} ms")
        + ", mean confidence "
        + ("n/a" if w.mean_confidence is None else f"{w.mean_confidence:.4f}")
    )
    if result.passed:
        commit.end("promoted", "", figures)
    else:
        commit.end("rolled-back", "; ".join(result.crossed), figures)
    say(f"{name}: {version} {out.state}: {figures}")
    return out


ENDINGS = ("rollback", "promote")


def ending_problem(ending: str) -> str:
    """What is wrong with a canary's ending by hand, or nothing."""
    return "" if ending in ENDINGS else f"{ending!r} is not one of {', '.join(ENDINGS)}"


def end_canary(
    stack_file: Path,
    name: str,
    ending: str,
    ctx: PromoteContext,
) -> Outcome:
    """End a running canary by hand, without its verdict (one cut short: a push refused after it ran, a killed
    promote): roll the candidate back, or make it champion. One signed step, published before it acts."""
    if why := ending_problem(ending):
        raise PromoteError(f"--end: {why}")
    plan, s, policy = _prepared(stack_file, name)
    if len(s.versions) < 2:
        raise PromoteError(f"serving {name!r} runs no canary: there is nothing to end")
    signing = _signer(plan, policy, ctx.signing)
    version = s.versions[1].version
    out = Outcome(name, version, "", {}, note="ended by hand")
    commit = _Steps(ctx, stack_file, signing, out)
    if ending == "promote":
        commit.end("promoted", "", "Ended by hand: no canary verdict.")
    else:
        commit.end("rolled-back", "ended by hand", "")
    ctx.say(f"{name}: {version} {out.state} (ended by hand)")
    return out
