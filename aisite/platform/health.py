"""The nodes' health check as a DaemonSet (site.health.runner: daemonset): a privileged pod on every node starts
the node's own check (roles/node_health's aisite-health.service, through nsenter into the host) every interval,
so the check is scheduled and seen through Kubernetes while what it reads and writes stays the host's."""

from __future__ import annotations

from typing import Any

from aisite.plan import Plan
from aisite.platform.common import labels, obj, pod_security_labels
from aisite.platform.jobs import pinned_image

NAMESPACE = "aisite-health"


def health_objects(plan: Plan) -> list[dict[str, Any]]:
    assert plan.health is not None
    interval = plan.health.interval_s
    script = (
        "while true; do nsenter -t 1 -m -u -n -i -- systemctl start aisite-health.service "
        f'|| echo "the check failed to run"; sleep {interval}; done'
    )
    lbls = labels(plan, component="health")
    pod = {
        "metadata": {"labels": lbls},
        "spec": {
            "hostPID": True,  # nsenter into PID 1's namespaces: the host's systemd runs the check
            # It starts a host unit and reads nothing of the API: no service-account token in the pod.
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "priorityClassName": "system-node-critical",
            "tolerations": [{"operator": "Exists"}],  # every node, quarantined ones included
            "containers": [
                {
                    "name": "check",
                    "image": pinned_image(plan, "dcgm"),
                    "command": ["sh", "-c", script],
                    "securityContext": {"privileged": True},
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
                }
            ],
        },
    }
    return [
        obj("v1", "Namespace", NAMESPACE, labels(plan) | pod_security_labels("privileged")),
        obj(
            "apps/v1",
            "DaemonSet",
            "aisite-health",
            lbls,
            NAMESPACE,
            spec={
                "selector": {"matchLabels": lbls},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
                "template": pod,
            },
        ),
    ]
