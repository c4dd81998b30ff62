"""The platform (aisite.platform) for every shipped stack, validated offline: custom resources against the
upstream CRDs, Helm values against the charts' own defaults, and what the objects say against the plan.

The CRDs and chart defaults are data outside the project (../shared/crds, ../shared/charts; AISITE_SHARED names
another place): where they are absent those tests are skipped and say so.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import re
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from aisite.loader import load_site
from aisite.plan import Plan, build_plan
from aisite.platform import charts, jobs, objects, remote_manifests
from aisite.platform.gitops import gitops_objects, secret_env_names
from aisite.platform.jobs import workload_objects
from aisite.platform.kueue import HOSTNAME, PREFERRED_TOPOLOGY, REQUIRED_TOPOLOGY, flavor_name
from aisite.platform.rails import rail_interfaces
from tests.conftest import ROOT, STACKS

SHARED = Path(os.environ.get("AISITE_SHARED", ROOT.parent / "shared"))
# Values under a subchart's name are the subchart's (its defaults are not in ../shared/charts).
SUBCHARTS = {"grafana", "kube-state-metrics", "prometheus-node-exporter", "node-feature-discovery", "jobset", "crds"}
# Values a chart documents as a commented example rather than a default: (chart, path) -> the comment that shows it.
# Values a chart documents but its values.yaml does not hold: the text that documents each (in values.yaml, or in
# values.schema.yaml where the chart keeps one, as Zero to JupyterHub does).
DOCUMENTED = {
    ("gpu-operator", ("dcgmExporter", "config")): "  # config:\n    # name: custom-dcgm-exporter-metrics",
    # traitlets configuration of the hub's classes, passed through
    ("jupyterhub", ("hub", "config")): "Helm chart configuration (`hub.config`), you can directly configure",
    ("jupyterhub", ("singleuser", "storage", "extraVolumes")): "Injects extra volumes into `KubeSpawner.volumes`",
    ("jupyterhub", ("singleuser", "storage", "extraVolumeMounts")): "Injects extra volume mounts into",
}
CUSTOM_GROUPS = (
    "kueue.x-k8s.io",
    "monitoring.coreos.com",
    "mellanox.com",
    "nv-ipam.nvidia.com",
    "k8s.cni.cncf.io",
    "kubeflow.org",
    "trainer.kubeflow.org",
    "resource.nvidia.com",
    "serving.kserve.io",
)


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
                    # Every object has these; some CRDs (the NetworkAttachmentDefinition's) do not list them.
                    schema["properties"].setdefault("apiVersion", {"type": "string"})
                    schema["properties"].setdefault("kind", {"type": "string"})
                    out[(f"{group}/{v['name']}", kind)] = schema
    return out


def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> closed JSON Schema of every served version in ../shared/crds (read once)."""
    return _crd_schemas(shared("crds"))


def test_custom_resources_pass_their_crds(plan: Plan) -> None:
    schemas = crd_schemas()
    every = (objects(plan) | jobs(plan)).values()
    custom = [o for objs in every for o in objs if o["apiVersion"].split("/")[0] in CUSTOM_GROUPS]
    assert custom, "every shipped stack uses Kueue"
    from_charts = {kind for c in charts(plan) for kind in c.provides}
    for o in custom:
        key = (o["apiVersion"], o["kind"])
        if key not in schemas and o["kind"] in from_charts:
            continue  # the CRD is a template of its chart: test_helm checks against the rendered one
        assert key in schemas, f"no CRD serves {key}"
        # Not checked against the metaschema: some CRD patterns use Go regexp syntax Python's re rejects
        # (prometheus-operator's `^(?i)(abort|warn)?$`); only fields we set are matched against patterns.
        jsonschema.Draft7Validator(schemas[key]).validate(o)


def test_crd_check_catches_a_misspelt_field(plan: Plan) -> None:
    schemas = crd_schemas()
    cq = next(o for o in objects(plan)["kueue.yaml"] if o["kind"] == "ClusterQueue")
    cq["spec"]["cohort"] = cq["spec"].pop("cohortName")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(schemas[(cq["apiVersion"], cq["kind"])]).validate(cq)


