"""Notebooks per tenant (the jupyterhub addon), run through the hub's own code: the jupyterhub release is rendered by
Helm from the pinned chart (tests/test_helm.py validates every object of it), then the chart's own
jupyterhub_config.py runs on what the render gives the hub (its ConfigMap and Secret, as the hub pod mounts them),
the project's hub code included, and KubeSpawner 7.0.0 (the hub image's) builds the notebook pod a user would get.

What is not the hub's: z2jh.py's root directory is this test's instead of /usr/local/etc/jupyterhub, the Services'
addresses are what Kubernetes would put in the hub's environment, tornado's curl client is not configured (pycurl is
the hub image's, not ours), and KubeSpawner's API client points at a loopback address it never calls. No hub runs,
no cluster admits the pod: it is validated offline (kubernetes-validate, Pod Security, the tenants' placement
policy)."""

from __future__ import annotations

import asyncio
import base64
import copy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import Mock

import kubernetes_validate
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aisite.loader import load_site, parse_site
from aisite.plan import Plan, build_plan
from aisite.platform import objects
from aisite.platform.images import site_images
from aisite.platform.notebooks import HUB_RULES, NAMESPACE, gpu_choices, tenant_profiles
from tests.conftest import run_cli, stack_data
from tests.pod_security import violations
from tests.test_admission import admitted
from tests.test_cli import write_stack
from tests.test_helm import HELM, rendered

kubespawner = pytest.importorskip("kubespawner", reason="jupyterhub-kubespawner is not installed (make setup)")
STACK = "h100pod"
CHART_HUB = HELM / "jupyterhub-4.4.0" / "jupyterhub" / "files" / "hub"


@pytest.fixture(scope="module")
def hub_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The hub's traitlets config, as the chart's jupyterhub_config.py builds it from the rendered release."""
    _, _, objs = rendered(STACK, "jupyterhub")
    root = tmp_path_factory.mktemp("hub")
    (root / "config").mkdir()
    (root / "secret").mkdir()
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "hub"]
    (secret,) = [o for o in objs if o["kind"] == "Secret" and o["metadata"]["name"] == "hub"]
    for key, text in cm["data"].items():
        (root / "config" / key).write_text(text)
    for key, b64 in secret["data"].items():
        (root / "secret" / key).write_bytes(base64.b64decode(b64))
    (root / "jupyterhub_config.py").write_text((CHART_HUB / "jupyterhub_config.py").read_text())
    z2jh = (CHART_HUB / "z2jh.py").read_text()
    assert z2jh.count("/usr/local/etc/jupyterhub/") == 3
    (root / "z2jh.py").write_text(z2jh.replace("/usr/local/etc/jupyterhub/", f"{root}/"))
    (root / "kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: none\n"
        "clusters: [{name: none, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: none, user: {}}]\n"
        "contexts: [{name: none, context: {cluster: none, user: none}}]\n"
    )
    mp = pytest.MonkeyPatch()
    from kubernetes_asyncio.config import kube_config

    # Read from KUBECONFIG when the module was first imported: set where KubeSpawner's client loads it.
    mp.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(root / "kubeconfig"))
    for o in objs:
        if o["kind"] == "Service":
            env = o["metadata"]["name"].upper().replace("-", "_")
            mp.setenv(f"{env}_SERVICE_HOST", "10.96.0.10")
            mp.setenv(f"{env}_SERVICE_PORT", str(o["spec"]["ports"][0]["port"]))
    from tornado.httpclient import AsyncHTTPClient
    from traitlets.config.loader import PyFileConfigLoader

    mp.setattr(AsyncHTTPClient, "configure", classmethod(lambda cls, *a, **k: None))
    try:
        yield PyFileConfigLoader("jupyterhub_config.py", path=str(root)).load_config()
    finally:
        mp.undo()
        sys.modules.pop("z2jh", None)
        if str(root) in sys.path:
            sys.path.remove(str(root))


class _Group:
    def __init__(self, name: str) -> None:
        self.name = name


def _user(name: str, groups: list[str]) -> Any:
    from jupyterhub.objects import Server

    user = Mock()
    user.name = user.escaped_name = name
    user.groups = [_Group(g) for g in groups]
    user.server = Server()
    user.url = user.server.url
    return user


def spawn(config: Any, groups: list[str], options: dict[str, str]) -> tuple[Any, dict[str, Any]]:
    """The pod KubeSpawner makes for a user of these groups choosing these options, past the hub's hooks."""
    spawner, (pod,) = spawns(config, groups, [options])
    return spawner, pod


