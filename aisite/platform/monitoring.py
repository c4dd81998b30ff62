"""GPU monitoring on kube-prometheus-stack: the DCGM exporter's metric list, a Grafana dashboard (loaded by the
Grafana sidecar from a labelled ConfigMap) and alert rules. Every metric the dashboard and the alerts use is in
the exporter's list, which tests check."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from aisite.plan import Plan
from aisite.platform.common import labels, obj

NAMESPACE = "monitoring"
# What the DCGM exporter collects (its CSV format: field, Prometheus type, help). The exporter's own defaults leave
# the ECC counters out; XID, temperature, power, utilisation and framebuffer are the dashboard's.
DCGM_METRICS = (
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors."),
)
GPU_TEMPERATURE_LIMIT_C = 85


def dcgm_metrics_csv() -> str:
    return "".join(f"{name}, {kind}, {text}\n" for name, kind, text in DCGM_METRICS)


# (title, PromQL, unit): per node (Hostname) and, through the exporter's pod mapping, per namespace.
PANELS = (
    ("GPU utilisation by node", 'avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL{Hostname=~"$node"})', "percent"),
    ("GPU utilisation by namespace", 'avg by (namespace) (DCGM_FI_DEV_GPU_UTIL{namespace=~"$namespace"})', "percent"),
    ("Framebuffer used by node", 'sum by (Hostname) (DCGM_FI_DEV_FB_USED{Hostname=~"$node"})', "decmbytes"),
    ("Framebuffer used by namespace", 'sum by (namespace) (DCGM_FI_DEV_FB_USED{namespace=~"$namespace"})', "decmbytes"),
    ("GPU temperature", 'max by (Hostname, gpu) (DCGM_FI_DEV_GPU_TEMP{Hostname=~"$node"})', "celsius"),
    ("Power draw by node", 'sum by (Hostname) (DCGM_FI_DEV_POWER_USAGE{Hostname=~"$node"})', "watt"),
    ("Last XID error", 'max by (Hostname, gpu) (DCGM_FI_DEV_XID_ERRORS{Hostname=~"$node"})', "none"),
)


def grafana_dashboard(
    uid: str, title: str, tags: list[str], panels: Iterable[tuple[str, str, str]], variables: list[dict[str, Any]]
) -> dict[str, Any]:
    """A Grafana dashboard of (title, PromQL, unit) panels, two a row; a title with "versions" is a state timeline."""
    return {
        "uid": uid,
        "title": title,
        "tags": tags,
        "schemaVersion": 39,
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": variables},
        "panels": [
            {
                "id": i + 1,
                "type": "state-timeline" if "versions" in title else "timeseries",
                "title": title,
                "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [{"expr": expr, "refId": "A", "legendFormat": "__auto"}],
            }
            for i, (title, expr, unit) in enumerate(panels)
        ],
    }


def query_variable(name: str, query: str) -> dict[str, Any]:
    return {"name": name, "type": "query", "query": query, "includeAll": True, "multi": True, "refresh": 2}


def dashboard(plan: Plan) -> dict[str, Any]:
    variables = [
        query_variable("node", "label_values(DCGM_FI_DEV_GPU_UTIL, Hostname)"),
        query_variable("namespace", "label_values(DCGM_FI_DEV_GPU_UTIL, namespace)"),
    ]
    return grafana_dashboard(f"aisite-gpus-{plan.site}", f"GPUs ({plan.site})", ["aisite", "gpu"], PANELS, variables)


ALERTS = (
    (
        "GPUTemperatureHigh",
        f"max by (Hostname, gpu) (DCGM_FI_DEV_GPU_TEMP) > {GPU_TEMPERATURE_LIMIT_C}",
        "5m",
        "warning",
        f"GPU {{{{ $labels.gpu }}}} on {{{{ $labels.Hostname }}}} is above {GPU_TEMPERATURE_LIMIT_C} C",
    ),
    (
        "GPUXidError",
        "changes(DCGM_FI_DEV_XID_ERRORS[10m]) > 0 and DCGM_FI_DEV_XID_ERRORS > 0",
        "0m",
        "critical",
        "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} reported XID {{ $value }}",
    ),
    (
        "GPUDoubleBitECCError",
        "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m]) > 0",
        "0m",
        "critical",
        "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} had uncorrectable (double-bit) ECC errors",
    ),
    (
        "NodeNotReady",
        'kube_node_status_condition{condition="Ready",status="true"} == 0',
        "5m",
        "critical",
        "Node {{ $labels.node }} has not been Ready for 5 minutes",
    ),
)


def alert_rules(alerts: Iterable[tuple[str, str, str, str, str]]) -> list[dict[str, Any]]:
    """PrometheusRule rules from (alert, expression, for, severity, summary)."""
    return [
        {"alert": name, "expr": expr, "for": wait, "labels": {"severity": severity}, "annotations": {"summary": text}}
        for name, expr, wait, severity, text in alerts
    ]


def monitoring_objects(plan: Plan) -> list[dict[str, Any]]:
    assert plan.health is not None
    stale = 3 * plan.health.interval_s
    health = (
        # From the nodes' own check (roles/node_health), through node exporter's textfile collector.
        (
            "NodeHealthCheckFailing",
            "aisite_health_healthy == 0",
            "10m",
            "warning",
            "The health check of {{ $labels.node }} fails (aisite_health_problem names what; `aisite health` "
            "quarantines)",
        ),
        (
            "NodeHealthCheckStale",
            f"time() - aisite_health_last_run_timestamp_seconds > {stale}",
            "0m",
            "warning",
            f"The health check on {{{{ $labels.instance }}}} has not run for {stale} s",
        ),
    )
    rules = alert_rules((*ALERTS, *health))
    return [
        obj(
            "v1",
            "ConfigMap",
            "aisite-gpu-dashboard",
            labels(plan) | {"grafana_dashboard": "1"},  # what the Grafana sidecar looks for
            NAMESPACE,
            data={"aisite-gpus.json": json.dumps(dashboard(plan), indent=1)},
        ),
        obj(
            "monitoring.coreos.com/v1",
            "PrometheusRule",
            "aisite-gpu-alerts",
            labels(plan),
            NAMESPACE,
            spec={"groups": [{"name": "aisite-gpus", "rules": rules}]},
        ),
    ]
