"""Notebooks for every tenant: Zero to JupyterHub's chart (the jupyterhub addon), its servers in the tenants'
namespaces under their quotas, Pod Security and Kueue queue, as their jobs run.

Why JupyterHub's chart and not Kubeflow Notebooks: Kubeflow's notebook controller comes with its central dashboard,
profiles controller and Istio for its access checks, none of which the site runs; JupyterHub (4.4.0, pinned,
rendered by Helm like every release) needs only its hub and proxy, logs users in through the site's own provider,
and its KubeSpawner starts each server as a pod where the profile says.

How a tenant's profiles reach the hub: as data, the values' `custom.aisite.tenants` (each tenant's groups,
namespace and KubeSpawner profiles), read by the project's hub code (platform/hub_profiles.py, the release's
`hub.extraConfig`). The hub's rights in a tenant's namespace are a Role and RoleBinding there (the chart's own Role
is in its namespace only); its NetworkPolicies and the tenant's let the proxy and hub reach the servers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aisite.plan import Plan, TenantPlan
from aisite.platform.admission import TENANT_NAMESPACES
from aisite.platform.common import GPU_RESOURCE, labels
from aisite.platform.jobs import (
    DATASETS_MOUNT,
    NON_ROOT_UID,
    RESTRICTED_CONTAINER,
    RUNTIME_SECCOMP,
    gpu_placement,
    queue_labels,
)
from aisite.platform.tenants import in_tenant

ADDON = "jupyterhub"
NAMESPACE = "jupyterhub"
RELEASE = "jupyterhub"
# The chart's names at an empty fullnameOverride (templates/_helpers-names.tpl): the hub's ServiceAccount, and the
# component labels it gives the hub, proxy and user pods.
HUB_SERVICE_ACCOUNT = "hub"
SERVER_PORT = 8888  # a user server's (the chart's proxy and hub NetworkPolicies name it)
HUB_API_PORT = 8081
# The client secret of the site's login provider: the site creates this Secret in the jupyterhub namespace;
# OAuthenticator reads OAUTH_CLIENT_SECRET (its client_secret's default).
LOGIN_SECRET, LOGIN_SECRET_KEY = "jupyterhub-oauth", "client-secret"
HUB_CODE = Path(__file__).with_name("hub_profiles.py")
# The chart's hub Role (templates/hub/rbac.yaml), granted in each tenant's namespace.
HUB_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods", "persistentvolumeclaims", "secrets", "services"],
        "verbs": ["get", "watch", "list", "create", "delete"],
    },
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "watch", "list"]},
]
SERVER_SELECTOR = {"component": "singleuser-server"}


def uses_notebooks(plan: Plan) -> bool:
    return ADDON in plan.kubernetes.addons and bool(plan.tenants)


def _node_gpus(plan: Plan) -> dict[str, int]:
    """GPUs per node of each GPU type (the most any node of the type has)."""
    out: dict[str, int] = {}
    for n in plan.by_role("gpu"):
        if n.gpu and n.gpu.count:
            out[n.gpu.type] = max(out.get(n.gpu.type, 0), n.gpu.count)
    return out


def gpu_choices(quota: int, per_node: int) -> list[int]:
    """What a notebook may ask for of a GPU type: powers of two up to what both the tenant's quota and one node
    hold, and that most itself."""
    most = min(quota, per_node)
    out = [n for n in (1, 2, 4, 8, 16, 32, 64) if n <= most]
    return out + ([most] if most and most not in out else [])


def _resources(cpus: int, memory_gi: int) -> dict[str, Any]:
    return {"cpu_guarantee": cpus, "cpu_limit": cpus, "mem_guarantee": f"{memory_gi}G", "mem_limit": f"{memory_gi}G"}


def tenant_profiles(plan: Plan, t: TenantPlan) -> list[dict[str, Any]]:
    """KubeSpawner's profiles of a tenant: CPUs, and one per GPU type it has quota for, sized from the quota."""
    nb = plan.kubernetes.notebooks
    common = {"namespace": t.namespace, "extra_labels": labels(plan, tenant=t.name) | queue_labels(plan)}
    out: list[dict[str, Any]] = [
        {
            "slug": f"{t.name}-cpu",
            "display_name": f"{t.name}: CPU ({nb.cpus} CPUs, {nb.memory_gi} GiB)",
            "kubespawner_override": common | _resources(nb.cpus, nb.memory_gi),
        }
    ]
    if plan.kubernetes.gpu_allocation == "dra":
        return out  # KubeSpawner asks for resources, not DRA claims: CPU only (`aisite validate` says so)
    per_node = _node_gpus(plan)
    for gpu_type, quota in t.flavors:
        choices = gpu_choices(quota, per_node.get(gpu_type, 0))
        if not choices:
            continue
        placement = gpu_placement(gpu_type, 1)
        out.append(
            {
                "slug": f"{t.name}-{gpu_type}".lower(),
                "display_name": f"{t.name}: {gpu_type} GPUs",
                "description": f"up to {choices[-1]} of the tenant's {quota} {gpu_type} GPUs",
                "kubespawner_override": common
                | {
                    "image": nb.gpu_image,
                    "node_selector": placement["nodeSelector"],
                    "tolerations": placement["tolerations"],
                },
                "profile_options": {
                    "gpus": {
                        "display_name": "GPUs",
                        "choices": {
                            str(n): {
                                "display_name": f"{n} x {gpu_type}",
                                "kubespawner_override": {"extra_resource_limits": {GPU_RESOURCE: str(n)}}
                                | _resources(nb.cpus_per_gpu * n, nb.memory_gi_per_gpu * n),
                            }
                            for n in choices
                        },
                    }
                },
            }
        )
    return out