def spawns(
    config: Any, groups: list[str], choices: list[dict[str, str]], hook: bool = True
) -> tuple[Any, list[dict[str, Any]]]:
    """The pods one server's spawner makes started once per choice, in turn (JupyterHub keeps a server's spawner
    across its starts), each past the hub's hooks: the pre-spawn hook first, as JupyterHub runs it before
    KubeSpawner's start, unless `hook` is off."""
    from jupyterhub.objects import Hub
    from kubernetes_asyncio.client import ApiClient

    async def run() -> tuple[Any, list[dict[str, Any]]]:
        spawner = kubespawner.KubeSpawner(hub=Hub(), config=config, user=_user("ada", groups), _mock=True)
        pods = []
        for options in choices:
            if hook:
                config.KubeSpawner.pre_spawn_hook(spawner)
            spawner.user_options = options
            await spawner.load_user_options()
            pod = await spawner.get_pod_manifest()
            pod = config.KubeSpawner.modify_pod_hook(spawner, pod)
            pods.append(ApiClient().sanitize_for_serialization(pod))
        return spawner, pods

    # Its own loop, left unset: asyncio.run would leave the thread without one, which later tests of the same worker
    # (Pulumi's mocks) ask for.
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(run())
    finally:
        # The hub's shutdown, as asyncio.run's: KubeSpawner's client-closing task is cancelled and awaited, not left
        # to be collected unawaited (a warning in every run before).
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()


def _plan() -> Plan:
    return build_plan(load_site(STACK))


