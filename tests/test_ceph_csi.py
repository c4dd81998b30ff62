"""ceph-csi for a site with Ceph (no shipped stack has one yet): its RBD and CephFS releases rendered by real Helm
from ../shared/helm-charts and every object validated; the cluster named by the plan's fsid and monitors, no secret
rendered; the StorageClasses per pool validated and naming the drivers the charts install."""

from __future__ import annotations

import copy
import json

import kubernetes_validate
import pytest

from aisite.loader import parse_site
from aisite.plan import Plan, build_plan
from aisite.platform import charts, objects
from aisite.platform.charts import release_namespaces
from aisite.platform.images import CHART_IMAGES, image_refs
from tests.test_ceph_plan import DESIGN, _site
from tests.test_helm import HELM, render, unrenderable


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
