"""The tenants' placement policy, offline: its objects against the API's schemas, and its CEL evaluated by a CEL
evaluator (cel-python) against pods that must pass and pods that must fail. No API server runs here, so the policy
is not seen enforced; what is checked is that its expressions say what they should."""

from __future__ import annotations

from typing import Any

import celpy
import kubernetes_validate
import pytest

from aisite.loader import load_site
from aisite.plan import UNHEALTHY_TAINT, build_plan
from aisite.platform import objects
from aisite.platform.admission import POLICY, VALIDATIONS, admission_objects
from aisite.platform.charts import charts

PLAN = build_plan(load_site("dc1"))


def admitted(pod: dict[str, Any], operation: str = "CREATE") -> list[str]:
    """The messages of the validations the pod fails (empty: admitted), each expression compiled and evaluated as
    the API server would, with `object` and `request` bound."""
    env = celpy.Environment()
    activation = {"object": celpy.json_to_cel(pod), "request": celpy.json_to_cel({"operation": operation})}
    failed = []
    for expression, message in VALIDATIONS:
        result = env.program(env.compile(expression)).evaluate(activation)
        assert isinstance(result, celpy.celtypes.BoolType), (expression, result)
        if not result:
            failed.append(message)
    return failed


def pod(**spec: Any) -> dict[str, Any]:
    base = {"containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:25.01-py3"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}, "spec": base | spec}


GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

MUST_PASS = {
    "plain": pod(),
    "gpu toleration (what the jobs and the flavors add)": pod(tolerations=[GPU]),
    "another taint, by key": pod(tolerations=[{"key": "example.com/spot", "operator": "Equal", "value": "x"}]),
    "no tolerations at all": pod(tolerations=[]),
}
MUST_FAIL = {
    "tolerates every taint": pod(tolerations=[GPU, {"operator": "Exists"}]),
    "empty key": pod(tolerations=[{"key": "", "operator": "Exists"}]),
    "the quarantine's taint": pod(tolerations=[{"key": UNHEALTHY_TAINT, "operator": "Exists"}]),
    "the cordon": pod(tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]),
    "names its node": pod(nodeName="gpu07"),
}


@pytest.mark.parametrize("name", MUST_PASS)
def test_a_tenants_ordinary_pods_are_admitted(name: str) -> None:
    assert admitted(MUST_PASS[name]) == []


@pytest.mark.parametrize("name", MUST_FAIL)
def test_a_pod_that_would_reach_a_quarantined_node_is_refused(name: str) -> None:
    assert admitted(MUST_FAIL[name]), name


def test_a_scheduled_pod_can_still_be_updated_but_not_given_a_wildcard() -> None:
    scheduled = pod(nodeName="gpu07", tolerations=[GPU])
    assert admitted(scheduled, "UPDATE") == []  # the scheduler bound it; a label change must not be refused
    assert admitted(pod(nodeName="gpu07", tolerations=[{"operator": "Exists"}]), "UPDATE")


def test_the_policy_binds_every_tenant_namespace_and_validates() -> None:
    docs = admission_objects(PLAN)
    for doc in docs:
        kubernetes_validate.validate(doc, PLAN.kubernetes.version, strict=True)
    policy, binding = docs
    assert binding["spec"]["policyName"] == policy["metadata"]["name"] == POLICY
    assert binding["spec"]["validationActions"] == ["Deny"]
    selector = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    rendered = objects(PLAN)
    assert rendered["admission.yaml"] == docs
    tenants = [d for name, ds in rendered.items() if name.startswith("tenant-") for d in ds if d["kind"] == "Namespace"]
    assert tenants and all(all(e["key"] in t["metadata"]["labels"] for e in selector) for t in tenants)
    others = [d for d in rendered.get("namespaces.yaml", []) + rendered["acceptance.yaml"] if d["kind"] == "Namespace"]
    assert others and not any(all(e["key"] in t["metadata"]["labels"] for e in selector) for t in others)


def test_kueue_manages_every_job_in_a_tenants_namespace() -> None:
    import yaml

    (kueue,) = [c for c in charts(PLAN) if c.chart == "kueue"]
    config = yaml.safe_load(kueue.values["managerConfig"]["controllerManagerConfigYaml"])
    assert config["manageJobsWithoutQueueName"] is True
    assert (
        config["managedJobsNamespaceSelector"]
        == admission_objects(PLAN)[1]["spec"]["matchResources"]["namespaceSelector"]
    )