def test_a_tenants_gpu_notebook_runs_in_its_namespace_under_its_quota_and_pod_security(hub_config: Any) -> None:
    plan = _plan()
    vision = next(t for t in plan.tenants if t.name == "vision")
    spawner, pod = spawn(hub_config, list(vision.groups), {"profile": "vision-h100", "gpus": "2"})
    assert spawner.namespace == vision.namespace
    spec, labels = pod["spec"], pod["metadata"]["labels"]
    # Kueue admits it from the tenant's queue, as the tenant's jobs.
    assert labels["kueue.x-k8s.io/queue-name"] == "jobs" and labels["aisite.io/tenant"] == "vision"
    (c,) = spec["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert c["image"] == plan.kubernetes.notebooks.gpu_image
    assert spec["nodeSelector"] == {"aisite.io/gpu-type": "h100"}
    assert {"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets"}} in spec["volumes"]
    # The tenant's `notebooks` NetworkPolicy selects it (the hub and proxy reach it, it reaches the hub's API).
    (policy,) = [o for o in objects(plan)["tenant-vision.yaml"] if o["metadata"]["name"] == "notebooks"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": c["ports"][0]["containerPort"]}]
    # Restricted, as the tenant's namespace enforces, and admitted by the tenants' placement policy.
    assert violations(spec, "restricted") == []
    assert admitted(pod) == []
    pod |= {"apiVersion": "v1", "kind": "Pod"}
    pod["metadata"]["namespace"] = spawner.namespace
    # KubeSpawner writes CPU counts as floats; the API server takes them as quantities (JSON numbers).
    kubernetes_validate.validate(pod, plan.kubernetes.version, strict=True)


def test_a_cpu_notebook_and_a_baseline_tenant(hub_config: Any) -> None:
    spawner, pod = spawn(hub_config, ["llm-team"], {"profile": "llm-cpu"})
    assert spawner.namespace == "tenant-llm"
    (c,) = pod["spec"]["containers"]
    assert "nvidia.com/gpu" not in c["resources"].get("limits", {})
    assert c["image"] == _plan().kubernetes.notebooks.image
    assert violations(pod["spec"], "restricted") == []


@pytest.mark.parametrize("hook", [True, False], ids=["with the reset", "control: without it"])
def test_a_server_started_again_takes_only_its_new_profile(hub_config: Any, hook: bool) -> None:
    """Issue 64: KubeSpawner sets a chosen profile on the spawner JupyterHub keeps for the server, so after an
    8-GPU profile another tenant's CPU profile started a pod asking those GPUs with the GPU image and node selector.
    The hub's pre-spawn hook puts the configured settings back first. The control (no hook) shows the leak, so the
    test can fail."""
    plan = _plan()
    vision = next(t for t in plan.tenants if t.name == "vision")
    groups = [*vision.groups, "llm-team"]
    spawner, (first, pod) = spawns(
        hub_config, groups, [{"profile": "vision-h100", "gpus": "2"}, {"profile": "llm-cpu"}], hook
    )
    assert first["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    (c,) = pod["spec"]["containers"]
    leaked = {
        "gpu": "nvidia.com/gpu" in c["resources"].get("limits", {}),
        "image": c["image"] != plan.kubernetes.notebooks.image,
        "node selector": "aisite.io/gpu-type" in (pod["spec"].get("nodeSelector") or {}),
    }
    assert spawner.namespace == "tenant-llm"
    if hook:
        assert not any(leaked.values()), leaked
    else:
        assert all(leaked.values()), leaked


def test_a_user_sees_only_their_tenants_profiles_and_no_server_starts_outside_them(hub_config: Any) -> None:
    profile_list = hub_config.KubeSpawner.profile_list
    assert [p["slug"] for p in profile_list(Mock(user=_user("ada", ["vision-team"])))] == ["vision-cpu", "vision-h100"]
    assert len(profile_list(Mock(user=_user("ada", ["vision-team", "llm-team"])))) == 4
    assert profile_list(Mock(user=_user("eve", ["other"]))) == []
    # A user of no tenant gets KubeSpawner's defaults, the hub's own namespace: the hook refuses that server.
    with pytest.raises(Exception, match="no tenant of theirs"):
        spawn(hub_config, ["other"], {})
    # The login provider admits only the tenants' groups.
    assert sorted(hub_config.GenericOAuthenticator.allowed_groups) == ["llm-team", "vision-team"]


def test_gpu_choices_follow_the_quota_and_a_node() -> None:
    assert gpu_choices(192, 8) == [1, 2, 4, 8]
    assert gpu_choices(6, 8) == [1, 2, 4, 6]
    assert gpu_choices(3, 8) == [1, 2, 3]
    assert gpu_choices(0, 8) == []
    data = copy.deepcopy(stack_data(STACK))
    data["kubernetes"]["tenants"][1]["gpu_quota"] = 3
    data["workloads"], data["serving"] = [], []  # theirs would not fit 3 GPUs
    plan = build_plan(parse_site(data, STACK))
    (vision,) = [t for t in plan.tenants if t.name == "vision"]
    gpu = tenant_profiles(plan, vision)[1]
    assert list(gpu["profile_options"]["gpus"]["choices"]) == ["1", "2", "3"]


@given(st.integers(0, 2048), st.integers(0, 72))
def test_a_profile_never_offers_more_gpus_than_the_quota_or_a_node_holds(quota: int, per_node: int) -> None:
    choices = gpu_choices(quota, per_node)
    most = min(quota, per_node)
    assert choices == sorted(set(choices)) and all(0 < n <= most for n in choices)
    assert (choices[-1] == most) if most else choices == []


def test_the_hub_may_start_servers_in_tenants_namespaces_only() -> None:
    """Its Role and RoleBinding are in each tenant's namespace (the chart's own only in its namespace), binding the
    ServiceAccount the release renders, and the tenant's NetworkPolicy lets the hub and proxy in."""
    plan = _plan()
    _, _, objs = rendered(STACK, "jupyterhub")
    (sa,) = [o for o in objs if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == "hub"]
    assert not [o for o in objs if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    granted = {}
    for name, objs_ in objects(plan).items():
        for o in objs_:
            if o["kind"] == "RoleBinding" and o["metadata"]["name"] == "jupyterhub-hub":
                (subject,) = o["subjects"]
                assert subject == {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}
                granted[o["metadata"]["namespace"]] = name
            if o["kind"] == "Role" and o["metadata"]["name"] == "jupyterhub-hub":
                assert o["rules"] == HUB_RULES
    assert set(granted) == {t.namespace for t in plan.tenants}
    (chart_role,) = [o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] == "hub"]
    assert chart_role["rules"] == HUB_RULES  # the same rights the chart gives it in its own namespace


def test_aisite_images_lists_the_notebook_images_the_profiles_start() -> None:
    plan = _plan()
    nb = plan.kubernetes.notebooks
    found = site_images(plan).images
    assert found[nb.image] == found[nb.gpu_image] == ["notebooks (kubernetes.notebooks)"]
    # Under DRA the profiles are CPU ones only, and the GPU image is not pulled.
    data = copy.deepcopy(stack_data(STACK))
    data["kubernetes"]["gpu_allocation"] = "dra"
    data["workloads"], data["serving"] = [], []  # TrainJobs cannot claim DRA GPUs (a check says so)
    dra = build_plan(parse_site(data, STACK))
    assert nb.gpu_image not in site_images(dra).images and nb.image in site_images(dra).images


def test_the_addon_needs_a_login_provider_and_tenants(tmp_path: Path) -> None:
    data = copy.deepcopy(stack_data(STACK))
    del data["kubernetes"]["notebooks"]["login"]
    data["kubernetes"]["tenants"] = []
    data["workloads"] = []
    data["serving"] = []
    r = run_cli("validate", str(write_stack(tmp_path, data)))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "site.kubernetes.notebooks.login: the jupyterhub addon needs the site's login provider" in r.stderr
    assert "site.kubernetes.addons: jupyterhub: notebooks run in tenants' namespaces" in r.stderr


def test_a_users_groups_are_asked_again_before_each_server_starts(hub_config: Any) -> None:
    """Issue 64: the hub read a user's groups at login only, so someone removed from a tenant's group kept starting
    servers there until the cookie expired. The hub's configuration (as the chart's jupyterhub_config.py loads our
    values) has the authenticator refresh the user, groups included (manage_groups), before every spawn and at
    most every 5 minutes otherwise, with the tokens that takes kept in auth state."""
    auth = hub_config.Authenticator
    assert (auth.enable_auth_state, auth.refresh_pre_spawn, auth.auth_refresh_age) == (True, True, 300)
    assert hub_config.GenericOAuthenticator.manage_groups is True