def _paths(values: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(values, dict) and values:
        return [p for k, v in values.items() for p in _paths(v, (*prefix, k))]
    return [prefix]


def _defined(defaults: Any, path: tuple[str, ...]) -> bool:
    node = defaults
    for key in path:
        if node == {}:
            return True  # a free-form object (storageSpec: {}): the Helm render test checks what is under it
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def test_chart_values_use_keys_the_charts_define(plan: Plan) -> None:
    # The charts' values files: the first pinned ones in charts/, the later ones (ceph-csi...) in helm-charts/.
    roots = [shared("charts"), *([SHARED / "helm-charts"] if (SHARED / "helm-charts").is_dir() else [])]
    releases = charts(plan)
    assert releases, "every shipped stack installs charts"
    for c in releases:
        name = f"{c.chart}-{c.version}"
        # helm-charts/ holds each chart one folder down (NAME-VERSION/NAME), beside its PROVENANCE.txt.
        found = [f for r in roots for f in (r / name, r / name / c.chart) if (f / "Chart.yaml").is_file()]
        folder = found[0] if found else roots[0] / name
        assert folder.is_dir(), f"{c.chart} {c.version}: no such chart in {roots} (a pin the project cannot check)"
        assert yaml.safe_load((folder / "Chart.yaml").read_text())["version"] == c.version
        text = (folder / "values.yaml").read_text()
        defaults = yaml.safe_load(text)
        if (folder / "values.schema.yaml").is_file():
            text += (folder / "values.schema.yaml").read_text()
        for path in _paths(c.values):
            if path and path[0] in SUBCHARTS:
                continue
            documented = [v for (chart, p), v in DOCUMENTED.items() if chart == c.chart and path[: len(p)] == p]
            if documented:
                assert documented[0] in text, f"{c.chart} {c.version} no longer documents {'.'.join(path)}"
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
    addons = plan.kubernetes.addons
    assert ("kubeflow.org/mpijob" in config["integrations"]["frameworks"]) == ("mpi-operator" in addons)
    assert ("trainer.kubeflow.org/trainjob" in config["integrations"]["frameworks"]) == ("training-operator" in addons)
    assert "cpu" in config["resources"]["excludeResourcePrefixes"]
    # Pods are Kueue's in tenants' namespaces alone.
    assert config["managedJobsNamespaceSelector"] == {
        "matchExpressions": [{"key": "aisite.io/tenant", "operator": "Exists"}]
    }
    # The chart's own settings the site does not decide are kept: its controllers' concurrency and client rate.
    values = yaml.safe_load((shared("charts") / f"kueue-{kueue.version}" / "values.yaml").read_text())
    chart_config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    for key in ("controller", "clientConnection", "health", "metrics", "webhook", "leaderElection"):
        assert config[key] == chart_config[key], key


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


def _podsets(o: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod templates of a job object that Kueue turns into pod sets (TrainJob: the runtime patch's)."""
    spec = o["spec"]
    if o["kind"] == "MPIJob":
        return [r["template"] for r in spec["mpiReplicaSpecs"].values()]
    if o["kind"] == "TrainJob":
        return [
            j["template"]["spec"]["template"]
            for j in spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
        ]
    return [spec["template"]] if o["kind"] == "Job" else []


def test_placement_follows_the_fabric_the_plan_cabled(plan: Plan) -> None:
    """Every rail node's unit, leaf block and (three tiers) pod labels match the leaves its rails cable to; a
    flavor is topology-aware exactly when all its nodes carry every level; each GPU job in such a flavor asks for
    one unit when a unit holds it."""
    leaves = {s.name: s for s in plan.switches if s.role == "leaf"}
    three_tier = any(s.role == "super-spine" for s in plan.switches)
    for n in plan.by_role("gpu"):
        if not n.rails:
            assert "aisite.io/scalable-unit" not in n.labels and "aisite.io/leaf-block" not in n.labels, n.name
            continue
        su = n.scalable_unit
        assert n.labels["aisite.io/scalable-unit"] == str(su)
        block = n.labels["aisite.io/leaf-block"]
        assert leaves[block].scalable_unit == su and {leaves[r.leaf].scalable_unit for r in n.rails} == {su}
        assert ("aisite.io/pod" in n.labels) == three_tier, n.name
    peers: dict[str, set[str]] = {}
    for n in plan.by_role("gpu"):
        if "aisite.io/pod" in n.labels:  # a unit lies in one pod
            peers.setdefault(n.labels["aisite.io/scalable-unit"], set()).add(n.labels["aisite.io/pod"])
    assert all(len(p) == 1 for p in peers.values())
    kueue = objects(plan)["kueue.yaml"]
    # The fabric's Topology (pod, unit, host), and rack-scale types' (the same, then rack and NVLink clique).
    topologies = {
        o["metadata"]["name"]: [lv["nodeLabel"] for lv in o["spec"]["levels"]] for o in kueue if o["kind"] == "Topology"
    }
    fabric = [
        k for k in ("aisite.io/pod", "aisite.io/scalable-unit") if any(k in n.labels for n in plan.by_role("gpu"))
    ]
    for name, levels in topologies.items():
        assert levels[-1] == HOSTNAME and len(set(levels)) == len(levels)
        racks = ["aisite.io/rack", "nvidia.com/gpu.clique"] if name == "nvlink" else []
        assert levels[:-1] == fabric + racks, name
    for f in (o for o in kueue if o["kind"] == "ResourceFlavor"):
        gtype = f["spec"]["nodeLabels"]["aisite.io/gpu-type"]
        nodes = [n for n in plan.by_role("gpu") if n.gpu and n.gpu.type == gtype]
        rack_scale = any(n.rack for n in nodes)
        planned = fabric + (["aisite.io/rack"] if rack_scale else [])  # the clique is the node's to label
        complete = bool(fabric or rack_scale) and all(k in n.labels for n in nodes for k in planned)
        assert ("topologyName" in f["spec"]) == complete, f["metadata"]["name"]
        if complete:
            assert f["spec"]["topologyName"] == ("nvlink" if rack_scale else "fabric")
    aware = {f["spec"]["nodeLabels"]["aisite.io/gpu-type"] for f in kueue if "topologyName" in f.get("spec", {})}
    for w in plan.workloads:
        for o in workload_objects(plan, w):
            for tmpl in _podsets(o):
                ann = tmpl.get("metadata", {}).get("annotations", {})
                # GPUs from the device plugin, or claimed (DRA, a ComputeDomain's channel).
                gpus = "nvidia.com/gpu" in json.dumps(tmpl["spec"].get("containers", []))
                gpus = gpus or bool(tmpl["spec"].get("resourceClaims"))
                request = {k: v for k, v in ann.items() if k in (REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY)}
                if not (gpus or o["kind"] == "TrainJob") or w.gpu_type not in aware:
                    assert not request, (w.name, request)
                    continue
                ((key, level),) = request.items()
                assert level in {lv for levels in topologies.values() for lv in levels[:-1]}
                pinned = tmpl["spec"].get("nodeSelector", {}).get("aisite.io/scalable-unit")
                assert key == REQUIRED_TOPOLOGY or pinned is None, w.name


def test_a_mixed_gpu_type_keeps_its_flavor_without_topology() -> None:
    """The lab's T4s: two rail nodes and a VM without rails, so the t4 flavor cannot be topology-aware."""
    plan = build_plan(load_site(ROOT / "stacks/Pulumi.lab.yaml"))
    kueue = objects(plan)["kueue.yaml"]
    (flavor,) = [o for o in kueue if o["kind"] == "ResourceFlavor"]
    assert "topologyName" not in flavor["spec"] and not [o for o in kueue if o["kind"] == "Topology"]
    assert [n.name for n in plan.by_role("gpu") if not n.rails] == ["infer01"]
    assert "kueue.x-k8s.io/podset-required-topology" not in json.dumps(jobs(plan))


def test_a_storage_class_per_export(plan: Plan) -> None:
    classes = [c for c in objects(plan).get("storage.yaml", []) if c["provisioner"] == "nfs.csi.k8s.io"]
    assert [(c["parameters"]["server"], c["parameters"]["share"]) for c in classes] == [
        (e.address, e.path) for e in plan.exports
    ]


def test_tenant_namespaces_deny_by_default_and_let_jobs_work(plan: Plan) -> None:
    for t in plan.tenants:
        # The tenant's own policy (with notebooks a second one lets the hub reach their servers: test_notebooks).
        objs = {o["kind"]: o for o in objects(plan)[f"tenant-{t.name}.yaml"] if o["metadata"]["name"] != "notebooks"}
        assert objs["Namespace"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == t.pod_security
        policy = objs["NetworkPolicy"]["spec"]
        assert policy["podSelector"] == {} and policy["policyTypes"] == ["Ingress", "Egress"]
        cidrs = {b["ipBlock"]["cidr"] for rule in policy["egress"] for b in rule["to"] if "ipBlock" in b}
        assert f"{plan.kubernetes.api_vip}/32" in cidrs
        # Issue 64: the storage network was open whole; now each storage service's address and port, nothing else.
        assert plan.networks.storage not in cidrs
        storage = ipaddress.ip_network(plan.networks.storage)
        opened = {
            (b["ipBlock"]["cidr"], p["port"], p.get("endPort"))
            for rule in policy["egress"]
            for b in rule["to"]
            if "ipBlock" in b and ipaddress.ip_network(b["ipBlock"]["cidr"]).subnet_of(storage)
            for p in rule.get("ports", [])
        }
        want = {(f"{e.address}/32", 2049, None) for e in plan.exports}
        if plan.ceph:
            at = dict(plan.ceph.addresses)
            want |= {(f"{a}/32", port, None) for _, a in plan.ceph.mon_addresses for port in (3300, 6789)}
            want |= {(f"{at[o.host]}/32", 6800, 7300) for o in plan.ceph.osds}
            want |= {(f"{at[r]}/32", 7480, None) for r in plan.ceph.rgw}
        assert opened == want and all(
            rule.get("ports") for rule in policy["egress"] if rule["to"] != [{"podSelector": {}}]
        )


def test_dashboard_and_alerts_use_only_metrics_the_exporter_collects(plan: Plan) -> None:
    from aisite.platform.monitoring import DCGM_METRICS

    files = objects(plan)
    if "prometheus" not in plan.kubernetes.addons:
        assert "monitoring.yaml" not in files
        return
    collected = {name for name, _, _ in DCGM_METRICS}
    gpu = next(c for c in charts(plan) if c.chart == "gpu-operator")
    csv = gpu.values["dcgmExporter"]["config"]["data"]
    assert {line.split(",")[0] for line in csv.splitlines()} == collected
    objs = {o["kind"]: o for o in files["monitoring.yaml"] if o["metadata"]["name"] != "aisite-serving-dashboard"}
    dashboard = json.loads(objs["ConfigMap"]["data"]["aisite-gpus.json"])
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [r["expr"] for g in objs["PrometheusRule"]["spec"]["groups"] for r in g["rules"]]
    used = {m for e in exprs for m in re.findall(r"DCGM_FI_[A-Z_]+", e)}
    assert used and used <= collected, used - collected
    assert objs["ConfigMap"]["metadata"]["labels"]["grafana_dashboard"] == "1"
    alerts = {r["alert"] for g in objs["PrometheusRule"]["spec"]["groups"] for r in g["rules"]}
    assert alerts == {
        "GPUTemperatureHigh",
        "GPUXidError",
        "GPUDoubleBitECCError",
        "NodeNotReady",
        "NodeHealthCheckFailing",
        "NodeHealthCheckStale",
    }
    # The health alerts read the metrics the nodes' check writes (aisite/health/node.py), by those names.
    from aisite.health.judge import Expected as HealthExpected
    from aisite.health.judge import Facts
    from aisite.health.judge import judge as health_judge
    from aisite.health.node import metrics as health_metrics

    written = health_metrics(health_judge(Facts(), HealthExpected("n", 0, False, ())), 0.0)
    for name in re.findall(r"aisite_health_[a-z_]+", " ".join(exprs)):
        assert f"\n{name}" in "\n" + written, name


def test_one_owner_of_mpijobs(plan: Plan) -> None:
    """MPI Operator v2 owns mpijobs.kubeflow.org; nothing else the site installs claims MPIJob."""
    owners = [c.release for c in charts(plan) if "MPIJob" in c.provides]
    owners += [m.name for m in remote_manifests(plan) if "MPIJob" in m.provides]
    assert owners == (["mpi-operator"] if "mpi-operator" in plan.kubernetes.addons else [])
    if owners:
        (mpi,) = remote_manifests(plan)
        assert mpi.version in mpi.url and mpi.url.endswith("/deploy/v2beta1/mpi-operator.yaml")
        # The CRD of that release serves v2beta1, the version the job renderer writes.
        crd = shared("crds") / f"mpi-operator-{mpi.version}_kubeflow.org_mpijobs.yaml"
        versions = [v["name"] for v in yaml.safe_load(crd.read_text())["spec"]["versions"] if v.get("served")]
        assert "v2beta1" in versions


def _nv_ipam_ranges(subnet: IPv4Network, block_size: int, nodes: int) -> list[list[IPv4Address]]:
    """NV-IPAM's controller (pkg/ipam-controller/allocator): node ranges of perNodeBlockSize addresses counted
    from network+1, in order, refusing a range that reaches past the subnet or ends on its broadcast address."""
    out = []
    for i in range(nodes):
        start = subnet.network_address + 1 + i * block_size
        end = start + block_size - 1
        assert end in subnet and end != subnet.broadcast_address, f"{subnet}: no range left for node {i + 1}"
        out.append([start + j for j in range(block_size)])
    return out


def test_rail_pools_give_every_node_its_pod_addresses_and_never_a_host_or_gateway(plan: Plan) -> None:
    files = objects(plan)
    if "rails.yaml" not in files:
        return
    pools = [o for o in files["rails.yaml"] if o["kind"] == "IPPool"]
    leaves = {(h.rail, leaf.scalable_unit): h for leaf in plan.switches_by_role("leaf") for h in leaf.host_subnets}
    assert (
        len(pools)
        == len(leaves)
        == len(plan.networks.rails[: len(rail_interfaces(plan))]) * len({su for _, su in leaves})
    )
    want = plan.kubernetes.rail_pod_addresses
    for p in pools:
        spec = p["spec"]
        rail, su = (int(x) for x in re.fullmatch(r"rail(\d+)-su(\d+)", p["metadata"]["name"]).groups())
        block = IPv4Network(spec["subnet"])
        assert str(block) == leaves[(rail, su)].subnet and spec["gateway"] == leaves[(rail, su)].gateway
        gpus = [n for n in plan.nodes if n.scalable_unit == su and any(r.index == rail for r in n.rails)]
        hosts = {IPv4Address(r.address) for n in gpus for r in n.rails if r.index == rail}
        excluded = set()
        for e in spec["exclusions"]:
            a = IPv4Address(e["startIP"])
            while a <= IPv4Address(e["endIP"]):
                excluded.add(a)
                a += 1
        assert hosts <= excluded  # a pod never gets a host's address
        for addresses in _nv_ipam_ranges(block, spec["perNodeBlockSize"], plan.kubernetes.scalable_unit):
            usable = [a for a in addresses if a not in excluded and str(a) != spec["gateway"]]
            assert len(usable) >= want, (p["metadata"]["name"], addresses)
            assert not hosts & set(usable)


def test_rail_networks_and_devices_follow_the_plan(plan: Plan) -> None:
    files = objects(plan)
    if "rails.yaml" not in files:
        return
    names = rail_interfaces(plan)
    policy = next(o for o in files["rails.yaml"] if o["kind"] == "NicClusterPolicy")
    config = json.loads(policy["spec"]["rdmaSharedDevicePlugin"]["config"])["configList"]
    assert [(c["resourcePrefix"], c["resourceName"], c["selectors"]["ifNames"]) for c in config] == [
        ("rdma", f"rail{r}", [name]) for r, name in names.items()
    ]
    # One network per rail in each tenant, with no config: Multus takes each node's own file of that name.
    nets = [o for o in files["rails.yaml"] if o["kind"] == "NetworkAttachmentDefinition"]
    pools = {o["metadata"]["name"] for o in files["rails.yaml"] if o["kind"] == "IPPool"}
    for t in plan.tenants:
        mine = [n for n in nets if n["metadata"]["namespace"] == t.namespace]
        assert sorted(n["metadata"]["name"] for n in mine) == sorted(f"aisite-rail{r}" for r in names)
        assert all(n["spec"] == {} for n in mine)
    for n in plan.nodes if plan.kubernetes.rail_pod_addresses else ():
        for r in n.rails:
            assert (r.pod_network, r.pod_pool) == (f"aisite-rail{r.index}", f"rail{r.index}-su{n.scalable_unit}")
            assert r.pod_pool in pools
    for t in plan.tenants:
        quota = next(o for o in files[f"tenant-{t.name}.yaml"] if o["metadata"]["name"] == "rail-quota")
        assert quota["spec"]["hard"] == {f"requests.rdma/rail{r}": str(t.gpu_quota) for r in names}


def test_jobs_are_sized_from_the_plan_with_the_fabric_settings(plan: Plan) -> None:
    """Every workload's job: its GPUs and one RDMA device per rail, the rail networks (one name per rail), NCCL's RoCE
    settings, the tenant's queue, the payloads and datasets mounted, /dev/shm sized; results in one schema."""
    rendered = jobs(plan)
    assert set(rendered) == {f"workloads/{w.name}.yaml" for w in plan.workloads} | {
        f"workloads/{t}.yaml" for t in {w.tenant for w in (*plan.workloads, *plan.serving)}
    } | {f"workloads/serving-{s.name}.yaml" for s in plan.serving}
    for w in plan.workloads:
        # The job (its claim templates and ComputeDomain before it, where it claims: test_dra.py).
        claims = ("Service", "ResourceClaimTemplate", "ComputeDomain")
        (job,) = [o for o in rendered[f"workloads/{w.name}.yaml"] if o["kind"] not in claims]
        assert job["metadata"]["namespace"] == w.namespace
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "jobs"
        text = json.dumps(job)
        assert '"NCCL_IB_TC", "value": "106"' in text and '"NCCL_IB_GID_INDEX", "value": "3"' in text
        # The rails of the nodes it runs on (a site's Grace trays have four beside DGX systems' eight).
        own = [n for n in plan.nodes if n.gpu and n.gpu.type == w.gpu_type]
        rails = sorted({r.index for n in own for r in n.rails})
        devices = {r.index: r.rdma for n in own for r in n.rails}
        if rails and all(devices.values()):  # the model's documented RDMA devices, rail by rail
            assert '"NCCL_IB_HCA", "value": "=' + ",".join(devices[r] for r in rails) + '"' in text
        else:  # not documented: NCCL takes the devices the pod was given
            assert "NCCL_IB_HCA" not in text
        if job["kind"] == "MPIJob":
            worker = job["spec"]["mpiReplicaSpecs"]["Worker"]
            assert worker["replicas"] == w.nodes and job["spec"]["slotsPerWorker"] == max(1, w.gpus_per_node)
            pod = worker["template"]
            limits = pod["spec"]["containers"][0]["resources"]["limits"]
        elif job["kind"] == "TrainJob":
            t = job["spec"]["trainer"]
            assert (t["numNodes"], t["numProcPerNode"]) == (w.nodes, w.gpus_per_node)
            limits = t["resourcesPerNode"]["limits"]
            pod = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
            pod = pod["template"]["spec"]["template"]
        else:
            pod = job["spec"]["template"]
            limits = pod["spec"]["containers"][0]["resources"]["limits"]
        dra = plan.kubernetes.gpu_allocation == "dra"  # GPUs claimed, not requested
        assert limits.get("nvidia.com/gpu") == (str(w.gpus_per_node) if w.gpus_per_node and not dra else None)
        assert {k: v for k, v in limits.items() if k.startswith("rdma/")} == {f"rdma/rail{r}": "1" for r in rails}
        networks = pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"].split(",")
        assert networks == [f"aisite-rail{r}" for r in rails]
        assert "aisite.io/scalable-unit" not in pod["spec"].get("nodeSelector", {})  # free to span units
        vols = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert vols["payloads"]["configMap"]["name"] == "aisite-payloads"
        if any(e.name == "datasets" for e in plan.exports):  # the site's NFS export, where it has one
            assert vols["datasets"]["persistentVolumeClaim"]["claimName"] == "datasets"
        else:
            assert "datasets" not in vols
        assert vols["dshm"]["emptyDir"]["sizeLimit"] == f"{max(1, w.gpus_per_node) * 8}Gi"
    for t in {w.tenant for w in plan.workloads}:
        cm = next(o for o in rendered[f"workloads/{t}.yaml"] if o["kind"] == "ConfigMap")
        assert set(cm["data"]) == {
            "result.py",
            "resnet.py",
            "tools.py",
            "serve.py",
            "evaluate.py",
            "checkpoints.py",
            "foreign_json.py",
        }
        assert "aisite.bench/v1" in cm["data"]["result.py"]


def test_gitops_handover_passes_the_crds_and_kubernetes(plan: Plan) -> None:
    """manifests/gitops/<site>/: Flux's GitRepository and the Pulumi Operator's Stack against their CRDs, the rest
    against Kubernetes; secrets by name and key only."""
    files = gitops_objects(plan)
    if plan.gitops is None:
        assert files == {}
        return
    schemas = crd_schemas()
    every = [o for objs in files.values() for o in objs]
    assert {o["kind"] for o in every} == {"Namespace", "ServiceAccount", "ClusterRoleBinding", "GitRepository", "Stack"}
    for o in every:
        key = (o["apiVersion"], o["kind"])
        if key in schemas:
            jsonschema.Draft7Validator(schemas[key]).validate(o)
        else:
            kubernetes_validate.validate(o, plan.kubernetes.version, strict=True)
    (repo,) = files["gitrepository.yaml"]
    (stack,) = files["stack.yaml"]
    assert repo["spec"]["url"] == plan.gitops.repository and repo["spec"]["ref"] == {"branch": plan.gitops.branch}
    assert repo["spec"]["verify"]["secretRef"]["name"] == plan.gitops.signers_secret
    assert stack["spec"]["fluxSource"]["sourceRef"]["name"] == repo["metadata"]["name"]
    refs = stack["spec"]["envRefs"]
    assert set(refs) == {*secret_env_names(plan), "PULUMI_ACCESS_TOKEN"}
    declared = load_site(plan.site).secrets.values()  # the stack file's password_from.env, not the plan's copy
    assert set(secret_env_names(plan)) == {s.password_from.env for s in declared if s.password_from.env}
    assert all(
        set(r) == {"type", "secret"} and r["secret"]["name"] == plan.gitops.credentials_secret for r in refs.values()
    )
    assert stack["spec"]["continueResyncOnCommitMatch"] is True  # drift is reverted on the resync period


def test_jobs_take_the_gid_index_and_traffic_class_from_the_plan() -> None:
    """One fact, one place: a site that changes its RoCE GID index or DSCP gets jobs (NCCL and ib_write_bw) that
    agree with its hosts."""
    from aisite.loader import parse_site
    from tests.conftest import stack_data

    data = stack_data("h100pod")  # Cumulus: any RoCE profile (Onyx's `roce lossless` fixes the DSCP)
    data["fabric"]["roce"] = {"gid_index": 5, "roce_dscp": 24}
    plan = build_plan(parse_site(data, "h100pod"))
    assert plan.roce.nccl_ib_gid_index == 5 and plan.roce.traffic_class == (24 << 2) | 2
    text = json.dumps(jobs(plan))
    assert '"NCCL_IB_GID_INDEX", "value": "5"' in text and '"NCCL_IB_TC", "value": "98"' in text
    gids = re.findall(r"ib_write_bw -d mlx5_\d+ -x (\d+) --tclass=(\d+)", text)
    assert gids and set(gids) == {("5", "98")}
