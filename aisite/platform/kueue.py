"""Kueue from the plan: a ResourceFlavor per GPU type (the nodes' labels and the GPU taint), a ClusterQueue per
tenant in one cohort with its quota per flavor, a LocalQueue in each tenant's namespace, and priority classes.

Topology-aware scheduling: the plan labels every rail node with its pod (three tiers), scalable unit and leaf
block; a `Topology` names those levels above the hostname, and a GPU type's flavor refers to it when every node of
that type sits in a unit (Kueue files a node without a level's label under an empty value, as if it were a unit of
its own: a flavor with such nodes stays without topology, and its jobs keep their node selector alone)."""

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


TOPOLOGY = "fabric"  # the Topology's name: the flavors' topologyName
HOSTNAME = "kubernetes.io/hostname"
POD_LEVEL = f"{LABEL_PREFIX}/pod"
UNIT_LEVEL = f"{LABEL_PREFIX}/scalable-unit"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"


def flavor_name(gpu_type: str) -> str:
    return f"gpu-{gpu_type}"


def topology_levels(plan: Plan) -> tuple[str, ...]:
    """The fabric's levels, widest first, down to the host: what a Topology lists and a job may ask for."""
    gpu = plan.by_role("gpu")
    return (*(key for key in (POD_LEVEL, UNIT_LEVEL) if any(key in n.labels for n in gpu)), HOSTNAME)


def topology_aware(plan: Plan, gpu_type: str) -> bool:
    """Whether the GPU type's flavor refers to the Topology: every node of that type carries every level."""
    nodes = [n for n in plan.by_role("gpu") if n.gpu and n.gpu.type == gpu_type]
    levels = topology_levels(plan)[:-1]
    return bool(nodes and levels) and all(key in n.labels for n in nodes for key in levels)


def topology(plan: Plan) -> dict[str, Any]:
    return obj(
        API, "Topology", TOPOLOGY, labels(plan), spec={"levels": [{"nodeLabel": k} for k in topology_levels(plan)]}
    )


def resource_flavors(plan: Plan) -> list[dict[str, Any]]:
    # Admitted pods land on nodes of the flavor's GPU type and tolerate the GPU taint those nodes carry.
    toleration = {"key": GPU_TAINT.key, "operator": "Equal", "value": GPU_TAINT.value, "effect": GPU_TAINT.effect}
    return [
        obj(
            API,
            "ResourceFlavor",
            flavor_name(g),
            labels(plan),
            spec={"nodeLabels": {f"{LABEL_PREFIX}/gpu-type": g}, "tolerations": [toleration]}
            | ({"topologyName": TOPOLOGY} if topology_aware(plan, g) else {}),
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
    """Cluster-wide Kueue objects, the Topology and flavors first (the queues name them)."""
    tas = any(topology_aware(plan, g) for g in plan.kubernetes.gpu_types)
    return [
        *([topology(plan)] if tas else []),
        *resource_flavors(plan),
        *priority_classes(plan),
        *(cluster_queue(plan, t) for t in plan.tenants),
    ]
