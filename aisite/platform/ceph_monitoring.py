"""Ceph in the site's monitoring (kube-prometheus-stack): Prometheus scrapes the managers' prometheus module (a
ScrapeConfig with their addresses from the plan: they run on storage or control-plane hosts, not in the cluster)
and alert rules on what it exports. Every metric the rules use is one a real Ceph 16.2 manager serves (a test
scrapes one); the health check codes are Ceph's own (Ceph documentation, Health checks)."""

from __future__ import annotations

from typing import Any

from aisite.plan import Plan
from aisite.platform.common import labels, obj
from aisite.platform.monitoring import NAMESPACE, alert_rules

# (alert, expression, for, severity, summary)
ALERTS = (
    ("CephHealthError", "ceph_health_status == 2", "5m", "critical", "Ceph reports HEALTH_ERR (`ceph health detail`)"),
    (
        "CephHealthWarning",
        "ceph_health_status == 1",
        "15m",
        "warning",
        "Ceph reports HEALTH_WARN (`ceph health detail`)",
    ),
    (
        "CephMonitorOutOfQuorum",
        "ceph_mon_quorum_status == 0",
        "5m",
        "critical",
        "Monitor {{ $labels.ceph_daemon }} is out of quorum: one more loss and the cluster stops",
    ),
    ("CephOSDDown", "ceph_osd_up == 0", "5m", "warning", "OSD {{ $labels.ceph_daemon }} is down"),
    (
        "CephPGsDegraded",
        "ceph_pg_degraded > 0",
        "15m",
        "warning",
        "{{ $value }} placement groups of pool {{ $labels.pool_id }} are degraded (fewer copies than planned)",
    ),
    (
        "CephOSDNearFull",
        'ceph_health_detail{name=~"OSD_NEARFULL|OSD_BACKFILLFULL"} == 1',
        "5m",
        "warning",
        "OSDs are near full ({{ $labels.name }}): data stops moving to them, then writes stop",
    ),
    (
        "CephOSDFull",
        'ceph_health_detail{name="OSD_FULL"} == 1',
        "1m",
        "critical",
        "An OSD is full: the cluster refuses writes",
    ),
)


def ceph_monitoring_objects(plan: Plan) -> list[dict[str, Any]]:
    c = plan.ceph
    if c is None:
        return []
    addresses = dict(c.addresses)
    rules = alert_rules(ALERTS)
    return [
        obj(
            "monitoring.coreos.com/v1alpha1",
            "ScrapeConfig",
            "aisite-ceph-mgr",
            labels(plan),
            NAMESPACE,
            spec={
                # Each manager serves the cluster's metrics while it is the active one (a standby answers empty).
                "staticConfigs": [
                    {
                        "targets": [f"{addresses[m]}:{c.mgr_metrics_port}" for m in c.managers],
                        "labels": {"ceph_cluster": c.fsid},
                    }
                ],
                "metricsPath": "/metrics",
                "honorLabels": True,
            },
        ),
        obj(
            "monitoring.coreos.com/v1",
            "PrometheusRule",
            "aisite-ceph-alerts",
            labels(plan),
            NAMESPACE,
            spec={"groups": [{"name": "aisite-ceph", "rules": rules}]},
        ),
    ]
