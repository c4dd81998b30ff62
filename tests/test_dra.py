"""GPU allocation through Dynamic Resource Allocation, and racks' ComputeDomains: NVIDIA's DRA driver's release, the
jobs' claims, Kueue's accounting and topology, the tenants' quotas, and the version set the checks hold a site to.
(Helm renders and CRD/schema validation of every shipped stack, gb200's DRA objects included: test_helm.py,
test_platform.py, test_render.py.)"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import yaml

from aisite.loader import load_site, parse_site
from aisite.plan import Plan, build_plan
from aisite.platform import charts, jobs, objects
from aisite.platform.dra import DRA_DRIVER
from aisite.platform.kueue import CLIQUE_LEVEL, REQUIRED_TOPOLOGY, UNIT_LEVEL
from tests.conftest import assert_reported, site_problems, stack_data


def release(plan: Plan, name: str) -> dict[str, Any]:
    return next(c.values for c in charts(plan) if c.chart == name)


def workload(plan: Plan, name: str) -> list[dict[str, Any]]:
    return jobs(plan)[f"workloads/{name}.yaml"]


def kueue_config(plan: Plan) -> dict[str, Any]:
    text = release(plan, "kueue")["managerConfig"]["controllerManagerConfigYaml"]
    return yaml.safe_load(text)  # type: ignore[no-any-return]


def worker(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]  # type: ignore[no-any-return]


def test_gb200_claims_its_gpus_and_one_compute_domain_per_job() -> None:
    plan = build_plan(load_site("gb200"))
    values = release(plan, DRA_DRIVER)
    assert values["resources"] == {"gpus": {"enabled": True}, "computeDomains": {"enabled": True}}
    assert values["gpuResourcesEnabledOverride"] is True
    assert values["kubeletPlugin"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert release(plan, "gpu-operator")["devicePlugin"] == {"enabled": False}
    template, domain, job = workload(plan, "nccl-allreduce-rack")
    request = template["spec"]["spec"]["devices"]["requests"][0]
    assert request == {
        "name": "gpus",
        "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 4},
    }
    kubernetes_validate.validate(template, plan.kubernetes.version, strict=True)
    assert domain["kind"] == "ComputeDomain" and domain["metadata"]["namespace"] == "tenant-llm"
    assert domain["spec"]["channel"]["resourceClaimTemplate"]["name"] == "nccl-allreduce-rack-domain-channel"
    pod = worker(job)
    assert pod["spec"]["resourceClaims"] == [
        {"name": "gpus", "resourceClaimTemplateName": "nccl-allreduce-rack-gpus"},
        {"name": "imex-channel", "resourceClaimTemplateName": "nccl-allreduce-rack-domain-channel"},
    ]
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["claims"] == [{"name": "gpus"}, {"name": "imex-channel"}]
    assert "nvidia.com/gpu" not in resources["limits"]
    # The launcher runs no GPU work: no claims, wherever it lands.
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    assert "resourceClaims" not in launcher and "claims" not in launcher["containers"][0].get("resources", {})
    # One rack holds the job (18 trays): Kueue keeps it in one NVLink clique, in the rack's Topology.
    assert pod["metadata"]["annotations"][REQUIRED_TOPOLOGY] == CLIQUE_LEVEL
    kueue = {
        o["metadata"]["name"]: o for o in objects(plan)["kueue.yaml"] if o["kind"] in ("Topology", "ResourceFlavor")
    }
    assert [lv["nodeLabel"] for lv in kueue["nvlink"]["spec"]["levels"]] == [
        "aisite.io/scalable-unit",
        "aisite.io/rack",
        "nvidia.com/gpu.clique",
        "kubernetes.io/hostname",
    ]
    assert kueue["gpu-gb200"]["spec"]["topologyName"] == "nvlink" and "fabric" not in kueue
    # Kueue counts the claims: GPUs as the quota's nvidia.com/gpu, channels as a resource every queue covers.
    assert kueue_config(plan)["resources"]["deviceClassMappings"] == [
        {"name": "nvidia.com/gpu", "deviceClassNames": ["gpu.nvidia.com"]},
        {"name": "aisite.io/imex-channel", "deviceClassNames": ["compute-domain-default-channel.nvidia.com"]},
    ]
    queue = next(o for o in objects(plan)["kueue.yaml"] if o["kind"] == "ClusterQueue")
    group = queue["spec"]["resourceGroups"][0]
    assert group["coveredResources"] == ["nvidia.com/gpu", "aisite.io/imex-channel"]
    assert group["flavors"][0]["resources"][1] == {"name": "aisite.io/imex-channel", "nominalQuota": 72}
    # And the namespace's own quota caps the claims per DeviceClass, as it caps nvidia.com/gpu requests.
    quota = next(o for o in objects(plan)["tenant-llm.yaml"] if o["kind"] == "ResourceQuota")
    assert quota["spec"]["hard"]["gpu.nvidia.com.deviceclass.resource.k8s.io/devices"] == "216"


def test_a_job_larger_than_a_rack_stays_in_its_unit_without_a_clique() -> None:
    data = stack_data("gb200")
    data["workloads"][0] |= {"name": "nccl-two-racks", "nodes": 36}
    plan = build_plan(parse_site(data))
    *_, job = workload(plan, "nccl-two-racks")
    assert worker(job)["metadata"]["annotations"][REQUIRED_TOPOLOGY] == UNIT_LEVEL


def test_device_plugin_racks_get_compute_domains_beside_the_device_plugin() -> None:
    data = stack_data("gb200")
    del data["kubernetes"]["gpu_allocation"]
    plan = build_plan(parse_site(data))
    values = release(plan, DRA_DRIVER)
    assert values["resources"] == {"gpus": {"enabled": False}, "computeDomains": {"enabled": True}}
    assert "gpuResourcesEnabledOverride" not in values
    assert release(plan, "gpu-operator")["devicePlugin"] == {"enabled": True}
    domain, job = workload(plan, "nccl-allreduce-rack")
    assert domain["kind"] == "ComputeDomain"
    pod = worker(job)
    assert pod["spec"]["resourceClaims"] == [
        {"name": "imex-channel", "resourceClaimTemplateName": "nccl-allreduce-rack-domain-channel"}
    ]
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert kueue_config(plan)["resources"]["deviceClassMappings"] == [
        {"name": "aisite.io/imex-channel", "deviceClassNames": ["compute-domain-default-channel.nvidia.com"]}
    ]
    quota = next(o for o in objects(plan)["tenant-llm.yaml"] if o["kind"] == "ResourceQuota")
    assert list(quota["spec"]["hard"]) == ["requests.nvidia.com/gpu"]


def test_dra_on_a_dgx_site_claims_gpus_and_no_compute_domain() -> None:
    data = stack_data("h100pod")
    data["kubernetes"]["gpu_allocation"] = "dra"
    data["kubernetes"]["addons"].remove("training-operator")  # its TrainJobs cannot claim (checked below)
    data["kubernetes"]["tenants"][1]["pod_security"] = "baseline"  # the ResNet jobs become MPIJobs (sshd as root)
    plan = build_plan(parse_site(data))
    assert release(plan, DRA_DRIVER)["resources"] == {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}}
    objs = workload(plan, "nccl-allreduce-32")
    assert [o["kind"] for o in objs] == ["ResourceClaimTemplate", "MPIJob"]
    assert worker(objs[-1])["metadata"]["annotations"][REQUIRED_TOPOLOGY] == UNIT_LEVEL
    assert [
        lv["nodeLabel"] for o in objects(plan)["kueue.yaml"] if o["kind"] == "Topology" for lv in o["spec"]["levels"]
    ] == [
        "aisite.io/scalable-unit",
        "kubernetes.io/hostname",
    ]
    # Jobs without GPUs claim nothing.
    assert all(o["kind"] != "ResourceClaimTemplate" for o in workload(plan, "ib-write-bw"))


def test_device_plugin_sites_render_no_dra_driver() -> None:
    plan = build_plan(load_site("h100pod"))
    assert DRA_DRIVER not in {c.chart for c in charts(plan)}
    assert "deviceClassMappings" not in kueue_config(plan)["resources"]
    assert not any(
        o["kind"] in ("ResourceClaimTemplate", "ComputeDomain") for objs in jobs(plan).values() for o in objs
    )


def test_the_version_set_and_what_dra_cannot_do_are_refused_at_once() -> None:
    data = stack_data("h100pod")
    data["kubernetes"] |= {"gpu_allocation": "dra", "version": "1.33.4", "mig_strategy": "mixed"}
    data["kubernetes"]["addons"].remove("gpu-operator")
    found = site_problems(data)
    want = {
        "site.kubernetes.gpu_allocation": "add gpu-operator",
        "site.kubernetes.version": "1.34.2 or later",
        "site.kubernetes.mig_strategy": "use single or none",
        "site.workloads[1].kind": "cannot carry resource claims",
    }
    assert_reported(found, want)
    # Racks' ComputeDomains ask the same of the version where the DRA driver comes with the GPU Operator ...
    data = stack_data("gb200")
    del data["kubernetes"]["gpu_allocation"]
    data["kubernetes"]["version"] = "1.33.4"
    found = site_problems(data)
    assert found == [
        "site.kubernetes.version: 1.33.4: the racks of site.gpu_nodes[0] (their ComputeDomains) needs Dynamic "
        "Resource Allocation's resource.k8s.io/v1, which aisite's version set asks of Kubernetes 1.34.2 or later"
    ]
    # ... and without it a rack runs IMEX from its hosts' configuration alone: nothing to refuse.
    data["kubernetes"]["addons"].remove("gpu-operator")
    assert DRA_DRIVER not in {c.chart for c in charts(build_plan(parse_site(data)))}
