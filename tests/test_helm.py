"""Every release of every shipped stack rendered by real Helm (v4: helm-python-sdk's libhelm, no binary) from the
complete pinned charts in ../shared/helm-charts, as an install at the site's Kubernetes version, with the API
versions of the CRDs installed before the release (the charts' crds/ and rendered CRDs of the releases before
it, and the remote manifests' CRDs). Each rendered object is validated strictly: kubernetes-validate for the
built-in kinds, the CRD (from ../shared/crds or the charts themselves) for custom resources. Every value the
project sets must take effect: changing it changes the render.

The charts are data outside the project: where ../shared/helm-charts (or a chart's subcharts) are absent the tests
are skipped and say so."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from aisite.loader import load_site
from aisite.plan import Plan, build_plan
from aisite.platform import charts, jobs, objects, remote_manifests
from aisite.platform.charts import Chart
from tests.conftest import STACKS
from tests.test_platform import CUSTOM_GROUPS, SHARED, _closed, _paths, crd_schemas

helm_chart = pytest.importorskip("helm_python.chart", reason="helm-python-sdk is not installed (make setup)")
helm_native = pytest.importorskip("helm_python._native", reason="helm-python-sdk is not installed (make setup)")

HELM = SHARED / "helm-charts"


@functools.cache
def _plan(stack: str) -> Plan:
    return build_plan(load_site(stack))


def chart_dir(c: Chart) -> Path:
    return HELM / f"{c.chart}-{c.version}" / c.chart


def absent_subcharts(c: Chart) -> dict[str, str]:
    """Subcharts the chart names but ../shared lacks -> the values key that switches each off."""
    path = chart_dir(c)
    deps = yaml.safe_load((path / "Chart.yaml").read_text()).get("dependencies") or []
    have = {p.name for p in (path / "charts").iterdir()} if (path / "charts").is_dir() else set()
    return {d["name"]: d.get("condition", "") for d in deps if d["name"] not in have}


def unrenderable(c: Chart) -> str | None:
    """Why Helm cannot render the chart here, or None. A chart whose absent subcharts can be switched off renders
    without them (kube-prometheus-stack here: its own templates, Prometheus and Alertmanager included, are checked;
    the node exporter, kube-state-metrics and Grafana are not)."""
    path = chart_dir(c)
    if not (path / "Chart.yaml").is_file():
        return f"{path} is absent: the complete pinned chart is not on this machine"
    fixed = [name for name, condition in absent_subcharts(c).items() if not condition]
    if fixed:
        return f"{path}: its subcharts {', '.join(fixed)} are absent from charts/ and cannot be switched off"
    return None


def without_absent(c: Chart, values: dict[str, Any]) -> dict[str, Any]:
    """The values with the absent subcharts switched off (their conditions false)."""
    out = copy.deepcopy(values)
    for condition in absent_subcharts(c).values():
        *parents, leaf = condition.split(".")
        node = out
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = False
    return out


def unchecked(c: Chart, path: tuple[Any, ...]) -> bool:
    """A value under a subchart that is not rendered here: its switch's section, or its own values (its name)."""
    absent = absent_subcharts(c)
    conditions = [cond.split(".") for cond in absent.values() if cond]
    return path[:1] in [(name,) for name in absent] or any(
        tuple(cond[:-1]) == path[: len(cond) - 1] for cond in conditions
    )


@functools.cache
def _load(path: Path) -> Any:
    return helm_chart.Chart.load(path)


_RENDERS: dict[str, list[dict[str, Any]]] = {}


def render(c: Chart, kube_version: str, api_versions: tuple[str, ...], values: dict[str, Any]) -> list[dict[str, Any]]:
    """The release's objects as `helm install` would send them (NOTES.txt left out). A render of the same chart,
    release, versions and values as one before in this process is that one's objects (the same list: not to be
    changed): the stacks share most releases' values, so the value checks below ask for many renders twice."""
    opts = {
        "name": c.release,
        "namespace": c.namespace,
        "is_install": True,
        "kube_version": f"v{kube_version}",
        "api_versions": list(api_versions),
    }
    # Chart.render() does not pass the Kubernetes or API versions; the native call it wraps takes them.
    values = without_absent(c, values)
    key = json.dumps([str(chart_dir(c)), opts, values], sort_keys=True)
    if key in _RENDERS:
        return _RENDERS[key]
    text = helm_native.call_string("helm_render", _load(chart_dir(c))._raw(), json.dumps(values), json.dumps(opts))
    docs = []
    for path, body in sorted(json.loads(text).items()):
        if path.endswith("NOTES.txt"):
            continue
        docs += [d for d in yaml.load_all(body, Loader=_Loader) if d]
    _RENDERS[key] = docs
    return docs


