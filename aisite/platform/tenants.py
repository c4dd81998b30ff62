"""Per tenant: its namespace (Pod Security labels), GPU quota, default requests, RoleBindings for its groups, and a
default-deny NetworkPolicy with what a training job needs (DNS, its own namespace, storage, the API server)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aisite.plan import Plan, TenantPlan
from aisite.platform.common import GPU_RESOURCE, labels, obj, pod_security_labels
from aisite.platform.dra import GPU_DEVICE_CLASS, dra_gpus


def in_tenant(plan: Plan, t: TenantPlan, api_version: str, kind: str, name: str, **body: Any) -> dict[str, Any]:
    """An object in a tenant's namespace, labelled with the site and the tenant."""
    return obj(api_version, kind, name, labels(plan, tenant=t.name), t.namespace, **body)


def namespace(plan: Plan, t: TenantPlan) -> dict[str, Any]:
    # Training pods need no privileges (RDMA comes from device plugins): restricted, or baseline where MPI needs root.
    return obj("v1", "Namespace", t.namespace, labels(plan, tenant=t.name) | pod_security_labels(t.pod_security))


def quota(plan: Plan, t: TenantPlan) -> dict[str, Any]:
    # Extended resources are quota'd by requests only. Kueue admits within the flavors' quotas; this caps the
    # namespace whatever submits to it.
    return in_tenant(
        plan,
        t,
        "v1",
        "ResourceQuota",
        "gpu-quota",
        spec={"hard": {f"requests.{GPU_RESOURCE}": str(t.gpu_quota)} | _dra_quota(plan, t)},
    )


def _dra_quota(plan: Plan, t: TenantPlan) -> dict[str, str]:
    """Under DRA the pods claim GPUs instead of requesting nvidia.com/gpu: Kubernetes quotas a namespace's claims per
    DeviceClass as <class>.deviceclass.resource.k8s.io/devices (Kubernetes docs, Resource Quotas: quota for DRA)."""
    if not dra_gpus(plan):
        return {}
    return {f"{GPU_DEVICE_CLASS}.deviceclass.resource.k8s.io/devices": str(t.gpu_quota)}


def limit_range(plan: Plan, t: TenantPlan) -> dict[str, Any]:
    # A container that says nothing gets modest requests, so it is neither unschedulable nor unaccounted.
    return in_tenant(
        plan,
        t,
        "v1",
        "LimitRange",
        "defaults",
        spec={"limits": [{"type": "Container", "defaultRequest": {"cpu": "500m", "memory": "1Gi"}}]},
    )


def role_bindings(plan: Plan, t: TenantPlan) -> list[dict[str, Any]]:
    return [
        in_tenant(
            plan,
            t,
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            f"{group}-edit",
            roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            subjects=[{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
        )
        for group in t.groups
    ]


# NFSv4's port (RFC 7530, section 3.1: the server listens on TCP port 2049).
NFS_PORT = 2049


def _hosts(addresses: Iterable[str]) -> list[dict[str, Any]]:
    return [{"ipBlock": {"cidr": f"{a}/32"}} for a in sorted(set(addresses))]


def _tcp(port: int, end: int | None = None) -> dict[str, Any]:
    return {"protocol": "TCP", "port": port} | ({"endPort": end} if end is not None else {})


def storage_egress(plan: Plan) -> list[dict[str, Any]]:
    """What a tenant's pods may reach of the storage, and nothing else of its network: Ceph's monitors on their two
    messenger ports, its OSD and MDS hosts on the daemons' port range, its gateways' S3 port, the NFS servers' port.
    Mounts are made by the nodes (the CSI node plugins run on the host's network); this is for the jobs' own
    clients (S3, librados)."""
    out: list[dict[str, Any]] = []
    c = plan.ceph
    if c is not None:
        at = dict(c.addresses)
        out.append({"to": _hosts(a for _, a in c.mon_addresses), "ports": [_tcp(c.mon_v2_port), _tcp(c.mon_v1_port)]})
        daemons = {at[o.host] for o in c.osds} | {at[m] for m in c.mds}
        if daemons:
            out.append({"to": _hosts(daemons), "ports": [_tcp(*c.daemon_ports)]})
        if c.rgw:
            out.append({"to": _hosts(at[r] for r in c.rgw), "ports": [_tcp(c.rgw_port)]})
    if plan.exports:
        out.append({"to": _hosts(e.address for e in plan.exports), "ports": [_tcp(NFS_PORT)]})
    return out


def network_policy(plan: Plan, t: TenantPlan) -> dict[str, Any]:
    """Nothing in or out but the namespace itself, cluster DNS, the storage services (each address and port, not the
    storage network: storage_egress) and the API server (the VIP and every control-plane node: Calico applies
    policy after the Service's DNAT). The rails are secondary networks, outside NetworkPolicy."""
    k = plan.kubernetes
    api = [k.api_vip, *(n.management.address for n in plan.by_role("control-plane"))]
    dns = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
    }
    same: dict[str, Any] = {"podSelector": {}}
    return in_tenant(
        plan,
        t,
        "networking.k8s.io/v1",
        "NetworkPolicy",
        "default-deny-but-jobs",
        spec={
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [same]}],
            "egress": [
                {"to": [same]},
                {"to": [dns], "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                *storage_egress(plan),
                {
                    "to": [{"ipBlock": {"cidr": f"{a}/32"}} for a in dict.fromkeys(api)],
                    "ports": [{"protocol": "TCP", "port": k.api_port}],
                },
            ],
        },
    )


def tenant_objects(plan: Plan, t: TenantPlan) -> list[dict[str, Any]]:
    return [namespace(plan, t), quota(plan, t), limit_range(plan, t), *role_bindings(plan, t), network_policy(plan, t)]
