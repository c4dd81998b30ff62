"""The serving workloads' objects: each served model's versions and the proxy that splits requests between them.

- Each version (the champion, and a candidate while its canary runs) is the project's model server
  (payloads/serve.py: KServe's v1 protocol, /metrics) in the pinned PyTorch image, loading its checkpoint read-only
  from the tenant's datasets claim: a KServe InferenceService in its Standard (raw Deployment) mode where the site
  installs KServe, else a Deployment. Either way a Service of the project's selects its pods.
- The proxy (HAProxy, the same program the lab runs from Debian's package) is the model's one address, the Service
  named after it: it sends each version its share of the requests by weight and exports per-version requests,
  errors and latency for Prometheus. KServe's own split (canaryTrafficPercent) exists only in its Knative mode,
  which needs Knative and Istio; the weighted proxy works the same with or without KServe.

Pods run at the tenant's Pod Security level and are admitted by Kueue against its quota (the Deployment
integration) like its jobs.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from aisite.plan import LABEL_PREFIX, Plan, ServedVersion, ServingPlan
from aisite.plan.serving import KSERVE_ADDON
from aisite.platform.common import labels, obj
from aisite.platform.gpus import gpu_request
from aisite.platform.jobs import (
    DATASETS_MOUNT,
    PAYLOAD_DIR,
    container_security,
    gpu_placement,
    pinned_image,
    pod_security_context,
    queue_labels,
    tenant_plan,
)
from aisite.platform.monitoring import NAMESPACE as MONITORING_NAMESPACE
from aisite.platform.monitoring import grafana_dashboard, query_variable

SERVER_PORT = 8080  # the model server's HTTP port: predictions and /metrics
PROXY_PORT = 8080
PROXY_METRICS_PORT = 8405  # HAProxy's Prometheus exporter
# The official haproxy image runs as its `haproxy` user (uid 99).
PROXY_UID = 99
KSERVE_MODE = {"serving.kserve.io/deploymentMode": "Standard"}
# What a served model's pods carry (and a promotion on a site reads back from them).
SERVING_LABEL = f"{LABEL_PREFIX}/serving"
ROLE_LABEL = f"{LABEL_PREFIX}/role"
VERSION_LABEL = f"{LABEL_PREFIX}/model-version"
PROXY_CONFIG = f"{LABEL_PREFIX}/proxy-config"  # the proxy pods' annotation: their configuration's digest
ROLES = ("champion", "candidate")


def uses_kserve(plan: Plan) -> bool:
    """Where the site installs KServe its models are InferenceServices; else Deployments and Services."""
    return KSERVE_ADDON in plan.kubernetes.addons


def version_name(s: ServingPlan, v: ServedVersion) -> str:
    """The version's objects' name: stable per role, so a promotion changes the champion's pods in place."""
    return f"{s.name}-{v.role}"


def server_image(plan: Plan, s: ServingPlan) -> str:
    return s.image or pinned_image(plan, "pytorch")


def proxy_image(plan: Plan) -> str:
    return pinned_image(plan, "haproxy")


def proxy_config(
    name: str, backends: list[tuple[str, str, int]], port: int, metrics_port: int, address: str = ""
) -> str:
    """HAProxy's configuration: (server name, host:port, share) each a weighted server, listening on `address`
    (all of a pod's addresses; the lab's loopback). The names are the versions' roles, so the exporter's
    per-server figures are per version. Nothing here comes from a node."""
    lines = [
        "global",
        "  log stdout format raw local0",
        "defaults",
        "  mode http",
        "  log global",
        "  option httplog",
        "  timeout connect 5s",
        "  timeout client 120s",
        "  timeout server 120s",
        "frontend serving",
        f"  bind {address}:{port}",
        f"  default_backend {name}",
        "frontend metrics",
        f"  bind {address}:{metrics_port}",
        "  http-request use-service prometheus-exporter if { path /metrics }",
        "  http-request return status 404",
        f"backend {name}",
        "  balance roundrobin",
        f"  option httpchk GET /v1/models/{name}",
        "  default-server check inter 5s init-addr last,libc,none",
    ]
    lines += [f"  server {server} {address} weight {share}" for server, address, share in backends]
    return "\n".join(lines) + "\n"


def server_args(s: ServingPlan, v: ServedVersion, checkpoint: str, port: int) -> list[str]:
    """The model server's arguments: the lab runs it with the same ones."""
    return [
        "--name",
        s.name,
        "--model",
        s.model,
        "--version",
        v.version,
        "--checkpoint",
        checkpoint,
        "--port",
        str(port),
        "--role",
        v.role,
    ]


