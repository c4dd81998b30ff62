"""The real __main__.py under pulumi.runtime.set_mocks, for every stack: what it registers, in which order, with
which inputs. (The Pulumi engine and the command provider are not on these machines; `pulumi up` is not run.)"""

from __future__ import annotations

import itertools
import json
import runpy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from google.protobuf import json_format
from pulumi.runtime.mocks import MockMonitor

from aisite.changes import layer_state, layer_states, site_layer_inputs
from aisite.components import site as site_module
from aisite.deploy import applied_hosts
from aisite.diff import site_diff
from aisite.fields import secret_env
from aisite.layer_run import LayerRun
from aisite.loader import parse_site
from aisite.plan import build_plan
from aisite.platform import charts, jobs, objects, remote_manifests
from aisite.render.inventory import inventory, inventory_yaml
from tests.conftest import ROOT, STACKS, pulling, stack_data

LAYERS = ["oob", "fabric", "hosts", "cluster", "platform", "workloads"]
ANSIBLE_LAYERS = [layer for layer in LAYERS if layer != "platform"]  # the Platform layer talks to the API itself
JOBS = "aisite:site:Jobs"  # the Workloads layer's jobs on the cluster, beside its Ansible command
SECRET = "pulumi-secret-value"
SECRET_SIG = "4dabf18193072939515e22adb298388d"


@dataclass
class Registered:
    type: str
    name: str
    parent: str
    dependencies: list[str]
    inputs: dict[str, Any] = field(default_factory=dict)
    protect: bool = False


class Mocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.inputs: dict[str, dict[str, Any]] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.inputs[args.name] = dict(args.inputs)
        outputs = dict(args.inputs)
        if args.typ == "command:local:Command":
            outputs["stdout"] = "ok"
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], None]:
        return {}, None


class RecordingMonitor(MockMonitor):
    """Keeps each registration's parent and dependencies, which the mock args leave out."""

    def __init__(self, mocks: Mocks) -> None:
        super().__init__(mocks)
        self.registered: list[Registered] = []
        self.outputs: dict[str, dict[str, Any]] = {}  # a component's registered outputs, as the engine gets them

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - the gRPC method name
        self.registered.append(
            Registered(request.type, request.name, request.parent, list(request.dependencies), protect=request.protect)
        )
        return super().RegisterResource(request)

    def RegisterResourceOutputs(self, request: Any) -> Any:  # noqa: N802 - the gRPC method name
        self.outputs[request.urn.rsplit("::", 1)[1]] = json_format.MessageToDict(request.outputs)
        return super().RegisterResourceOutputs(request)


def run_program(
    stack: str,
    data: dict[str, Any],
    env: dict[str, str] | None = None,
    password: str = SECRET,
    *,
    applied: dict[str, dict[str, str]] | None = None,
    kubeconfig: str | None = None,
    preview: bool = False,
) -> tuple[Mocks, RecordingMonitor]:
    """The program under mocks; `applied` is what the site repository records as applied (none by default: the
    machine's own record, a lab's, is not read), `kubeconfig` the stack's secret config aisite:kubeconfig."""
    mocks = Mocks()
    monitor = RecordingMonitor(mocks)
    # A fresh root Stack per program: set_mocks keeps an existing one, which would name the previous stack.
    pulumi.runtime.settings.ROOT.set(None)
    pulumi.runtime.set_mocks(mocks, project="aisite", stack=stack, preview=preview, monitor=monitor)
    config = {"aisite:site": json.dumps(data), "aisite:bmcPassword": password}
    secret_keys = ["aisite:bmcPassword"]
    if kubeconfig is not None:
        config["aisite:kubeconfig"] = kubeconfig
        secret_keys.append("aisite:kubeconfig")
    pulumi.runtime.set_all_config(config, secret_keys=secret_keys)
    site_module.applied_hosts = lambda site: applied or {}  # type: ignore[assignment]

    @pulumi.runtime.test
    def program() -> None:
        runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__")

    try:
        program()
    finally:
        site_module.applied_hosts = applied_hosts
    return mocks, monitor


