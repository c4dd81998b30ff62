"""Kubernetes objects of a plan that are known before the cluster exists: tenants and their GPU quotas."""

from __future__ import annotations

from typing import Any

from aisite.plan import LABEL_PREFIX, Plan, TenantPlan
from aisite.render.inventory import to_yaml

GPU_RESOURCE = "nvidia.com/gpu"


def _labels(plan: Plan, tenant: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/managed-by": "aisite",
        f"{LABEL_PREFIX}/site": plan.site,
        f"{LABEL_PREFIX}/tenant": tenant,
    }


def tenant_objects(plan: Plan, t: TenantPlan) -> list[dict[str, Any]]:
    labels = _labels(plan, t.name)
    objs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": t.namespace, "labels": labels},
        },
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gpu-quota", "namespace": t.namespace, "labels": labels},
            # Extended resources are quota'd by requests only.
            "spec": {"hard": {f"requests.{GPU_RESOURCE}": str(t.gpu_quota)}},
        },
    ]
    for group in t.groups:
        objs.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": f"{group}-edit", "namespace": t.namespace, "labels": labels},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
            }
        )
    return objs


def manifests(plan: Plan) -> dict[str, list[dict[str, Any]]]:
    """File name -> objects, in apply order."""
    return {f"tenant-{t.name}.yaml": tenant_objects(plan, t) for t in plan.tenants}


def manifest_files(plan: Plan) -> dict[str, str]:
    header = f"# Rendered by aisite for site {plan.site}; do not edit.\n"
    return {name: header + "".join("---\n" + to_yaml(obj) for obj in objs) for name, objs in manifests(plan).items()}
