"""The serving part of the plan: each served model's versions (the champion, and a candidate while its canary
runs), their shares of the requests and replicas, and its promotion policy."""

from __future__ import annotations

import math

from aisite.model import Serving, Site
from aisite.plan.kubernetes import gpu_inventory
from aisite.plan.types import CanaryPlan, PromotionPlan, ServedVersion, ServingPlan

KSERVE_ADDON = "kserve"  # the addon that makes served models InferenceServices (platform/serving.py)


def candidate_replicas(replicas: int, share: int) -> int:
    """A candidate's replicas: its share of the champion's, at least one."""
    return max(1, math.ceil(replicas * share / 100))


def versions(s: Serving) -> tuple[ServedVersion, ...]:
    c = s.candidate
    champion = ServedVersion(
        "champion", s.champion.version, s.champion.artifact, 100 - (c.share if c else 0), s.replicas
    )
    if c is None:
        return (champion,)
    return (
        champion,
        ServedVersion("candidate", c.version, c.artifact, c.share, candidate_replicas(s.replicas, c.share)),
    )


def promotion_plan(s: Serving) -> PromotionPlan | None:
    p = s.promotion
    if p is None:
        return None
    limits = p.canary.limits
    canary = CanaryPlan(
        p.canary.share,
        p.canary.seconds,
        p.canary.min_requests,
        limits.max_error_rate,
        limits.max_p95_latency_ms,
        limits.min_mean_confidence,
    )
    e = p.evaluation
    return PromotionPlan(p.training, e.dataset, e.metric, e.margin, canary, tuple(p.signers), p.automatic)


def serving_plans(site: Site) -> tuple[ServingPlan, ...]:
    types = list(gpu_inventory(site))
    return tuple(
        ServingPlan(
            s.name,
            s.tenant,
            f"tenant-{s.tenant}",
            s.model,
            s.runtime,
            s.image,
            s.gpus,
            (s.gpu_type or (types[0] if types else "")) if s.gpus else "",
            s.cpus,
            s.memory_gi,
            versions(s),
            promotion_plan(s),
        )
        for s in site.serving
    )
