"""What every platform object shares: the labels that say who made it and for which site and tenant."""

from __future__ import annotations

from typing import Any

from aisite.plan import LABEL_PREFIX, Plan

GPU_RESOURCE = "nvidia.com/gpu"
MANAGED_BY = {"app.kubernetes.io/managed-by": "aisite"}


def labels(plan: Plan, **extra: str) -> dict[str, str]:
    return MANAGED_BY | {f"{LABEL_PREFIX}/site": plan.site} | {f"{LABEL_PREFIX}/{k}": v for k, v in extra.items()}


def obj(
    api_version: str, kind: str, name: str, lbls: dict[str, str], namespace: str | None = None, **body: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = lbls
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **body}


def pod_security_labels(level: str) -> dict[str, str]:
    """A namespace's Pod Security labels: enforced, audited and warned at one level."""
    return {f"pod-security.kubernetes.io/{mode}": level for mode in ("enforce", "audit", "warn")}