@pytest.fixture(params=STACKS)
def stack(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    # The lab's secret comes from the environment only; the others prefer Pulumi secret config.
    monkeypatch.setenv("AISITE_LAB_BMC_PASSWORD", "lab-env-secret")
    return str(request.param)


def test_program_registers_the_site_and_its_layers_in_order(stack: str) -> None:
    data = stack_data(stack)
    _, monitor = run_program(stack, data)
    plan = build_plan(parse_site(data))
    # A site that installs its nodes (the lab's VM) provisions them after the BMCs' layer, before the fabric.
    installs = plan.provisioning is not None
    by_type: dict[str, list[Registered]] = {}
    for r in monitor.registered:
        by_type.setdefault(r.type, []).append(r)
    assert [r.name for r in by_type["aisite:site:Site"]] == [stack]
    expected_types = [
        "OutOfBand",
        *(["Provisioning"] * installs),
        "Fabric",
        "Hosts",
        "Cluster",
        "Platform",
        "Workloads",
    ]
    components = [
        r for r in monitor.registered if r.type.startswith("aisite:site:") and r.type not in ("aisite:site:Site", JOBS)
    ]
    assert [r.type.rsplit(":", 1)[1] for r in components] == expected_types
    steps = ["oob", *(["provisioning"] * installs), *LAYERS[1:]]
    assert [r.name for r in components] == [f"{stack}-{layer}" for layer in steps]
    site_urn = next(r for r in monitor.registered if r.type == "aisite:site:Site")
    # Each layer is a child of the site and waits for the one before it: Pulumi expands a dependency on a
    # component to its children (the previous layer's Ansible command; the Platform's provider and releases).
    command_of = {"aisite:site:Platform": f"{stack}-k8s", "aisite:site:Provisioning": f"{stack}-provisioning-install"}
    for prev, layer in itertools.pairwise(components):
        assert layer.parent.endswith(f"::{stack}"), layer.parent
        child = command_of.get(prev.type, f"{prev.name}-ansible")
        assert any(d.endswith(f"::{child}") for d in layer.dependencies), (layer.name, layer.dependencies)
    assert site_urn.parent.endswith(f"pulumi:pulumi:Stack::aisite-{stack}")
    commands = by_type["command:local:Command"]
    assert [c.name for c in commands] == [
        command_of.get(f"aisite:site:{t}", f"{stack}-{s}-ansible")
        for t, s in zip(expected_types, steps, strict=True)
        if t != "Platform"
    ]
    for c, comp in zip(commands, [c for c in components if c.type != "aisite:site:Platform"], strict=True):
        assert c.parent.endswith(f"::{comp.name}")
    bmcs = by_type["pulumi-python:dynamic:Resource"]
    # Sorted: the BMCs depend on none of each other, and the SDK registers each once its inputs and pickled provider
    # resolve, so the engine hears of them in no fixed order (CI once saw vgpu01 before hci03).
    assert sorted(b.name for b in bmcs) == sorted(f"{stack}-{n.name}-bmc" for n in plan.nodes)
    for b in bmcs:
        # Under the OutOfBand layer, after its play, protected (a deleted node must not be powered off by mistake).
        assert b.parent.endswith(f"::{stack}-oob") and b.protect
        assert any(d.endswith(f"::{stack}-oob-ansible") for d in b.dependencies), b.dependencies
    # provider, a release per chart, a manifest per remote operator, a group per file; the jobs and their files
    platform = 1 + len(charts(plan)) + len(remote_manifests(plan)) + len(objects(plan))
    workloads = 1 + len(jobs(plan))
    # stack, site, layers (and provisioning), their commands, BMCs, the platform's resources, the jobs
    assert len(monitor.registered) == 1 + 1 + 6 + 5 + 2 * installs + len(plan.nodes) + platform + workloads


def test_bmc_states_carry_the_plan_and_a_secret_password(stack: str) -> None:
    data = stack_data(stack)
    mocks, _ = run_program(stack, data)
    plan = build_plan(parse_site(data))
    for n in plan.nodes:
        inputs = mocks.inputs[f"{stack}-{n.name}-bmc"]
        assert {k: inputs[k] for k in ("node", "protocol", "address", "port", "power", "tls_verify")} == {
            "node": n.name,
            "protocol": n.bmc.protocol,
            "address": n.bmc.address,
            "port": n.bmc.port,
            "power": n.bmc.power,
            "tls_verify": n.bmc.tls_verify,
        }
        assert inputs["password"].get(SECRET_SIG) == "1b47061264138c4ac30d75fd1eb44270", inputs["password"]
        assert inputs["username"] == plan.secrets[n.bmc.credentials]["username"]


def test_commands_carry_inventory_triggers_and_secrets(stack: str) -> None:
    data = stack_data(stack)
    mocks, _ = run_program(stack, data)
    plan = build_plan(parse_site(data))
    text = inventory_yaml(plan)
    states = layer_states(ANSIBLE_LAYERS, *site_layer_inputs(plan))
    for layer in ANSIBLE_LAYERS:
        inputs = mocks.inputs[f"{stack}-{layer}-ansible"]
        # What `aisite play` gets: the inventory, the layer's states as `aisite deploy` computes them (the
        # workloads' jobs in theirs), and, with nothing applied yet, every host pending.
        run = LayerRun.model_validate_json(inputs["stdin"])
        assert (run.site, run.layer, run.inventory) == (plan.site, layer, text)
        assert run.states == states[layer].hosts and run.pending == list(states[layer].hosts)
        assert inputs["triggers"] == [states[layer].trigger]
        assert inputs["create"].endswith(" -m aisite play") and inputs["create"] == inputs["update"]
        # The whole map is a Pulumi secret (encrypted in state, masked in logs): the engine's secret signature.
        env = inputs["environment"]
        assert env.get(SECRET_SIG) == "1b47061264138c4ac30d75fd1eb44270", env
        env = env["value"]
        names = {n.bmc.credentials for n in plan.nodes}
        assert set(env) == {secret_env(n) for n in names}
        # The lab stacks read their BMC password from the environment the fixture sets; the others from config.
        lab_env = any(s.password_from.env == "AISITE_LAB_BMC_PASSWORD" for s in parse_site(data).secrets.values())
        assert set(env.values()) == {"lab-env-secret" if lab_env else SECRET}
        assert SECRET not in text and "lab-env-secret" not in text


def test_trigger_changes_with_the_site() -> None:
    data = stack_data("dc1")
    before = build_plan(parse_site(data))
    data["fabric"]["roce"] = {"ecn_min_kb": 200}
    after = build_plan(parse_site(data))
    assert layer_state("fabric", inventory(before)).trigger != layer_state("fabric", inventory(after)).trigger
    assert layer_state("fabric", inventory(before)).trigger == layer_state("fabric", inventory(before)).trigger


def test_invalid_site_fails_the_program_with_every_problem() -> None:
    data = stack_data("dc1")
    data["control_plane"]["count"] = 2
    data["gpu_nodes"][1]["driver_branch"] = 590
    with pytest.raises(Exception, match=r"site\.control_plane\.count") as exc:
        run_program("dc1", data)
    assert "site.gpu_nodes[1].driver_branch" in str(exc.value)


def test_missing_secret_fails_the_program(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AISITE_LAB_BMC_PASSWORD", raising=False)
    with pytest.raises(Exception, match=r"site\.secrets\.lab-bmc\.password_from.*AISITE_LAB_BMC_PASSWORD"):
        run_program("lab", stack_data("lab"))


def test_a_preview_needs_no_secret_and_up_names_the_one_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """`pulumi preview` changes nothing: without the BMC password it registers every resource, the password an
    unknown secret; `pulumi up` without it fails naming where it looked."""
    monkeypatch.delenv("AISITE_LAB_BMC_PASSWORD", raising=False)
    mocks, monitor = run_program("lab", stack_data("lab"), preview=True)
    assert any(r.type == "aisite:site:Site" for r in monitor.registered)
    bmcs = [name for name in mocks.inputs if name.endswith("-bmc")]
    # Each BMC's password: a secret whose value is not known (Pulumi's sentinel), never a made-up one.
    assert bmcs and all(isinstance(mocks.inputs[b]["password"]["value"], pulumi.output.Unknown) for b in bmcs)
    ansible = mocks.inputs["lab-oob-ansible"]["environment"]["value"]
    assert isinstance(ansible["AISITE_SECRET_LAB_BMC"], pulumi.output.Unknown)
    with pytest.raises(Exception, match=r"site\.secrets\.lab-bmc\.password_from.*AISITE_LAB_BMC_PASSWORD"):
        run_program("lab", stack_data("lab"), preview=False)


def test_a_pulumi_secret_the_ipmi_bmcs_would_refuse_fails_the_program() -> None:
    """dc1's BMC password is Pulumi secret config, known only inside apply: checked there, every problem named."""
    want = r"site\.secrets\.bmc-admin: the password is 24 bytes; IPMI 2\.0 BMCs accept at most 20 \(used by hci01-bmc"
    with pytest.raises(Exception, match=want) as exc:
        run_program("dc1", stack_data("dc1"), password="P" * 24)
    assert "P" * 24 not in str(exc.value)


def test_cluster_exports_the_kubeconfig_as_a_secret(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nusers: [{name: admin, user: {token: not-a-real-one}}]\n")
    monkeypatch.setattr("aisite.components.layers.kubeconfig_path", lambda site: kubeconfig)
    monkeypatch.setenv("AISITE_LAB_BMC_PASSWORD", "lab-env-secret")
    _, monitor = run_program("lab", stack_data("lab"))
    out = monitor.outputs["lab-cluster"]
    assert out["api_endpoint"] == "https://10.250.1.5:6443"
    # The engine's secret signature: encrypted in the state, masked in every log.
    assert out["kubeconfig"] == {SECRET_SIG: "1b47061264138c4ac30d75fd1eb44270", "value": kubeconfig.read_text()}


def test_no_kubeconfig_is_no_secret_to_export(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("aisite.components.layers.kubeconfig_path", lambda site: tmp_path / "absent")
    monkeypatch.setenv("AISITE_LAB_BMC_PASSWORD", "lab-env-secret")
    _, monitor = run_program("lab", stack_data("lab"))
    kubeconfig = monitor.outputs["lab-cluster"]["kubeconfig"]
    assert kubeconfig.get("value") is None and kubeconfig[SECRET_SIG] == "1b47061264138c4ac30d75fd1eb44270"


def test_platform_talks_to_the_cluster_through_the_secret_kubeconfig(
    stack: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    monkeypatch.setattr("aisite.components.layers.kubeconfig_path", lambda site: kubeconfig)
    mocks, monitor = run_program(stack, stack_data(stack))
    provider = mocks.inputs[f"{stack}-k8s"]
    assert provider["kubeconfig"] == {SECRET_SIG: "1b47061264138c4ac30d75fd1eb44270", "value": kubeconfig.read_text()}
    # Everything on the cluster goes through that provider, under the Platform component.
    plan = build_plan(parse_site(stack_data(stack)))
    on_cluster = [
        r for r in monitor.registered if r.type.startswith("kubernetes:") and r.type != "pulumi:providers:kubernetes"
    ]
    assert on_cluster and all(r.parent.endswith((f"::{stack}-platform", f"::{stack}-jobs")) for r in on_cluster)
    # Registration order follows when dependencies resolve, so the names as a set; stable, derived from the site.
    names = sorted(r.name for r in on_cluster)
    assert names == sorted(
        [f"{stack}-{c.release}" for c in charts(plan)]
        + [f"{stack}-{m.name}" for m in remote_manifests(plan)]
        + [f"{stack}-objects-{f.removesuffix('.yaml')}" for f in objects(plan)]
        + [f"{stack}-{f.removesuffix('.yaml').replace('/', '-')}" for f in jobs(plan)]
    )


def test_releases_come_pinned_before_the_objects_that_need_their_crds(stack: str) -> None:
    mocks, monitor = run_program(stack, stack_data(stack))
    plan = build_plan(parse_site(stack_data(stack)))
    by_name = {r.name: r for r in monitor.registered}
    for c in charts(plan):
        inputs = mocks.inputs[f"{stack}-{c.release}"]
        assert inputs["chart"] in (c.chart, f"{c.repository}/{c.chart}") and inputs["version"] == c.version
        assert inputs["namespace"] == c.namespace and inputs["atomic"] is True
        # Its namespace is the project's, labelled for Pod Security and created before it (kube-system exists).
        assert inputs["createNamespace"] is False
        if c.namespace != "kube-system":
            namespaces = f"{stack}-objects-namespaces"
            assert any(d.endswith(f"::{namespaces}") for d in by_name[f"{stack}-{c.release}"].dependencies)
            made = {o["metadata"]["name"]: o["metadata"]["labels"] for o in mocks.inputs[namespaces]["objs"]}
            assert made[c.namespace]["pod-security.kubernetes.io/enforce"] == c.pod_security
    kueue = f"{stack}-kueue"
    assert by_name[kueue].type == "kubernetes:helm.sh/v3:Release"
    cq_file = by_name[f"{stack}-objects-kueue"]
    assert any(d.endswith(f"::{kueue}") for d in cq_file.dependencies), cq_file.dependencies
    objs = mocks.inputs[cq_file.name]["objs"]
    assert [o["metadata"]["name"] for o in objs if o["kind"] == "ClusterQueue"] == [t.name for t in plan.tenants]
    assert {
        o["metadata"]["name"]: o["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]
        for o in objs
        if o["kind"] == "ClusterQueue"
    } == {t.name: t.flavors[0][1] for t in plan.tenants}
    # Each tenant's file waits for Kueue too: it holds the tenant's LocalQueue.
    for t in plan.tenants:
        tenant = by_name[f"{stack}-objects-tenant-{t.name}"]
        assert any(d.endswith(f"::{kueue}") for d in tenant.dependencies)


def test_rail_networks_wait_for_the_network_operator(stack: str) -> None:
    mocks, monitor = run_program(stack, stack_data(stack))
    plan = build_plan(parse_site(stack_data(stack)))
    by_name = {r.name: r for r in monitor.registered}
    rails = by_name[f"{stack}-objects-rails"]
    assert any(d.endswith(f"::{stack}-network-operator") for d in rails.dependencies), rails.dependencies
    objs = mocks.inputs[rails.name]["objs"]
    units = {n.scalable_unit for n in plan.nodes if n.rails}
    n_rails = max(len(n.rails) for n in plan.nodes)
    assert len([o for o in objs if o["kind"] == "IPPool"]) == n_rails * len(units)
    assert len([o for o in objs if o["kind"] == "NetworkAttachmentDefinition"]) == n_rails * len(plan.tenants)


def test_jobs_wait_for_their_operator_and_the_tenants_objects(stack: str) -> None:
    """Each workload's file is applied after the Workloads layer, through the Platform's provider, after the operator
    that defines its kind (MPI Operator manifest, trainer chart) and the tenants' files (queue, networks)."""
    mocks, monitor = run_program(stack, stack_data(stack))
    plan = build_plan(parse_site(stack_data(stack)))
    by_name = {r.name: r for r in monitor.registered}
    assert by_name[f"{stack}-jobs"].type == "aisite:site:Jobs"
    assert any(d.endswith(f"::{stack}-workloads-ansible") for d in by_name[f"{stack}-jobs"].dependencies)
    for w in plan.workloads:
        group = by_name[f"{stack}-workloads-{w.name}"]
        deps = group.dependencies
        kinds = {o["kind"] for o in mocks.inputs[group.name]["objs"]}
        # Claims before the job (a DRA site's GPUs, a rack job's ComputeDomain: after the DRA driver's release).
        if "ComputeDomain" in kinds:
            assert any(d.endswith(f"::{stack}-nvidia-dra-driver-gpu") for d in deps), deps
        kinds -= {"ResourceClaimTemplate", "ComputeDomain"}
        if w.operator == "mpi-operator":
            assert kinds == {"MPIJob"} and any(d.endswith(f"::{stack}-mpi-operator") for d in deps), deps
        elif w.operator == "training-operator":
            assert kinds == {"TrainJob"} and any(d.endswith(f"::{stack}-kubeflow-trainer") for d in deps), deps
        else:
            assert "Job" in kinds
        for t in plan.tenants:
            assert any(d.endswith(f"::{stack}-objects-tenant-{t.name}") for d in deps), deps


def _key(name: str) -> str:
    return name.lower().replace("_", "-")


def _locked(name: str) -> dict[str, str]:
    """A lock file's pins: package (normalised) -> version."""
    lines = [ln for ln in (ROOT / name).read_text().splitlines() if ln and not ln.startswith("#")]
    return {_key(n): v for n, v in (ln.split("==") for ln in lines)}


def test_pulumis_pip_toolchain_installs_the_program_at_the_locked_versions() -> None:
    """`pulumi install` (and the Pulumi Kubernetes Operator's workspace for the gitops Stack) installs
    requirements.txt: the project itself under the lock as a constraint. So every runtime dependency the project
    pins must be in the lock at that version, or that install resolves something else (or fails)."""
    import tomllib

    import yaml

    runtime = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["runtime"]
    assert runtime["options"]["toolchain"] == "pip"
    lines = [ln for ln in (ROOT / "requirements.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines == ["-c requirements.lock", "."]

    lock = _locked("requirements.lock")
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    unlocked = [p for p in pins if lock.get(_key(p.split("==")[0])) != p.split("==")[1]]
    assert unlocked == [], f"pinned in pyproject.toml but not at that version in requirements.lock: {unlocked}"


def _pulumi_runs(mocks: Mocks) -> dict[str, list[str]]:
    """layer -> the hosts `aisite play` runs it on, from each Command's input (layers with none pending left out)."""
    runs = {}
    for layer in ANSIBLE_LAYERS:
        run = LayerRun.model_validate_json(mocks.inputs[f"lab-{layer}-ansible"]["stdin"])
        if run.pending:
            runs[layer] = list(run.pending)
    return runs


def test_pulumi_runs_a_one_node_label_change_where_aisite_diff_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the site applied (the record `aisite deploy` keeps, which `pulumi up` now reads and writes too), a label
    on one node: the Pulumi layers run on the hosts `aisite diff` names, and nowhere else."""
    monkeypatch.setenv("AISITE_LAB_BMC_PASSWORD", "lab-env-secret")
    data = stack_data("lab")
    old = build_plan(parse_site(data))
    applied = {name: dict(s.hosts) for name, s in layer_states(ANSIBLE_LAYERS, *site_layer_inputs(old)).items()}
    mocks, _ = run_program("lab", data, applied=applied)
    assert _pulumi_runs(mocks) == {}, "with everything applied, nothing runs"
    data["gpu_nodes"][0]["nodes"][0] = {"labels": {"example.com/pool": "a"}}
    new = build_plan(parse_site(data))
    mocks, _ = run_program("lab", data, applied=applied)
    want = site_diff(old, new, ANSIBLE_LAYERS).layers
    assert want and all(hosts == ["gpu01"] for hosts in want.values()), want  # one node's change
    assert _pulumi_runs(mocks) == want
    # Each such run is limited to that host, as `aisite deploy --changed` limits it.
    for layer in want:
        assert LayerRun.model_validate_json(mocks.inputs[f"lab-{layer}-ansible"]["stdin"]).limit() == "gpu01"


def test_a_layer_the_nodes_pull_has_no_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AISITE_LAB_BMC_PASSWORD", "lab-env-secret")
    text = pulling((ROOT / "stacks" / "Pulumi.lab.yaml").read_text(), "[hosts]")
    data = yaml.safe_load(text)["config"]["aisite:site"]
    mocks, monitor = run_program("lab", data)
    assert "lab-hosts-ansible" not in mocks.inputs and "lab-fabric-ansible" in mocks.inputs
    assert monitor.outputs["lab-hosts"]["pulled_by_nodes"] is True


def test_the_kubeconfig_comes_from_the_stacks_secret_config_when_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On a machine without the site's .aisite/ (`pulumi up` in CI), the stack's secret config aisite:kubeconfig."""
    monkeypatch.setattr("aisite.components.layers.kubeconfig_path", lambda site: tmp_path / "absent")
    monkeypatch.setenv("AISITE_LAB_BMC_PASSWORD", "lab-env-secret")
    given = "apiVersion: v1\nkind: Config\nclusters: []\n"
    mocks, monitor = run_program("lab", stack_data("lab"), kubeconfig=given)
    assert monitor.outputs["lab-cluster"]["kubeconfig"] == {
        SECRET_SIG: "1b47061264138c4ac30d75fd1eb44270",
        "value": given,
    }
    assert mocks.inputs["lab-k8s"]["kubeconfig"] == {SECRET_SIG: "1b47061264138c4ac30d75fd1eb44270", "value": given}


def test_provisioning_runs_aisite_provision_on_the_stack_after_the_bmcs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AISITE_LAB_BMC_PASSWORD", "lab-env-secret")
    data = stack_data("lab")
    mocks, _ = run_program("lab", data)
    inputs = mocks.inputs["lab-provisioning-install"]
    assert inputs["create"].endswith(" -m aisite provision lab") and inputs["create"] == inputs["update"]
    assert inputs["environment"][SECRET_SIG] == "1b47061264138c4ac30d75fd1eb44270"
    before = inputs["triggers"]
    data["provisioning"]["retries"] = 2
    mocks, _ = run_program("lab", data)
    assert mocks.inputs["lab-provisioning-install"]["triggers"] != before


def test_the_hub_lock_adds_packages_and_changes_none_of_the_main_lock() -> None:
    """requirements-hub.lock (the notebooks' tests' hub code) installs beside requirements.lock, held to it
    (`-c`): a package in both would let it move a version of the tree molecule runs from, unseen by the molecule
    digests (they read requirements.lock). Every pin of pyproject's dev extra is in one of the two locks."""
    import tomllib

    main, hub = _locked("requirements.lock"), _locked("requirements-hub.lock")
    assert {"jupyterhub", "jupyterhub-kubespawner"} <= set(hub)
    assert sorted(set(main) & set(hub)) == []
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    both = main | hub
    unlocked = [p for p in dev if both.get(_key(p.split("==")[0].split("[")[0])) != p.split("==")[1]]
    assert unlocked == [], unlocked
