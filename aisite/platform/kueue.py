"""Kueue from the plan: a ResourceFlavor per GPU type (the nodes' labels and the GPU taint), a ClusterQueue per
tenant in one cohort with its quota per flavor, a LocalQueue in each tenant's namespace, and priority classes.

Topology-aware scheduling: the plan labels every rail node with its pod (three tiers), scalable unit and leaf
block; a `Topology` names those levels above the hostname, and a GPU type's flavor refers to it when every node of
that type sits in a unit (Kueue files a node without a level's label under an empty value, as if it were a unit of
its own: a flavor with such nodes stays without topology, and its jobs keep their node selector alone).

Rack-scale GPU types (NVL72) have a Topology of their own, `nvlink`: below the fabric's levels, the rack (the plan's
label) and the NVLink clique the GPU Operator's feature discovery labels each GPU node with (nvidia.com/gpu.clique,
<cluster UUID>.<clique ID>: the NVLink partition the fabric manager actually set up), then the host. A job that fits
in a rack asks for one clique: its pods share NVLink, within one rack."""

from __future__ import annotations

from typing import Any

from aisite.plan import GPU_TAINT, LABEL_PREFIX, Plan, TenantPlan
from aisite.platform.common import GPU_RESOURCE, labels, obj
from aisite.platform.dra import CHANNEL_RESOURCE, compute_domains
from aisite.platform.tenants import in_tenant

API = "kueue.x-k8s.io/v1beta2"
LOCAL_QUEUE = "jobs"  # the queue a tenant's jobs name (kueue.x-k8s.io/queue-name: jobs)
PRIORITIES = (
    ("high", 1000, "Runs first and may preempt lower priorities in its queue"),
    ("normal", 100, "The default for training and benchmark jobs"),
    ("low", 10, "Backfill: preempted first"),
)


TOPOLOGY = "fabric"  # the Topology's name: the flavors' topologyName
RACK_TOPOLOGY = "nvlink"  # rack-scale GPU types' Topology
HOSTNAME = "kubernetes.io/hostname"
POD_LEVEL = f"{LABEL_PREFIX}/pod"
UNIT_LEVEL = f"{LABEL_PREFIX}/scalable-unit"
RACK_LEVEL = f"{LABEL_PREFIX}/rack"
CLIQUE_LEVEL = "nvidia.com/gpu.clique"  # discovered on the node, not planned: never required of the plan's labels
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"


def flavor_name(gpu_type: str) -> str:
    return f"gpu-{gpu_type}"


def rack_scale(plan: Plan, gpu_type: str) -> bool:
    """Whether the GPU type's nodes are rack-scale trays (their racks in the plan)."""
    return any(n.rack for n in plan.by_role("gpu") if n.gpu and n.gpu.type == gpu_type)


def topology_levels(plan: Plan, racks: bool = False) -> tuple[str, ...]:
    """The fabric's levels, widest first, down to the host (with a rack-scale type's rack and clique above the host):
    what a Topology lists and a job may ask for."""
    gpu = plan.by_role("gpu")
    fabric = tuple(key for key in (POD_LEVEL, UNIT_LEVEL) if any(key in n.labels for n in gpu))
    return (*fabric, RACK_LEVEL, CLIQUE_LEVEL, HOSTNAME) if racks else (*fabric, HOSTNAME)


def topology_aware(plan: Plan, gpu_type: str) -> bool:
    """Whether the GPU type's flavor refers to a Topology: every node of that type carries every planned level."""
    nodes = [n for n in plan.by_role("gpu") if n.gpu and n.gpu.type == gpu_type]
    levels = [k for k in topology_levels(plan, rack_scale(plan, gpu_type))[:-1] if k != CLIQUE_LEVEL]
    return bool(nodes and levels) and all(key in n.labels for n in nodes for key in levels)


def topology_name(plan: Plan, gpu_type: str) -> str:
    return RACK_TOPOLOGY if rack_scale(plan, gpu_type) else TOPOLOGY


def topologies(plan: Plan) -> list[dict[str, Any]]:
    """The Topologies the topology-aware flavors name: the fabric's, and the racks' where a rack-scale type has one."""
    names = sorted({topology_name(plan, g) for g in plan.kubernetes.gpu_types if topology_aware(plan, g)})
    return [
        obj(
            API,
            "Topology",
            name,
            labels(plan),
            spec={"levels": [{"nodeLabel": k} for k in topology_levels(plan, name == RACK_TOPOLOGY)]},
        )
        for name in names
    ]


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
            | ({"topologyName": topology_name(plan, g)} if topology_aware(plan, g) else {}),
        )
        for g in plan.kubernetes.gpu_types
    ]


def cluster_queue(plan: Plan, t: TenantPlan) -> dict[str, Any]:
    flavors = []
    covered = [GPU_RESOURCE, CHANNEL_RESOURCE] if compute_domains(plan) else [GPU_RESOURCE]
    for gtype, n in t.flavors:
        res: dict[str, Any] = {"name": GPU_RESOURCE, "nominalQuota": n}
        if t.borrowing_limit is not None:
            res["borrowingLimit"] = t.borrowing_limit
        if t.lending_limit is not None:
            res["lendingLimit"] = t.lending_limit
        resources = [res]
        if compute_domains(plan):
            # One channel a pod of a multi-node job on racks: as many as the type has trays, never the constraint.
            trays = sum(1 for node in plan.by_role("gpu") if node.rack and node.gpu and node.gpu.type == gtype)
            resources.append({"name": CHANNEL_RESOURCE, "nominalQuota": trays})
        flavors.append({"name": flavor_name(gtype), "resources": resources})
    return obj(
        API,
        "ClusterQueue",
        t.name,
        labels(plan, tenant=t.name),
        spec={
            "cohortName": plan.site,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": t.namespace}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{"coveredResources": covered, "flavors": flavors}] if flavors else [],
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
    return [
        *topologies(plan),
        *resource_flavors(plan),
        *priority_classes(plan),
        *(cluster_queue(plan, t) for t in plan.tenants),
    ]