class _Loader(yaml.SafeLoader):
    """YAML 1.1's `=` (the "value" key type) appears as a plain enum member in some CRDs: read it as the string."""


_Loader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))  # type: ignore[arg-type]


@functools.cache
def _chart_crds(path: Path) -> list[dict[str, Any]]:
    """The CRDs in a chart's crds/ directories (its own and its subcharts'): Helm installs them first."""
    out = []
    for f in sorted(path.rglob("crds/*.yaml")) + sorted(path.rglob("crds/*.yml")):
        docs = yaml.load_all(f.read_text(), Loader=_Loader)
        out += [d for d in docs if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"]
    return out


def _served(crds: list[dict[str, Any]]) -> set[str]:
    return {f"{c['spec']['group']}/{v['name']}" for c in crds for v in c["spec"]["versions"] if v.get("served")}


Render = tuple[Chart, tuple[str, ...], list[dict[str, Any]] | None, str | None]


@functools.cache
def site_renders(stack: str) -> dict[str, Render]:
    """release -> (chart, the API versions it was rendered with, its objects or None, why not), in install order."""
    plan = _plan(stack)
    crds: list[dict[str, Any]] = []
    for m in remote_manifests(plan):
        crds += [
            d
            for f in sorted((SHARED / "crds").glob(f"{m.name}-{m.version}_*.yaml"))
            for d in yaml.safe_load_all(f.read_text())
            if d and d.get("kind") == "CustomResourceDefinition"
        ]
    out = {}
    for c in charts(plan):
        api = tuple(sorted(_served(crds)))
        why = unrenderable(c)
        objs = None if why else render(c, plan.kubernetes.version, api, c.values)
        out[c.release] = (c, api, objs, why)
        # A chart that cannot be rendered still installs its crds/ first, where they are here.
        crds += _chart_crds(chart_dir(c)) + [o for o in objs or [] if o.get("kind") == "CustomResourceDefinition"]
    return out


def _schemas(stack: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> closed schema: ../shared/crds, then the CRDs the site's charts install."""
    out = dict(crd_schemas())
    for c, _, objs, _ in site_renders(stack).values():
        for crd in _chart_crds(chart_dir(c)) + [o for o in objs or [] if o.get("kind") == "CustomResourceDefinition"]:
            for v in crd["spec"]["versions"]:
                if v.get("served") and "schema" in v:
                    schema = _closed(v["schema"]["openAPIV3Schema"])
                    schema.setdefault("properties", {})["metadata"] = {"type": "object"}
                    out.setdefault((f"{crd['spec']['group']}/{v['name']}", crd["spec"]["names"]["kind"]), schema)
    return out


RELEASES = [(stack, c.release) for stack in STACKS for c in charts(_plan(stack))]


def rendered(stack: str, release: str) -> tuple[Chart, tuple[str, ...], list[dict[str, Any]]]:
    if not HELM.is_dir():
        pytest.skip(f"{HELM} is absent: the complete pinned charts are not on this machine")
    c, api, objs, why = site_renders(stack)[release]
    if objs is None:
        pytest.skip(why or "not rendered")
    return c, api, objs


# Kinds a release renders whose CRDs neither ../shared/crds nor any pinned chart holds: KServe's webhook certificate
# is cert-manager's (the site installs cert-manager; `aisite validate` says so). Listed, printed, not validated.
UNVALIDATED = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate")}


@pytest.mark.parametrize(("stack", "release"), RELEASES)
def test_every_release_renders_and_every_object_validates(stack: str, release: str) -> None:
    plan = _plan(stack)
    _, _, objs = rendered(stack, release)
    schemas = _schemas(stack)
    problems = []
    assert objs, f"{release} rendered nothing"
    for o in objs:
        key = (o.get("apiVersion", ""), o.get("kind", ""))
        where = f"{release}: {key[1]} {o.get('metadata', {}).get('name')}"
        if key in UNVALIDATED and key not in schemas:
            print(f"not validated: {where}: no CRD of {key} is on this machine (cert-manager's)")
            continue
        try:
            if key in schemas:
                jsonschema.Draft7Validator(schemas[key]).validate(o)
            else:
                kubernetes_validate.validate(o, plan.kubernetes.version, strict=True)
        except (jsonschema.ValidationError, kubernetes_validate.ValidationError) as exc:
            problems.append(f"{where}: {str(exc).splitlines()[0]}")
        except kubernetes_validate.SchemaNotFoundError:
            problems.append(f"{where}: no schema for {key} (neither built in at {plan.kubernetes.version} nor a CRD)")
    assert problems == []


@pytest.mark.parametrize("stack", STACKS)
def test_the_projects_custom_resources_pass_the_crds_the_site_installs(stack: str) -> None:
    """The project's objects and jobs against the CRDs as the site's releases install them (chart templates
    included: the trainer's ClusterTrainingRuntime CRD exists only as one)."""
    if not HELM.is_dir():
        pytest.skip(f"{HELM} is absent: the complete pinned charts are not on this machine")
    plan = _plan(stack)
    schemas = _schemas(stack)
    every = [o for objs in (objects(plan) | jobs(plan)).values() for o in objs]
    checked = 0
    for o in every:
        key = (o["apiVersion"], o["kind"])
        if key[0].split("/")[0] in CUSTOM_GROUPS:
            assert key in schemas, f"no CRD the site installs serves {key}"
            jsonschema.Draft7Validator(schemas[key]).validate(o)
            checked += 1
    assert checked


def _changed(value: Any) -> Any:
    """Another value of the same type: what a key that takes effect must show in the render."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 7
    if isinstance(value, float):
        return value * 2 + 1
    if isinstance(value, str):
        return value + "-changed" if not value.isdigit() else str(int(value) + 7)
    if isinstance(value, list):
        return [] if value else ["changed"]
    return "changed" if value is None else {}


def _set(values: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(values)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


@pytest.mark.parametrize(("stack", "release"), RELEASES)
def test_every_value_the_project_sets_takes_effect(stack: str, release: str) -> None:
    """Each leaf of the release's values, changed to another value of its type, changes what Helm renders."""
    plan = _plan(stack)
    c, api, objs = rendered(stack, release)
    idle = []
    for path in _paths(c.values):
        if not path or unchecked(c, path):
            continue
        try:
            other = render(c, plan.kubernetes.version, api, _set(c.values, path, _changed(_get(c.values, path))))
        except Exception:
            continue
        if other == objs:
            idle.append(f"{release}: {'.'.join(map(str, path))}")
    assert idle == [], "values that change nothing in the render"


def _get(values: dict[str, Any], path: tuple[Any, ...]) -> Any:
    node: Any = values
    for key in path:
        node = node[key]
    return node


def test_the_render_check_catches_a_misspelt_value() -> None:
    """The same check, shown to fail: a key the chart does not read changes nothing."""
    plan = _plan("lab")
    c, api, objs = rendered("lab", charts(plan)[0].release)
    assert render(c, plan.kubernetes.version, api, c.values | {"aisiteNoSuchKey": {"enabled": True}}) == objs


@pytest.mark.parametrize("stack", STACKS)
def test_kueue_webhooks_reach_tenant_namespaces_only(stack: str) -> None:
    """Kueue's pod webhook fails closed: as rendered, it selects the namespaces that carry the tenant label alone."""
    plan = _plan(stack)
    release = next(c.release for c in charts(plan) if c.chart == "kueue")
    _, _, objs = rendered(stack, release)
    hooks = [
        h
        for o in objs
        if o["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for h in o["webhooks"]
        if "pod" in h["name"].split(".")[0]
    ]
    assert hooks, "no pod webhook rendered"
    for h in hooks:
        assert h["namespaceSelector"] == {"matchExpressions": [{"key": "aisite.io/tenant", "operator": "Exists"}]}
    namespaces = {
        o["metadata"]["name"]: o for objs_ in objects(plan).values() for o in objs_ if o["kind"] == "Namespace"
    }
    tenants = {t.namespace for t in plan.tenants}
    assert tenants and all("aisite.io/tenant" in namespaces[n]["metadata"]["labels"] for n in tenants)
    # The releases' namespaces (operators, monitoring) stay out of the webhook's reach.
    assert all("aisite.io/tenant" not in o["metadata"]["labels"] for n, o in namespaces.items() if n not in tenants)


def test_the_node_exporter_keeps_the_charts_args_and_reads_the_nodes_textfiles() -> None:
    """Its subchart is not in ../shared, so Helm cannot show the value taking effect here: what can be held is that
    the list the site sets (a list replaces the chart's) starts with kube-prometheus-stack's own, as its values.yaml
    has them, and adds the textfile directory the pull role writes, under the host root the chart mounts
    (prometheus-node-exporter 4.56.1: hostRootFsMount, /host/root, read-only)."""
    plan = _plan("dc1")  # a site with the prometheus addon
    (c,) = [c for c in charts(plan) if c.chart == "kube-prometheus-stack"]
    defaults = yaml.safe_load((chart_dir(c) / "values.yaml").read_text())["prometheus-node-exporter"]["extraArgs"]
    args = c.values["prometheus-node-exporter"]["extraArgs"]
    assert args[: len(defaults)] == defaults
    assert args[len(defaults) :] == [
        f"--collector.textfile.directory=/host/root{plan.kubernetes.monitoring.node_textfile_dir}"
    ]
    assert plan.kubernetes.monitoring.node_textfile_dir == "/var/lib/node_exporter/textfile_collector"