def notebook_images(plan: Plan) -> list[str]:
    """The images the tenants' profiles start (the hub starts them: they are in its values, in no object), the
    CPU profiles' default first."""
    images = [plan.kubernetes.notebooks.image]
    for t in plan.tenants:
        for p in tenant_profiles(plan, t):
            image = p["kubespawner_override"].get("image")
            if image and image not in images:
                images.append(image)
    return images


def _to_servers() -> dict[str, Any]:
    """An egress rule to the user servers in the tenants' namespaces."""
    return {
        "to": [{"namespaceSelector": TENANT_NAMESPACES, "podSelector": {"matchLabels": SERVER_SELECTOR}}],
        "ports": [{"port": SERVER_PORT}],
    }


def jupyterhub_values(plan: Plan) -> dict[str, Any]:
    nb = plan.kubernetes.notebooks
    assert nb.login is not None  # checked: the addon needs a login provider
    login = nb.login
    groups = sorted({g for t in plan.tenants for g in t.groups})
    image, _, tag = nb.image.rpartition(":")
    # Every tenant's servers alike: restricted's settings also pass a baseline tenant's namespace.
    security = RESTRICTED_CONTAINER | {"runAsNonRoot": True}
    storage: dict[str, Any] = {"capacity": f"{nb.home_gi}Gi"}
    if nb.storage_class:
        storage["dynamic"] = {"storageClass": nb.storage_class}
    if plan.exports:
        # Each tenant's own `datasets` claim (jobs.tenant_support): the same name in every tenant's namespace.
        storage["extraVolumes"] = {"datasets": {"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets"}}}
        storage["extraVolumeMounts"] = {"datasets": {"name": "datasets", "mountPath": DATASETS_MOUNT}}
    return {
        "hub": {
            "config": {
                "JupyterHub": {"authenticator_class": "generic-oauth"},
                # A user's groups are asked of the login provider again before every server starts (and at most
                # every 5 minutes otherwise), not only at login: someone removed from a tenant's group starts
                # nothing there once the provider says so (OAuthenticator's refresh_user, which needs the tokens
                # kept in auth state; the chart generates the key that encrypts them).
                "Authenticator": {"enable_auth_state": True, "refresh_pre_spawn": True, "auth_refresh_age": 300},
                "GenericOAuthenticator": {
                    "client_id": login.client_id,
                    "authorize_url": login.authorize_url,
                    "token_url": login.token_url,
                    "userdata_url": login.userdata_url,
                    "oauth_callback_url": login.callback_url,
                    "username_claim": login.username_claim,
                    # The provider's groups become the hub's, and only the tenants' groups log in.
                    "manage_groups": True,
                    "auth_state_groups_key": f"oauth_user.{login.groups_claim}",
                    "allowed_groups": groups,
                },
                # Restricted Pod Security in every tenant's namespace asks this of the servers.
                "KubeSpawner": {
                    "container_security_context": security,
                    "pod_security_context": RUNTIME_SECCOMP,
                },
            },
            "extraEnv": {
                "OAUTH_CLIENT_SECRET": {"valueFrom": {"secretKeyRef": {"name": LOGIN_SECRET, "key": LOGIN_SECRET_KEY}}}
            },
            "extraConfig": {"aisite-profiles": HUB_CODE.read_text()},
            "networkPolicy": {"interNamespaceAccessLabels": "accept", "egress": [_to_servers()]},
        },
        "proxy": {
            "service": {"type": "ClusterIP"},
            "chp": {"networkPolicy": {"egress": [_to_servers()]}},
        },
        "singleuser": {
            "image": {"name": image, "tag": tag},
            "uid": NON_ROOT_UID,
            # The node's metadata block needs a privileged init container, which no tenant's Pod Security admits;
            # an on-prem site has no cloud metadata server.
            "cloudMetadata": {"blockWithIptables": False},
            "storage": storage,
        },
        # The cluster's own scheduler places servers, with Kueue's admission: no user scheduler, placeholders or
        # image pullers on every node.
        "scheduling": {"userScheduler": {"enabled": False}, "userPlaceholder": {"enabled": False}},
        "prePuller": {"hook": {"enabled": False}, "continuous": {"enabled": False}},
        "cull": {"timeout": nb.idle_minutes * 60},
        "custom": {
            "aisite": {
                "tenants": [
                    {"groups": list(t.groups), "namespace": t.namespace, "profiles": tenant_profiles(plan, t)}
                    for t in plan.tenants
                ]
            }
        },
    }


