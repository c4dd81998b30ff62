"""The platform (aisite.platform) for every shipped stack, validated offline: custom resources against the
upstream CRDs, Helm values against the charts' own defaults, and what the objects say against the plan.

The CRDs and chart defaults are data outside the project (../shared/crds, ../shared/charts; AISITE_SHARED names
another place): where they are absent those tests are skipped and say so.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from aisite.loader import load_site
from aisite.plan import Plan, build_plan
from aisite.platform import charts, objects
from aisite.platform.kueue import flavor_name
from tests.conftest import ROOT, STACKS

SHARED = Path(os.environ.get("AISITE_SHARED", ROOT.parent / "shared"))
# Values under a subchart's name are the subchart's (its defaults are not in ../shared/charts).
SUBCHARTS = {"grafana", "kube-state-metrics", "prometheus-node-exporter", "node-feature-discovery", "jobset", "crds"}


@pytest.fixture(scope="module", params=STACKS)
def plan(request: pytest.FixtureRequest) -> Plan:
    return build_plan(load_site(request.param))


def shared(kind: str) -> Path:
    path = SHARED / kind
    if not path.is_dir():
        pytest.skip(f"{path} is absent: the upstream {kind} these checks need are not on this machine")
    return path


def _closed(schema: Any) -> Any:
    """A CRD schema as JSON Schema that refuses unknown fields (the API server would prune them silently)."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        preserve = schema.get("x-kubernetes-preserve-unknown-fields")
        if "properties" in schema and "additionalProperties" not in schema and not preserve:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


@functools.cache
def _crd_schemas(root: Path) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for f in sorted(root.glob("*.yaml")):
        for crd in yaml.safe_load_all(f.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for v in crd["spec"]["versions"]:
                if v.get("served"):
                    schema = _closed(v["schema"]["openAPIV3Schema"])
                    schema["properties"]["metadata"] = {"type": "object"}
                    out[(f"{group}/{v['name']}", kind)] = schema
    return out


def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> closed JSON Schema of every served version in ../shared/crds (read once)."""
    return _crd_schemas(shared("crds"))


def test_custom_resources_pass_their_crds(plan: Plan) -> None:
    schemas = crd_schemas()
    custom = [o for objs in objects(plan).values() for o in objs if "." in o["apiVersion"].split("/")[0]]
    custom = [o for o in custom if not o["apiVersion"].split("/")[0].endswith("k8s.io") or "kueue" in o["apiVersion"]]
    assert custom, "every shipped stack uses Kueue"
    for o in custom:
        key = (o["apiVersion"], o["kind"])
        assert key in schemas, f"no CRD serves {key}"
        jsonschema.validate(o, schemas[key], cls=jsonschema.Draft7Validator)


def test_crd_check_catches_a_misspelt_field(plan: Plan) -> None:
    schemas = crd_schemas()
    cq = next(o for o in objects(plan)["kueue.yaml"] if o["kind"] == "ClusterQueue")
    cq["spec"]["cohort"] = cq["spec"].pop("cohortName")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(cq, schemas[(cq["apiVersion"], cq["kind"])])


def _paths(values: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(values, dict) and values:
        return [p for k, v in values.items() for p in _paths(v, (*prefix, k))]
    return [prefix]


def _defined(defaults: Any, path: tuple[str, ...]) -> bool:
    node = defaults
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def test_chart_values_use_keys_the_charts_define(plan: Plan) -> None:
    root = shared("charts")
    releases = charts(plan)
    assert releases, "every shipped stack installs charts"
    for c in releases:
        folder = root / f"{c.chart}-{c.version}"
        assert folder.is_dir(), f"{c.chart} {c.version}: no such chart in {root} (a pin the project cannot check)"
        assert yaml.safe_load((folder / "Chart.yaml").read_text())["version"] == c.version
        defaults = yaml.safe_load((folder / "values.yaml").read_text())
        for path in _paths(c.values):
            if path and path[0] in SUBCHARTS:
                continue
            assert _defined(defaults, path), f"{c.release}: {'.'.join(path)} is not a value of {c.chart} {c.version}"


def test_values_check_catches_a_misspelt_path(plan: Plan) -> None:
    root = shared("charts")
    defaults = yaml.safe_load((root / "gpu-operator-v26.3.3" / "values.yaml").read_text())
    assert _defined(defaults, ("dcgmExporter", "serviceMonitor", "enabled"))
    assert not _defined(defaults, ("dcgmExporter", "serviceMonitors", "enabled"))


def test_kueue_configuration_in_the_values_is_a_kueue_configuration(plan: Plan) -> None:
    kueue = next(c for c in charts(plan) if c.chart == "kueue")
    config = yaml.safe_load(kueue.values["managerConfig"]["controllerManagerConfigYaml"])
    assert config["kind"] == "Configuration" and config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert "kubeflow.org/mpijob" in config["integrations"]["frameworks"]
    assert "cpu" in config["resources"]["excludeResourcePrefixes"]


def test_queues_and_flavors_follow_the_plan(plan: Plan) -> None:
    objs = objects(plan)
    kueue = objs["kueue.yaml"]
    types = list(dict.fromkeys(n.gpu.type for n in plan.nodes if n.gpu))
    flavors = {o["metadata"]["name"]: o for o in kueue if o["kind"] == "ResourceFlavor"}
    assert list(flavors) == [flavor_name(t) for t in types]
    for t in types:
        labels = flavors[flavor_name(t)]["spec"]["nodeLabels"]
        assert all(n.labels["aisite.io/gpu-type"] == t for n in plan.nodes if n.gpu and n.gpu.type == t) and labels
    queues = {o["metadata"]["name"]: o for o in kueue if o["kind"] == "ClusterQueue"}
    assert list(queues) == [t.name for t in plan.tenants]
    for t in plan.tenants:
        q = queues[t.name]["spec"]
        assert q["cohortName"] == plan.site
        assert q["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] == t.namespace
        got = {f["name"]: f["resources"][0]["nominalQuota"] for f in q["resourceGroups"][0]["flavors"]}
        assert got == {flavor_name(g): n for g, n in t.flavors} and sum(got.values()) == t.gpu_quota
        (lq,) = [o for o in objs[f"tenant-{t.name}.yaml"] if o["kind"] == "LocalQueue"]
        assert lq["metadata"]["namespace"] == t.namespace and lq["spec"]["clusterQueue"] == t.name


def test_a_storage_class_per_export(plan: Plan) -> None:
    classes = objects(plan).get("storage.yaml", [])
    assert [(c["parameters"]["server"], c["parameters"]["share"]) for c in classes] == [
        (e.address, e.path) for e in plan.exports
    ]


def test_tenant_namespaces_deny_by_default_and_let_jobs_work(plan: Plan) -> None:
    for t in plan.tenants:
        objs = {o["kind"]: o for o in objects(plan)[f"tenant-{t.name}.yaml"]}
        assert objs["Namespace"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
        policy = objs["NetworkPolicy"]["spec"]
        assert policy["podSelector"] == {} and policy["policyTypes"] == ["Ingress", "Egress"]
        cidrs = {b["ipBlock"]["cidr"] for rule in policy["egress"] for b in rule["to"] if "ipBlock" in b}
        assert plan.networks.storage in cidrs and f"{plan.kubernetes.api_vip}/32" in cidrs
