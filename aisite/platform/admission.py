"""What keeps a tenant's pods off quarantined nodes whatever the tenant writes: a ValidatingAdmissionPolicy bound to
the tenants' namespaces. Tenants hold `edit`, so without it a pod that tolerates every taint (`operator: Exists`
with no key) or names its node (`spec.nodeName`, which skips the scheduler and so every taint) runs on a node the
health check tainted and cordoned."""

from __future__ import annotations

from typing import Any

from aisite.plan import LABEL_PREFIX, UNHEALTHY_TAINT, Plan
from aisite.platform.common import labels, obj

POLICY = "aisite-tenant-placement"
# The taints a tenant's pod may not tolerate: the health quarantine's, and the cordon's (which the scheduler reads
# as this taint: tolerating it places a pod on a cordoned node).
FORBIDDEN_TOLERATIONS = (UNHEALTHY_TAINT, "node.kubernetes.io/unschedulable")
_KEYS = ", ".join(f"'{k}'" for k in FORBIDDEN_TOLERATIONS)

# (CEL expression, message). nodeName on CREATE only: the scheduler binds through pods/binding, and later updates
# of a scheduled pod carry the node it was given. Tolerations can be added by an update: checked on both.
VALIDATIONS: tuple[tuple[str, str], ...] = (
    (
        "request.operation != 'CREATE' || !has(object.spec.nodeName) || object.spec.nodeName == ''",
        "tenant pods are placed by the scheduler: spec.nodeName is not allowed (it bypasses the quarantine's taint)",
    ),
    (
        "!has(object.spec.tolerations) || object.spec.tolerations.all(t, has(t.key) && t.key != '' && "
        f"!(t.key in [{_KEYS}]))",
        "tenant pods may not tolerate every taint (a toleration without a key) nor "
        + " or ".join(FORBIDDEN_TOLERATIONS),
    ),
)

# The namespaces the policy holds: every tenant's (their Namespace carries the tenant label), as Kueue's.
TENANT_NAMESPACES = {"matchExpressions": [{"key": f"{LABEL_PREFIX}/tenant", "operator": "Exists"}]}


def admission_objects(plan: Plan) -> list[dict[str, Any]]:
    policy = obj(
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
        POLICY,
        labels(plan),
        spec={
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "validations": [{"expression": e, "message": m, "reason": "Forbidden"} for e, m in VALIDATIONS],
        },
    )
    binding = obj(
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
        POLICY,
        labels(plan),
        spec={
            "policyName": POLICY,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": TENANT_NAMESPACES},
        },
    )
    return [policy, binding]
