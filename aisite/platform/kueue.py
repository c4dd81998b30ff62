"""Kueue from the plan: a ResourceFlavor per GPU type (the nodes' labels and the GPU taint), a ClusterQueue per
tenant in one cohort with its quota per flavor, a LocalQueue in each tenant's namespace, and priority classes."""

from __future__ import annotations

from typing import Any

from aisite.plan import GPU_TAINT, LABEL_PREFIX, Plan, TenantPlan
from aisite.platform.common import GPU_RESOURCE, labels, obj
from aisite.platform.tenants import in_tenant

API = "kueue.x-k8s.io/v1beta2"
LOCAL_QUEUE = "jobs"  # the queue a tenant's jobs name (kueue.x-k8s.io/queue-name: jobs)
PRIORITIES = (
    ("high", 1000, "Runs first and may preempt lower priorities in its queue"),
    ("normal", 100, "The default for training and benchmark jobs"),
    ("low", 10, "Backfill: preempted first"),
)


def flavor_name(gpu_type: str) -> str:
    return f"gpu-{gpu_type}"


def resource_flavors(plan: Plan) -> list[dict[str, Any]]:
    # Admitted pods land on nodes of the flavor's GPU type and tolerate the GPU taint those nodes carry.
    toleration = {"key": GPU_TAINT.key, "operator": "Equal", "value": GPU_TAINT.value, "effect": GPU_TAINT.effect}
    return [
        obj(
            API,
            "ResourceFlavor",
            flavor_name(g),
            labels(plan),
            spec={"nodeLabels": {f"{LABEL_PREFIX}/gpu-type": g}, "tolerations": [toleration]},
        )
        for g in plan.kubernetes.gpu_types
    ]


def cluster_queue(plan: Plan, t: TenantPlan) -> dict[str, Any]:
    flavors = []
    for gtype, n in t.flavors:
        res: dict[str, Any] = {"name": GPU_RESOURCE, "nominalQuota": n}
        if t.borrowing_limit is not None:
            res["borrowingLimit"] = t.borrowing_limit
        if t.lending_limit is not None:
            res["lendingLimit"] = t.lending_limit
        flavors.append({"name": flavor_name(gtype), "resources": [res]})
    return obj(
        API,
        "ClusterQueue",
        t.name,
        labels(plan, tenant=t.name),
        spec={
            "cohortName": plan.site,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": t.namespace}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{"coveredResources": [GPU_RESOURCE], "flavors": flavors}] if flavors else [],
            "preemption": {
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "LowerPriority"},
                "withinClusterQueue": "LowerPriority",
            },
        },
    )


def local_queue(plan: Plan, t: TenantPlan) -> dict[str, Any]:
    return in_tenant(plan, t, API, "LocalQueue", LOCAL_QUEUE, spec={"clusterQueue": t.name})


def priority_classes(plan: Plan) -> list[dict[str, Any]]:
    return [
        obj(API, "WorkloadPriorityClass", name, labels(plan), value=value, description=text)
        for name, value, text in PRIORITIES
    ]


def kueue_objects(plan: Plan) -> list[dict[str, Any]]:
    """Cluster-wide Kueue objects, flavors first (the queues name them)."""
    return [*resource_flavors(plan), *priority_classes(plan), *(cluster_queue(plan, t) for t in plan.tenants)]
