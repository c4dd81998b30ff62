"""Pod Security, checked as the API server's admission would: every pod template the site renders (the charts' on
Helm's render, the project's objects and jobs) and the pods the operators create at runtime, against the level its
namespace enforces. Namespaces with no label get the site's default (kubernetes.pod_security); kube-system is
exempt (roles/kubernetes's admission configuration)."""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
import yaml

from aisite.plan import Plan
from aisite.platform import NAMESPACES, charts, jobs, objects
from aisite.playbooks import ROLES
from tests.conftest import ROOT, STACKS
from tests.pod_security import LEVELS, lowest_level, pod_templates, violations
from tests.test_helm import RELEASES, _plan, rendered

EXEMPT = yaml.safe_load((ROLES / "kubernetes/defaults/main.yml").read_text())[
    "kubernetes_pod_security_exempt_namespaces"
]


def enforced(plan: Plan, namespace: str) -> str:
    """The level admission enforces in a namespace of the site ("privileged" where exempt)."""
    if namespace in EXEMPT:
        return "privileged"
    for objs in objects(plan).values():
        for o in objs:
            if o["kind"] == "Namespace" and o["metadata"]["name"] == namespace:
                return str(
                    o["metadata"]["labels"].get("pod-security.kubernetes.io/enforce", plan.kubernetes.pod_security)
                )
    return plan.kubernetes.pod_security