def _storage() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts): what a model server and a promotion's Jobs read, the payloads and the tenant's storage
    read-only."""
    volumes = [
        {"name": "payloads", "configMap": {"name": "aisite-payloads"}},
        {"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}},
    ]
    mounts = [
        {"name": "payloads", "mountPath": PAYLOAD_DIR, "readOnly": True},
        {"name": "datasets", "mountPath": DATASETS_MOUNT, "readOnly": True},
    ]
    return volumes, mounts


def _server_pod(plan: Plan, s: ServingPlan, v: ServedVersion) -> dict[str, Any]:
    """The model server's pod spec (an InferenceService's predictor takes the same fields)."""
    t = tenant_plan(plan, s.tenant)
    gpus = gpu_request(plan, s.gpus, version_name(s, v), s.namespace, labels(plan, tenant=s.tenant, serving=s.name))
    cpu_mem = {"cpu": str(s.cpus), "memory": f"{s.memory_gi}Gi"}
    resources: dict[str, Any] = {"requests": cpu_mem | gpus.limits, "limits": cpu_mem | gpus.limits}
    if gpus.claims:
        resources["claims"] = gpus.container_claims
    probe = {"httpGet": {"path": f"/v1/models/{s.name}", "port": SERVER_PORT}, "periodSeconds": 5}
    container = {
        "name": "kserve-container" if uses_kserve(plan) else "server",
        "image": server_image(plan, s),
        "command": ["python3", f"{PAYLOAD_DIR}/serve.py"],
        "args": server_args(s, v, f"{DATASETS_MOUNT}/{v.artifact}", SERVER_PORT),
        "ports": [{"name": "http", "containerPort": SERVER_PORT, "protocol": "TCP"}],
        "readinessProbe": probe,
        "resources": resources,
        "volumeMounts": _storage()[1],
    } | container_security(t)
    spec: dict[str, Any] = {
        "containers": [container],
        "volumes": _storage()[0],
        "securityContext": pod_security_context(t),
    }
    if gpus.claims:
        spec["resourceClaims"] = gpus.claims
    return spec | gpu_placement(s.gpu_type, s.gpus)


# A promotion's Job ends within this (Kubernetes stops it), and is deleted this long after it ended where the
# promotion could not delete it (a killed promote).
JOB_DEADLINE_S = 1800
JOB_TTL_S = 3600
PROMOTION_ROLE = "promotion"  # its pods' role label, and its container's name


def promotion_job(plan: Plan, s: ServingPlan, name: str, script: str, args: list[str]) -> dict[str, Any]:
    """A step of a promotion run in the tenant's namespace, as its jobs run: a payload (evaluate.py, a checkpoint's
    score on the held-out set; checkpoints.py, the storage's listing) in the model server's image, with its
    payloads and read-only storage, at the tenant's Pod Security and admitted by Kueue in its queue. CPUs only:
    the serving's own CPUs and memory; its output's last line is the result."""
    t = tenant_plan(plan, s.tenant)
    lbls = labels(plan, tenant=s.tenant, serving=s.name, role=PROMOTION_ROLE)
    cpu_mem = {"cpu": str(s.cpus), "memory": f"{s.memory_gi}Gi"}
    container = {
        "name": PROMOTION_ROLE,
        "image": server_image(plan, s),
        "command": ["python3", f"{PAYLOAD_DIR}/{script}"],
        "args": args,
        "resources": {"requests": cpu_mem, "limits": cpu_mem},
        "volumeMounts": _storage()[1],
    } | container_security(t)
    pod = {
        "metadata": {"labels": lbls},
        "spec": {
            "restartPolicy": "Never",
            "containers": [container],
            "volumes": _storage()[0],
            "securityContext": pod_security_context(t),
        },
    }
    spec = {
        "backoffLimit": 0,
        "activeDeadlineSeconds": JOB_DEADLINE_S,
        "ttlSecondsAfterFinished": JOB_TTL_S,
        "suspend": bool(queue_labels(plan)),
        "template": pod,
    }
    return obj("batch/v1", "Job", name, lbls | queue_labels(plan), s.namespace, spec=spec)


def evaluation_job(plan: Plan, s: ServingPlan, artifact: str, dataset: str) -> dict[str, Any]:
    """evaluate.py on `artifact` and the held-out `dataset`, named for the checkpoint (a Job left by a killed
    promote is the one the next evaluation of it replaces)."""
    name = f"{s.name}-eval-{hashlib.sha256(artifact.encode()).hexdigest()[:8]}"
    args = ["--model", s.model, "--checkpoint", f"{DATASETS_MOUNT}/{artifact}", "--data", f"{DATASETS_MOUNT}/{dataset}"]
    return promotion_job(plan, s, name, "evaluate.py", [*args, "--threads", str(s.cpus)])


def listing_job(plan: Plan, s: ServingPlan, folder: str) -> dict[str, Any]:
    """checkpoints.py on `folder` of the tenant's storage."""
    return promotion_job(plan, s, f"{s.name}-checkpoints", "checkpoints.py", [f"{DATASETS_MOUNT}/{folder}"])


