"""The platform on Kubernetes, from the plan: the Helm charts (`charts`) and the objects (`objects`).

One source for the Pulumi program, `aisite deploy` and `aisite render`; none builds its own.
"""

from __future__ import annotations

from typing import Any

from aisite.plan import Plan
from aisite.platform.admission import admission_objects
from aisite.platform.ceph_monitoring import ceph_monitoring_objects
from aisite.platform.charts import Chart, RemoteManifest, charts, release_namespaces, remote_manifests
from aisite.platform.common import labels, obj, pod_security_labels
from aisite.platform.health import health_objects
from aisite.platform.jobs import pinned_image, tenant_support, workload_objects
from aisite.platform.kueue import kueue_objects, local_queue
from aisite.platform.monitoring import monitoring_objects
from aisite.platform.notebooks import tenant_notebook_objects, uses_notebooks
from aisite.platform.rails import rail_objects, rail_quota
from aisite.platform.serving import serving_monitoring, serving_objects
from aisite.platform.storage import storage_classes
from aisite.platform.tenants import tenant_objects
from aisite.platform.trainer import training_runtime

# The releases' namespaces: applied before the releases, the other files after them.
NAMESPACES = "namespaces.yaml"
__all__ = ["NAMESPACES", "Chart", "RemoteManifest", "charts", "jobs", "objects", "remote_manifests"]


def objects(plan: Plan) -> dict[str, list[dict[str, Any]]]:
    """File name -> objects, in apply order: cluster-wide first, then each tenant's namespace and what is in it."""
    out: dict[str, list[dict[str, Any]]] = {}
    if namespaces := release_namespaces(plan):
        out[NAMESPACES] = namespaces
    kueue = "kueue" in plan.kubernetes.addons
    if kueue:
        out["kueue.yaml"] = kueue_objects(plan)
    if "training-operator" in plan.kubernetes.addons:
        out["trainer.yaml"] = [training_runtime(plan, pinned_image(plan, "pytorch"))]
    if plan.exports or plan.ceph:
        out["storage.yaml"] = storage_classes(plan)
    if "prometheus" in plan.kubernetes.addons:
        out["monitoring.yaml"] = monitoring_objects(plan) + ceph_monitoring_objects(plan) + serving_monitoring(plan)
    rails = "network-operator" in plan.kubernetes.addons and plan.kubernetes.rail_pod_addresses > 0
    if rails:
        out["rails.yaml"] = rail_objects(plan)
    notebooks = uses_notebooks(plan)
    for t in plan.tenants:
        extra = ([local_queue(plan, t)] if kueue else []) + ([rail_quota(plan, t)] if rails else [])
        extra += tenant_notebook_objects(plan, t) if notebooks else []
        out[f"tenant-{t.name}.yaml"] = tenant_objects(plan, t) + extra
    if plan.tenants:
        out["admission.yaml"] = admission_objects(plan)
    out["acceptance.yaml"] = [acceptance_namespace(plan)]
    if plan.health and plan.health.runner == "daemonset":
        out["health.yaml"] = health_objects(plan)
    return out


def acceptance_namespace(plan: Plan) -> dict[str, Any]:
    """Where `aisite accept` runs its jobs on a site: privileged, as they read the host (nsenter into the node's
    health check, DCGM diagnostics) and use its network and RDMA devices directly."""
    assert plan.acceptance is not None
    return obj("v1", "Namespace", plan.acceptance.namespace, labels(plan) | pod_security_labels("privileged"))


def jobs(plan: Plan) -> dict[str, list[dict[str, Any]]]:
    """File name -> objects: per tenant with workloads, its payloads and claim, then one file per workload and one
    per served model."""
    out: dict[str, list[dict[str, Any]]] = {}
    for t in plan.tenants:
        if t.name in {w.tenant for w in plan.workloads} | {s.tenant for s in plan.serving}:
            out[f"workloads/{t.name}.yaml"] = tenant_support(plan, t)
    for w in plan.workloads:
        out[f"workloads/{w.name}.yaml"] = workload_objects(plan, w)
    for s in plan.serving:
        out[f"workloads/serving-{s.name}.yaml"] = serving_objects(plan, s)
    return out