def test_the_checks_refuse_what_the_standards_forbid() -> None:
    """The checker itself, on the standards' own examples: it can fail."""
    ok = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {"name": "c", "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}
        ],
        "volumes": [{"name": "v", "emptyDir": {}}],
    }
    assert violations(ok, "restricted") == [] and lowest_level(ok) == "restricted"
    cases = {
        "baseline": [
            ("hostNetwork", lambda s: s.update(hostNetwork=True)),
            ("hostPath", lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}})),
            ("privileged", lambda s: s["containers"][0]["securityContext"].update(privileged=True)),
            ("IPC_LOCK", lambda s: s["containers"][0]["securityContext"]["capabilities"].update(add=["IPC_LOCK"])),
            ("hostPort", lambda s: s["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}])),
            ("sysctl", lambda s: s["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}])),
            ("Unconfined", lambda s: s["securityContext"].update(seccompProfile={"type": "Unconfined"})),
        ],
        "restricted": [
            ("runAsNonRoot", lambda s: s["securityContext"].pop("runAsNonRoot")),
            (
                "allowPrivilegeEscalation",
                lambda s: s["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
            ),
            ("drop ALL", lambda s: s["containers"][0]["securityContext"].pop("capabilities")),
            ("seccomp", lambda s: s["securityContext"].pop("seccompProfile")),
            ("nfs volume", lambda s: s["volumes"].append({"name": "n", "nfs": {"server": "x", "path": "/"}})),
            ("runAsUser 0", lambda s: s["securityContext"].update(runAsUser=0)),
        ],
    }
    for level, edits in cases.items():
        for what, edit in edits:
            spec = copy.deepcopy(ok)
            edit(spec)
            assert violations(spec, level), f"{what} passes {level}"
            assert LEVELS.index(lowest_level(spec)) < LEVELS.index(level), what


@pytest.mark.parametrize(("stack", "release"), RELEASES)
def test_every_pod_a_release_renders_is_admitted_in_its_namespace(stack: str, release: str) -> None:
    plan = _plan(stack)
    c, _, objs = rendered(stack, release)
    problems = []
    for o in objs:
        namespace = o.get("metadata", {}).get("namespace") or c.namespace
        level = enforced(plan, namespace)
        for where, spec, pod_annotations in pod_templates(o):
            problems += [
                f"{release}: {where} in {namespace} ({level}): {v}" for v in violations(spec, level, pod_annotations)
            ]
    assert problems == []


def _merged(runtime: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A TrainJob's pod: the runtime's, with the job's patch merged in (containers by name), as the trainer does."""
    spec = copy.deepcopy(runtime)
    for key, value in patch.items():
        if key == "containers":
            for c in value:
                base = next(x for x in spec["containers"] if x["name"] == c["name"])
                base.update(c)
        else:
            spec[key] = value
    return spec


@functools.cache
def _site_pods(stack: str) -> list[tuple[str, str, dict[str, Any], dict[str, str]]]:
    """(namespace, where, pod spec, annotations) of every pod the project's own objects and jobs create."""
    plan = _plan(stack)
    out = []
    every = [o for objs in (objects(plan) | jobs(plan)).values() for o in objs]
    runtimes = {o["metadata"]["name"]: o for o in every if o["kind"] == "ClusterTrainingRuntime"}
    for o in every:
        namespace = o["metadata"].get("namespace", "")
        if o["kind"] == "TrainJob":
            runtime = runtimes[o["spec"]["runtimeRef"]["name"]]
            [(_, base, annotations)] = list(pod_templates(runtime))
            for patch in o["spec"]["runtimePatches"]:
                for rj in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
                    pod = rj["template"]["spec"]["template"]
                    spec = _merged(base, pod["spec"])
                    out.append((namespace, f"TrainJob {o['metadata']['name']}", spec, annotations))
        elif o["kind"] != "ClusterTrainingRuntime":  # runs only as a TrainJob's pods, above
            out += [(namespace, where, spec, ann) for where, spec, ann in pod_templates(o)]
    return out


@pytest.mark.parametrize("stack", STACKS)
def test_the_projects_pods_are_admitted_in_their_tenants_namespaces(stack: str) -> None:
    plan = _plan(stack)
    pods = _site_pods(stack)
    assert pods, "no pods rendered"
    problems = [
        f"{where} in {ns} ({enforced(plan, ns)}): {v}"
        for ns, where, spec, ann in pods
        for v in violations(spec, enforced(plan, ns), ann)
    ]
    assert problems == []
    # And the check can fail: the IPC_LOCK the jobs once added is refused at every tenant's level.
    ns, _, spec, ann = next(p for p in pods if enforced(plan, p[0]) != "privileged")
    spec = copy.deepcopy(spec)
    spec["containers"][0]["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    assert violations(spec, enforced(plan, ns), ann)


@pytest.mark.parametrize("stack", STACKS)
def test_tenants_stay_restricted_unless_they_say_so_and_never_privileged(stack: str) -> None:
    plan = _plan(stack)
    for t in plan.tenants:
        assert enforced(plan, t.namespace) == t.pod_security in ("restricted", "baseline")
    declared = {t["name"]: t.get("pod_security") for t in _stack_tenants(stack)}
    assert {t.name for t in plan.tenants if t.pod_security != "restricted"} == {
        name for name, level in declared.items() if level
    }


def _stack_tenants(stack: str) -> list[dict[str, Any]]:
    doc = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    return list(doc["config"]["aisite:site"]["kubernetes"]["tenants"])


@pytest.mark.parametrize("stack", STACKS)
def test_release_namespaces_are_the_projects_and_come_first(stack: str) -> None:
    plan = _plan(stack)
    files = objects(plan)
    assert next(iter(files)) == NAMESPACES
    made = {o["metadata"]["name"] for o in files[NAMESPACES]}
    assert made == {c.namespace for c in charts(plan)} - set(EXEMPT)


# Pods the operators create at runtime from their own assets, not from the chart: what each needs, read in the
# operators' sources at the pinned releases (NVIDIA/gpu-operator v26.3.3 assets/, Mellanox/network-operator v26.4.1
# manifests/), and the site setting that turns it on. Every one is privileged or mounts host paths.
RUNTIME_PODS: dict[str, list[tuple[str, str, str]]] = {
    "gpu-operator": [
        ("devicePlugin", "assets/state-device-plugin/0500_daemonset.yaml", "privileged, hostPath"),
        ("gfd", "assets/gpu-feature-discovery/0500_daemonset.yaml", "privileged, hostPath"),
        ("dcgmExporter", "assets/state-dcgm-exporter/0800_daemonset.yaml", "privileged, hostPath"),
        ("migManager", "assets/state-mig-manager/0600_daemonset.yaml", "privileged, hostPID, hostPath"),
        ("validator", "assets/state-operator-validation/0500_daemonset.yaml", "privileged"),
    ],
    "network-operator": [
        (
            "rdmaSharedDevicePlugin",
            "manifests/state-rdma-shared-device-plugin/0060_rdma-shared-dev-plugin-ds.yaml",
            "privileged, hostNetwork, hostPath",
        ),
        ("secondaryNetwork.multus", "manifests/state-multus-cni/0050-multus-ds.yml", "privileged, hostNetwork"),
        (
            "secondaryNetwork.cniPlugins",
            "manifests/state-container-networking-plugins/0010-container-networking-plugins-ds.yml",
            "privileged, hostNetwork, hostPath",
        ),
        ("nvIpam", "manifests/state-nv-ipam-cni/040-nv-ipam-node.yaml", "privileged, hostPath"),
    ],
    # The chart's subchart (prometheus-node-exporter 4.56.1): host network and PID namespaces, / mounted.
    "monitoring": [
        ("nodeExporter", "charts/prometheus-node-exporter/templates/daemonset.yaml", "hostNetwork, hostPID")
    ],
}


def _enabled(plan: Plan, release: str, key: str) -> bool:
    if release == "network-operator":
        ncp = next((o for objs in objects(plan).values() for o in objs if o["kind"] == "NicClusterPolicy"), None)
        node: Any = ncp["spec"] if ncp else {}
    else:
        c = next(c for c in charts(plan) if c.release == release)
        node = c.values | ({"validator": {}} if release == "gpu-operator" else {}) | {"nodeExporter": {}}
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node is not None and (not isinstance(node, dict) or node.get("enabled", True) is not False)


@pytest.mark.parametrize("stack", STACKS)
def test_operators_runtime_pods_are_admitted(stack: str) -> None:
    """The operators' DaemonSets the site turns on run in a namespace that admits privileged pods."""
    plan = _plan(stack)
    by_release = {c.release: c for c in charts(plan)}
    checked = []
    for release, pods in RUNTIME_PODS.items():
        if release not in by_release:
            continue
        for key, source, needs in pods:
            if _enabled(plan, release, key):
                level = enforced(plan, by_release[release].namespace)
                assert level == "privileged", f"{release} {key} ({source}: {needs}) but {level} is enforced"
                checked.append(key)
    assert checked, "no operator pods checked"


def test_a_restricted_tenants_mpijob_runs_non_root_and_is_admitted() -> None:
    """The NCCL test as an MPIJob in a restricted tenant: launcher and workers non-root as the MPI Operator runs
    them (its key at the user's ~/.ssh, sshd as that user on a high port, mpirun reaching it there), admitted at
    restricted and valid against the MPIJob CRD; a baseline tenant's keeps root's sshd on port 22."""
    import jsonschema

    from aisite.loader import parse_site
    from aisite.plan import build_plan
    from tests.conftest import stack_data
    from tests.test_platform import crd_schemas

    data = stack_data("lab")
    data["kubernetes"]["tenants"][0].pop("pod_security", None)  # restricted, the default
    plan = build_plan(parse_site(data, "labnr"))
    tenant = plan.tenants[0]
    assert tenant.pod_security == "restricted"
    mpijobs = [
        o
        for objs in jobs(plan).values()
        for o in objs
        if o["kind"] == "MPIJob" and o["metadata"]["namespace"] == tenant.namespace
    ]
    assert mpijobs, "the lab's first tenant runs the NCCL test as an MPIJob"
    schema = crd_schemas()[("kubeflow.org/v2beta1", "MPIJob")]
    for job in mpijobs:
        spec = job["spec"]
        assert spec["sshAuthMountPath"] == "/home/ubuntu/.ssh"
        jsonschema.Draft7Validator(schema).validate(job)
        launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
        worker = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
        for pod in (launcher, worker):
            assert violations(pod, "restricted") == [], job["metadata"]["name"]
            assert pod["securityContext"]["runAsUser"] == 1000
        sshd = worker["containers"][0]["command"]
        assert sshd[:2] == ["sh", "-c"] and "Port 2222" in sshd[2] and "sshd -De -f /tmp/sshd_config" in sshd[2]
        mpirun = launcher["containers"][0]["command"]
        assert "--allow-run-as-root" not in mpirun
        assert mpirun[mpirun.index("plm_rsh_args") + 1].startswith("-p 2222 ")
    # A baseline tenant's MPIJob is root's, as before.
    baseline = build_plan(parse_site(stack_data("lab"), "labb"))
    job = next(
        o
        for objs in jobs(baseline).values()
        for o in objs
        if o["kind"] == "MPIJob" and o["metadata"]["namespace"] == baseline.tenants[0].namespace
    )
    assert "sshAuthMountPath" not in job["spec"]
    assert job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"] == [
        "/usr/sbin/sshd",
        "-De",
    ]
