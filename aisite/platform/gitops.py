"""The handover to in-cluster GitOps (manifests/gitops/<site>/): a Flux GitRepository for the site repository and
a Pulumi Kubernetes Operator Stack that runs this project's program for the site's stack from it. Credentials are
referred to by Secret name and key only; the Secrets themselves are made by the site's operators."""

from __future__ import annotations

from typing import Any

from aisite.plan import GitopsPlan, Plan
from aisite.platform.common import labels, obj

FLUX_SOURCE = "source.toolkit.fluxcd.io/v1"
PKO = "pulumi.com/v1"
PULUMI_TOKEN = "PULUMI_ACCESS_TOKEN"


def secret_env_names(plan: Plan) -> list[str]:
    """The environment variables the stack reads its secrets from (password_from.env): the keys the credentials
    Secret must hold."""
    return sorted({str(s["env"]) for s in plan.secrets.values() if s.get("env")})


def _name(plan: Plan) -> str:
    return f"aisite-{plan.site}"


def git_repository(plan: Plan, g: GitopsPlan) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "url": g.repository,
        "ref": {"branch": g.branch},
        "interval": f"{g.interval_seconds}s",
        "timeout": "60s",
    }
    if g.git_secret:
        spec["secretRef"] = {"name": g.git_secret}
    if g.signers_secret:
        # The same signers the reconciler's allowed-signers file lists (checks require both).
        spec["verify"] = {"mode": "HEAD", "secretRef": {"name": g.signers_secret}}
    return obj(FLUX_SOURCE, "GitRepository", _name(plan), labels(plan), g.namespace, spec=spec)


def pulumi_stack(plan: Plan, g: GitopsPlan) -> dict[str, Any]:
    env = [*secret_env_names(plan), PULUMI_TOKEN]
    spec: dict[str, Any] = {
        "stack": g.pulumi_stack,
        "fluxSource": {
            "sourceRef": {"apiVersion": FLUX_SOURCE, "kind": "GitRepository", "name": _name(plan)},
            "dir": ".",  # Pulumi.yaml at the repository's root; stackConfigDir: stacks
        },
        "serviceAccountName": f"{_name(plan)}-pulumi",
        "refresh": True,
        # Re-run on the resync period even when the commit is the one applied: drift is reverted.
        "continueResyncOnCommitMatch": True,
        "resyncFrequencySeconds": max(60, g.interval_seconds),
        "destroyOnFinalize": False,
        "envRefs": {
            name: {"type": "Secret", "secret": {"name": g.credentials_secret, "key": name}} for name in sorted(env)
        },
    }
    if g.pulumi_backend:
        spec["backend"] = g.pulumi_backend
    # The source comes through Flux (its GitRepository holds the repository's credentials): no gitAuth here.
    return obj(PKO, "Stack", _name(plan), labels(plan), g.namespace, spec=spec)


def gitops_objects(plan: Plan) -> dict[str, list[dict[str, Any]]]:
    """File name -> objects, in apply order; none when the site names no repository."""
    g = plan.gitops
    if g is None:
        return {}
    account = f"{_name(plan)}-pulumi"
    return {
        "namespace.yaml": [obj("v1", "Namespace", g.namespace, labels(plan))],
        "rbac.yaml": [
            obj("v1", "ServiceAccount", account, labels(plan), g.namespace),
            # The operator's workspace pod authenticates through its service account (PKO v2's documented setup).
            obj(
                "rbac.authorization.k8s.io/v1",
                "ClusterRoleBinding",
                f"{g.namespace}:{account}:system:auth-delegator",
                labels(plan),
                roleRef={
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "system:auth-delegator",
                },
                subjects=[{"kind": "ServiceAccount", "name": account, "namespace": g.namespace}],
            ),
        ],
        "gitrepository.yaml": [git_repository(plan, g)],
        "stack.yaml": [pulumi_stack(plan, g)],
    }