def _version_labels(plan: Plan, s: ServingPlan, v: ServedVersion) -> dict[str, str]:
    return labels(plan, tenant=s.tenant, serving=s.name, role=v.role)


def selector(s: ServingPlan, role: str | None = None) -> dict[str, str]:
    """The labels that select the model's pods (of one role)."""
    return {SERVING_LABEL: s.name} | ({ROLE_LABEL: role} if role else {})


def version_objects(plan: Plan, s: ServingPlan, v: ServedVersion) -> list[dict[str, Any]]:
    name = version_name(s, v)
    lbls = _version_labels(plan, s, v) | queue_labels(plan)
    pod_labels = lbls | {VERSION_LABEL: v.version}
    pod = _server_pod(plan, s, v)
    gpus = gpu_request(plan, s.gpus, name, s.namespace, labels(plan, tenant=s.tenant, serving=s.name))
    out: list[dict[str, Any]] = list(gpus.objects)
    if uses_kserve(plan):
        predictor = {"minReplicas": v.replicas, "maxReplicas": v.replicas, "labels": pod_labels} | pod
        isvc = obj(
            "serving.kserve.io/v1beta1", "InferenceService", name, lbls, s.namespace, spec={"predictor": predictor}
        )
        isvc["metadata"]["annotations"] = dict(KSERVE_MODE)
        out.append(isvc)
    else:
        template = {"metadata": {"labels": pod_labels}, "spec": pod}
        spec = {"replicas": v.replicas, "selector": {"matchLabels": selector(s, v.role)}, "template": template}
        out.append(obj("apps/v1", "Deployment", name, lbls, s.namespace, spec=spec))
    port = {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}
    out.append(obj("v1", "Service", name, lbls, s.namespace, spec={"selector": selector(s, v.role), "ports": [port]}))
    return out


def retired_roles(s: ServingPlan) -> list[str]:
    """The roles the model no longer has: the candidate once its canary ended."""
    return [role for role in ROLES if role not in {v.role for v in s.versions}]


def retired_objects(plan: Plan, s: ServingPlan) -> list[dict[str, Any]]:
    """The objects of a role the model no longer has: the names and kinds its version would have, to delete.
    Applying never removes an object, so the candidate's pods and GPUs would stay."""
    return [o for role in retired_roles(s) for o in version_objects(plan, s, ServedVersion(role, "", "", 0, 0))]


def retired_ids(plan: Plan) -> list[dict[str, str]]:
    """What the Workloads layer deletes after applying (playbooks/workloads.yml): each served model's retired
    objects, by kind and name."""
    return [
        {
            "api_version": o["apiVersion"],
            "kind": o["kind"],
            "namespace": o["metadata"]["namespace"],
            "name": o["metadata"]["name"],
        }
        for s in plan.serving
        for o in retired_objects(plan, s)
    ]