def tenant_notebook_objects(plan: Plan, t: TenantPlan) -> list[dict[str, Any]]:
    """In a tenant's namespace: the hub's rights to start servers there, and their way in from the proxy and hub
    and out to the hub's API (the tenant's default-deny NetworkPolicy allows neither)."""
    hub_pods = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
        "podSelector": {"matchExpressions": [{"key": "component", "operator": "In", "values": ["hub", "proxy"]}]},
    }
    hub_api = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
        "podSelector": {"matchLabels": {"component": "hub"}},
    }
    rbac = "rbac.authorization.k8s.io/v1"
    return [
        in_tenant(plan, t, rbac, "Role", "jupyterhub-hub", rules=HUB_RULES),
        in_tenant(
            plan,
            t,
            rbac,
            "RoleBinding",
            "jupyterhub-hub",
            roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "jupyterhub-hub"},
            subjects=[{"kind": "ServiceAccount", "name": HUB_SERVICE_ACCOUNT, "namespace": NAMESPACE}],
        ),
        in_tenant(
            plan,
            t,
            "networking.k8s.io/v1",
            "NetworkPolicy",
            "notebooks",
            spec={
                "podSelector": {"matchLabels": SERVER_SELECTOR},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [hub_pods], "ports": [{"protocol": "TCP", "port": SERVER_PORT}]}],
                "egress": [{"to": [hub_api], "ports": [{"protocol": "TCP", "port": HUB_API_PORT}]}],
            },
        ),
    ]
