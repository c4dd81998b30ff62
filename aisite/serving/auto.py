"""Promotions nobody names a version for: `aisite promote STACK SERVING` without --version, and the reconciler's
own (`promotion.automatic`: `aisite promote STACK --automatic`, after each pass that applied the site).

The candidate is the newest checkpoint of the served model in the tenant's storage (models/NAME/VERSION.pt), when
no promotion step has been committed for it yet: the site repository's history is the record of what was judged,
so a refused or rolled-back checkpoint is not tried again each pass, and older ones (a former champion among them)
never are.
File names in the storage are hostile: only those that are a version (a DNS label) count.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from aisite.fields import field_problem
from aisite.loader import load_site
from aisite.plan import Plan, ServingPlan, build_plan
from aisite.serving.commits import decided
from aisite.serving.promote import VERSION, Outcome, PromoteContext, PromoteError, promote


def checkpoint(name: str, version: str) -> str:
    """Where a training run writes version VERSION of served model NAME, in the tenant's storage."""
    return f"models/{name}/{version}.pt"


def pending(found: Iterable[tuple[str, float]], judged: set[str], champion: str) -> str | None:
    """The newest checkpoint found (by modification time, then name; only names that are versions), unless it is
    the champion or judged already. Older ones are never taken: a newer one supersedes them, and a former champion
    or an old checkpoint does not come back."""
    versions = [(mtime, v) for v, mtime in found if field_problem(VERSION, v) is None]
    newest = max(versions)[1] if versions else None
    return None if newest in (None, champion) or newest in judged else newest


def _idle(s: ServingPlan, version: str | None, note: str) -> Outcome:
    return Outcome(s.name, version or "", "idle", {}, note=note)


def promote_pending(
    stack_file: Path,
    names: list[str] | None,
    ctx: PromoteContext,
) -> list[Outcome]:
    """For each served model named (None: each whose policy is automatic), the promotion of its newest unjudged
    checkpoint, or an `idle` outcome saying why there is none. One model's failure stops the others (the
    repository must be looked at first)."""
    plan: Plan = build_plan(load_site(stack_file))
    chosen = [s for s in plan.serving if s.promotion and (s.name in names if names else s.promotion.automatic)]
    missing = sorted(set(names or ()) - {s.name for s in chosen})
    if missing:
        known = ", ".join(s.name for s in plan.serving if s.promotion) or "none"
        raise PromoteError(f"site.serving: no served model {', '.join(missing)} with a promotion policy ({known})")
    outcomes = []
    for s in chosen:
        assert s.promotion is not None  # chosen for its policy
        if len(s.versions) > 1:
            outcomes.append(_idle(s, s.versions[1].version, "its canary is running"))
            continue
        found = ctx.runtime.checkpoints(plan, s)
        # Where the site verifies its commits, only steps signed as the policy trusts say what was judged: the
        # allowed signers the steps themselves are verified against (the CLI's are the stack's).
        signers = (
            ctx.signing.allowed_signers if ctx.signing else tuple(plan.gitops.allowed_signers if plan.gitops else ())
        )
        trust = (signers, s.promotion.signers) if signers else None
        version = pending(found, decided(ctx.repo, stack_file, s.name, trust), s.versions[0].version)
        if version is None:
            ctx.say(f"{s.name}: no new checkpoint ({len(found)} in models/{s.name}/, each judged or the champion)")
            outcomes.append(_idle(s, None, "no checkpoint newer than those judged"))
            continue
        ctx.say(f"{s.name}: {version} is the newest checkpoint, and not judged yet")
        outcomes.append(promote(stack_file, s.name, version, checkpoint(s.name, version), ctx))
    return outcomes