def proxy_objects(plan: Plan, s: ServingPlan) -> list[dict[str, Any]]:
    """The model's address: HAProxy splitting requests between its versions by their shares."""
    t = tenant_plan(plan, s.tenant)
    lbls = labels(plan, tenant=s.tenant, serving=s.name, role="proxy")
    backends = [(v.role, f"{version_name(s, v)}.{s.namespace}.svc:80", v.share) for v in s.versions]
    config = proxy_config(s.name, backends, PROXY_PORT, PROXY_METRICS_PORT)
    cm = obj("v1", "ConfigMap", f"{s.name}-proxy", lbls, s.namespace, data={"haproxy.cfg": config})
    security = pod_security_context(t)
    if t.pod_security == "restricted":
        security |= {"runAsUser": PROXY_UID, "runAsGroup": PROXY_UID, "fsGroup": PROXY_UID}
    container = {
        "name": "haproxy",
        "image": proxy_image(plan),
        "args": ["-f", "/usr/local/etc/haproxy/haproxy.cfg"],
        "ports": [
            {"name": "http", "containerPort": PROXY_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": PROXY_METRICS_PORT, "protocol": "TCP"},
        ],
        "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "2", "memory": "512Mi"}},
        "volumeMounts": [{"name": "config", "mountPath": "/usr/local/etc/haproxy", "readOnly": True}],
    } | container_security(t)
    pod = {
        # The configuration's digest in the template: a new split restarts the proxy with it.
        "metadata": {"labels": lbls, "annotations": {PROXY_CONFIG: _digest(config)}},
        "spec": {
            "containers": [container],
            "volumes": [{"name": "config", "configMap": {"name": f"{s.name}-proxy"}}],
            "securityContext": security,
        },
    }
    spec = {"replicas": 2, "selector": {"matchLabels": selector(s, "proxy")}, "template": pod}
    ports = [
        # Not "http": the ServiceMonitor's http endpoint is the servers' own /metrics.
        {"name": "proxy", "port": 80, "targetPort": "http", "protocol": "TCP"},
        {"name": "metrics", "port": PROXY_METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"},
    ]
    return [
        cm,
        obj("apps/v1", "Deployment", f"{s.name}-proxy", lbls | queue_labels(plan), s.namespace, spec=spec),
        obj("v1", "Service", s.name, lbls, s.namespace, spec={"selector": selector(s, "proxy"), "ports": ports}),
    ]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def monitor(plan: Plan, s: ServingPlan) -> dict[str, Any]:
    """Prometheus scrapes the proxy's per-version figures and each server's own (requests, latency, confidence)."""
    matched = {"matchLabels": selector(s)}
    endpoints = [{"port": "metrics", "path": "/metrics"}, {"port": "http", "path": "/metrics"}]
    spec = {"selector": matched, "endpoints": endpoints}
    return obj(
        "monitoring.coreos.com/v1", "ServiceMonitor", s.name, labels(plan, tenant=s.tenant), s.namespace, spec=spec
    )


def serving_objects(plan: Plan, s: ServingPlan) -> list[dict[str, Any]]:
    out = [o for v in s.versions for o in version_objects(plan, s, v)] + proxy_objects(plan, s)
    if "prometheus" in plan.kubernetes.addons:
        out.append(monitor(plan, s))
    return out


# The serving dashboard: the servers' own metrics (payloads/serve.py) and the proxy's (HAProxy's exporter).
SERVING_PANELS = (
    (
        "Requests per second by version",
        'sum by (model, role, version) (rate(aisite_serving_requests_total{model=~"$model"}[5m]))',
        "reqps",
    ),
    (
        "Error rate (5xx) by version",
        'sum by (model, role, version) (rate(aisite_serving_requests_total{model=~"$model",code=~"5.."}[5m])) / '
        'sum by (model, role, version) (rate(aisite_serving_requests_total{model=~"$model"}[5m]))',
        "percentunit",
    ),
    (
        "p95 latency by version",
        "histogram_quantile(0.95, sum by (model, role, version, le) "
        '(rate(aisite_serving_request_seconds_bucket{model=~"$model"}[5m])))',
        "s",
    ),
    (
        "Mean confidence (the quality proxy)",
        'sum by (model, role, version) (rate(aisite_serving_confidence_total{model=~"$model"}[5m])) / '
        'sum by (model, role, version) (rate(aisite_serving_answers_total{model=~"$model"}[5m]))',
        "percentunit",
    ),
    (
        "The proxy's split: responses by version",
        'sum by (proxy, server) (rate(haproxy_server_http_responses_total{proxy=~"$model"}[5m]))',
        "reqps",
    ),
    (
        "Champion and candidate versions (a promotion is the champion's version changing)",
        'max by (model, role, version) (aisite_serving_model_info{model=~"$model"})',
        "none",
    ),
)


def serving_dashboard(plan: Plan) -> dict[str, Any]:
    model = query_variable("model", "label_values(aisite_serving_model_info, model)")
    title = f"Served models ({plan.site})"
    return grafana_dashboard(f"aisite-serving-{plan.site}", title, ["aisite", "serving"], SERVING_PANELS, [model])


def serving_monitoring(plan: Plan) -> list[dict[str, Any]]:
    """The serving dashboard, where the site serves models (the Grafana sidecar loads it)."""
    if not plan.serving:
        return []
    return [
        obj(
            "v1",
            "ConfigMap",
            "aisite-serving-dashboard",
            labels(plan) | {"grafana_dashboard": "1"},
            MONITORING_NAMESPACE,
            data={"aisite-serving.json": json.dumps(serving_dashboard(plan), indent=1)},
        )
    ]
