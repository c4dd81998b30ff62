"""Ceph on the platform layer, for a site with Ceph (no shipped stack has one yet): ceph-csi's RBD and CephFS releases
rendered by real Helm from ../shared/helm-charts and every object validated, the cluster named by the plan's fsid and
monitors, no secret rendered; the StorageClasses per pool validated and naming the drivers the charts install; and
Prometheus scraping the managers, alerting on metrics a real Ceph manager serves."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from aisite.loader import parse_site
from aisite.plan import Plan, build_plan
from aisite.platform import charts, objects
from aisite.platform.ceph_monitoring import ALERTS
from aisite.platform.charts import release_namespaces
from aisite.platform.images import CHART_IMAGES, image_refs
from tests.ceph_local import ceph_cluster
from tests.test_ceph_plan import DESIGN, _site
from tests.test_helm import HELM, render, unrenderable
from tests.test_platform import _closed, crd_schemas


def _plan() -> Plan:
    design = copy.deepcopy(DESIGN)
    design["pools"].append({"name": "volumes", "application": "rbd", "device_class": "nvme", "share": 10})
    design["pools"][3]["share"] = 20  # rgw-hot: room on nvme for the block pool
    return build_plan(parse_site(_site(design)))


def test_the_ceph_csi_releases_render_and_validate_and_name_the_plans_cluster() -> None:
    if not HELM.is_dir():
        pytest.skip(f"{HELM} is absent: the complete pinned charts are not on this machine")
    plan = _plan()
    assert plan.ceph is not None
    ceph = [c for c in charts(plan) if c.chart.startswith("ceph-csi")]
    assert [(c.chart, c.namespace, c.pod_security) for c in ceph] == [
        ("ceph-csi-rbd", "ceph-csi-rbd", "privileged"),
        ("ceph-csi-cephfs", "ceph-csi-cephfs", "privileged"),
    ]
    namespaces = {n["metadata"]["name"]: n["metadata"]["labels"] for n in release_namespaces(plan)}
    monitors = [f"{a}:6789" for _, a in plan.ceph.mon_addresses]
    drivers = set()
    for c in ceph:
        why = unrenderable(c)
        if why:
            pytest.skip(why)
        objs = render(c, plan.kubernetes.version, (), c.values)
        problems = []
        for o in objs:
            try:
                kubernetes_validate.validate(o, plan.kubernetes.version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                problems.append(f"{c.release}: {o['kind']} {o['metadata']['name']}: {str(exc).splitlines()[0]}")
        assert problems == []
        kinds = {o["kind"] for o in objs}
        assert "Secret" not in kinds and "StorageClass" not in kinds  # keys come from Ceph; classes from the plan
        (config,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "ceph-csi-config"]
        assert json.loads(config["data"]["config.json"]) == [{"clusterID": plan.ceph.fsid, "monitors": monitors}]
        drivers |= {o["metadata"]["name"] for o in objs if o["kind"] == "CSIDriver"}
        assert image_refs(objs) == set(CHART_IMAGES[c.chart])
        assert namespaces[c.namespace]["pod-security.kubernetes.io/enforce"] == "privileged"

    classes = [o for o in objects(plan)["storage.yaml"] if o["provisioner"] in drivers]
    for sc in classes:
        kubernetes_validate.validate(sc, plan.kubernetes.version, strict=True)
    by_name = {sc["metadata"]["name"]: sc for sc in classes}
    assert sorted(by_name) == ["ceph-fs-cephfs-data", "ceph-fs-datasets-ec", "ceph-rbd-volumes"]
    rbd = by_name["ceph-rbd-volumes"]["parameters"]
    assert (rbd["clusterID"], rbd["pool"]) == (plan.ceph.fsid, "volumes")
    assert rbd["csi.storage.k8s.io/node-stage-secret-name"] == "csi-rbd-secret"
    fs = by_name["ceph-fs-datasets-ec"]["parameters"]
    assert (fs["fsName"], fs["pool"], fs["csi.storage.k8s.io/provisioner-secret-namespace"]) == (
        "data",
        "datasets-ec",
        "ceph-csi-cephfs",
    )
    assert drivers == {"rbd.csi.ceph.com", "cephfs.csi.ceph.com"}


def _monitored() -> Plan:
    """h100pod (with Prometheus) and the design on three of its storage nodes."""
    data = _site(copy.deepcopy(DESIGN), stack="h100pod")
    return build_plan(parse_site(data))


def test_prometheus_scrapes_the_managers_and_alerts_on_cephs_health() -> None:
    """The ScrapeConfig (the managers' addresses from the plan) and the rules pass their CRDs (the chart's
    ScrapeConfig CRD, ../shared/crds's PrometheusRule); kube-prometheus-stack is told to select ScrapeConfigs, and
    Helm's render of it shows it takes effect (its Prometheus selects every ScrapeConfig, not only its release's)."""
    plan = _monitored()
    assert plan.ceph is not None
    objs = {o["kind"]: o for o in objects(plan)["monitoring.yaml"] if o["metadata"]["name"].startswith("aisite-ceph")}
    scrape = objs["ScrapeConfig"]
    addresses = dict(plan.ceph.mon_addresses)
    assert scrape["spec"]["staticConfigs"][0]["targets"] == [f"{addresses[m]}:9283" for m in plan.ceph.managers]
    schemas = dict(crd_schemas())
    crd_file = HELM / "kube-prometheus-stack-88.5.3/kube-prometheus-stack/charts/crds/crds/crd-scrapeconfigs.yaml"
    if not crd_file.is_file():
        pytest.skip(f"{crd_file} is absent: the complete pinned charts are not on this machine")
    (crd,) = [d for d in yaml.safe_load_all(crd_file.read_text()) if d]
    for v in crd["spec"]["versions"]:
        schema = _closed(v["schema"]["openAPIV3Schema"])
        schema["properties"]["metadata"] = {"type": "object"}
        schemas[(f"monitoring.coreos.com/{v['name']}", "ScrapeConfig")] = schema
    for o in objs.values():
        jsonschema.Draft7Validator(schemas[(o["apiVersion"], o["kind"])]).validate(o)
    (stack,) = [c for c in charts(plan) if c.chart == "kube-prometheus-stack"]
    assert stack.values["prometheus"]["prometheusSpec"]["scrapeConfigSelectorNilUsesHelmValues"] is False
    if unrenderable(stack):
        pytest.skip(str(unrenderable(stack)))
    (prometheus,) = [o for o in render(stack, plan.kubernetes.version, (), stack.values) if o["kind"] == "Prometheus"]
    assert prometheus["spec"]["scrapeConfigSelector"] == {}
    # Without Ceph the chart's own selection stays (its release's label only).
    plain = next(c for c in charts(build_plan(parse_site(_site_without_ceph()))) if c.chart == "kube-prometheus-stack")
    assert "scrapeConfigSelectorNilUsesHelmValues" not in plain.values["prometheus"]["prometheusSpec"]


def _site_without_ceph() -> dict[str, Any]:
    data = _site(copy.deepcopy(DESIGN), stack="h100pod")
    del data["storage_nodes"]["ceph"]
    return data


@pytest.mark.skipif(shutil.which("ceph-mgr") is None, reason="ceph-mgr is not installed (scripts/setup.sh does)")
def test_every_metric_the_alerts_use_is_served_by_a_real_ceph_manager(tmp_path: Path) -> None:
    """A real Ceph 16.2 monitor and manager on loopback (Debian's; one pool, no OSDs) with the prometheus module: each
    metric an alert names is in what the manager serves, with the labels the alerts' summaries use."""
    with ceph_cluster(tmp_path, mgr=True) as ceph:
        subprocess.run([*ceph.cmd, "osd", "pool", "create", "p", "8"], check=True, capture_output=True, timeout=60)
        text = ""
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not ("ceph_pg_degraded{" in text and "ceph_health_detail{" in text):
            time.sleep(2)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ceph.prometheus_port}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                continue
    served = {line.split()[2] for line in text.splitlines() if line.startswith("# HELP ")}
    used = {m for _, expr, *_ in ALERTS for m in re.findall(r"\bceph_[a-z_]+", expr)}
    assert used and used <= served, sorted(used - served)
    labelled = {
        name: set(re.findall(r"(\w+)=", line.split("{", 1)[1]))
        for line in text.splitlines()
        if "{" in line and not line.startswith("#")
        for name in [line.split("{", 1)[0]]
    }
    assert {"name", "severity"} <= labelled["ceph_health_detail"]
    assert "ceph_daemon" in labelled["ceph_mon_quorum_status"] and "pool_id" in labelled["ceph_pg_degraded"]
