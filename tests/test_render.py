"""The rendered inventory parses with Ansible itself and carries the plan; the manifests pass the Kubernetes
schemas."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import typing
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from hostlist import expand_hostlist  # type: ignore[import-untyped]

from aisite.errors import SiteError
from aisite.loader import load_site
from aisite.model import Gitops
from aisite.paths import provision_dir
from aisite.plan import FABRIC_ROLES, build_plan
from aisite.platform import jobs, objects
from aisite.playbooks import PLAYBOOKS, ROLES, playbook_roles
from aisite.render.bundle import bundle
from aisite.render.inventory import NODE_GROUPS, inventory, inventory_yaml, load_inventory
from aisite.render.manifests import gitops_files, layer_files, manifest_files
from tests.conftest import ROOT, STACKS, pulling
from tests.test_platform import CUSTOM_GROUPS


@pytest.fixture(scope="module", params=STACKS)
def plan(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    return build_plan(load_site(request.param))


def test_inventory_groups_and_hosts(plan) -> None:  # type: ignore[no-untyped-def]
    inv = inventory(plan)
    groups = inv["all"]["children"]
    reconciler = {"reconciler"} if plan.gitops else set()
    switches = {"leaf", "spine", "super_spine", "access_switches"}
    boot = {"boot_server"} if plan.provisioning else set()
    ceph = ({"ceph"} | ({"ceph_clients"} if plan.ceph.gpu_client else set())) if plan.ceph else set()
    assert set(groups) == {"control_plane", "gpu_nodes", "storage_nodes", "oob"} | switches | reconciler | boot | ceph
    if plan.gitops:  # the reconciler's host, with the site's repository settings as its group's variables
        assert list(groups["reconciler"]["hosts"]) == [plan.gitops.reconciler_host]
        assert groups["reconciler"]["vars"]["aisite_gitops"]["repository"] == plan.gitops.repository
    assert "pull" not in groups or (plan.gitops and plan.gitops.pull_layers)
    assert len(groups["control_plane"]["hosts"]) == len(plan.by_role("control-plane"))
    assert len(groups["gpu_nodes"]["hosts"]) == len(plan.by_role("gpu"))
    assert len(groups["oob"]["hosts"]) == len(plan.nodes)
    assert len(groups["leaf"]["hosts"]) == len(plan.switches_by_role("leaf"))
    assert len(groups["super_spine"]["hosts"]) == len(plan.switches_by_role("super-spine"))
    # The management and out-of-band switches aisite configures (not `generic` ones), with their VLANs and ports.
    access = [s for s in plan.switches if s.role in ("management", "oob") and s.vlans]
    assert list(groups["access_switches"]["hosts"]) == [s.name for s in access]
    for sw in access:
        assert groups["access_switches"]["hosts"][sw.name]["aisite_switch"]["vlans"] == list(sw.vlans)
    for node in plan.nodes:
        hv = groups[{"control-plane": "control_plane", "gpu": "gpu_nodes", "storage": "storage_nodes"}[node.role]]
        host = hv["hosts"][node.name]
        assert host["aisite_node"]["management"]["address"] == node.management.address
        assert [r["leaf_port"] for r in host["aisite_node"]["rails"]] == [r.leaf_port for r in node.rails]


def test_a_site_that_pulls_layers_puts_every_node_in_the_pull_group(tmp_path: Path) -> None:
    """gitops.pull_layers: every node in group `pull` with the repository settings (playbooks/pull.yml's hosts);
    the nodes fetch from pull_repository, or the repository itself when none is named."""
    pulled = pulling((ROOT / "stacks" / "Pulumi.lab.yaml").read_text(), "[hosts, cluster]")
    stack = tmp_path / "Pulumi.lab.yaml"
    stack.write_text(pulled)
    plan = build_plan(load_site(stack))
    assert plan.gitops and plan.gitops.pull_layers == ("hosts", "cluster")
    assert plan.gitops.pull_repository == plan.gitops.repository and plan.gitops.pull_interval_seconds == 900
    group = inventory(plan)["all"]["children"]["pull"]
    assert set(group["hosts"]) == {n.name for n in plan.nodes}
    assert group["vars"]["aisite_gitops"]["pull_layers"] == ["hosts", "cluster"]
    stack.write_text(
        pulled.replace(
            "pull_layers: [hosts, cluster]", "pull_layers: [hosts]\n      pull_repository: file:///srv/site.git"
        )
    )
    plan = build_plan(load_site(stack))
    assert plan.gitops and plan.gitops.pull_repository == "file:///srv/site.git"
    assert not any(name.startswith("inventory/") for name in manifest_files(build_plan(load_site("lab"))))
    for bad in ("pull_layers: [oob]", "pull_layers: [hosts]\n      pull_repository: /srv/x;id"):
        stack.write_text(pulled.replace("pull_layers: [hosts, cluster]", bad))
        with pytest.raises(SiteError, match="pull_"):
            load_site(stack)


def test_the_nodes_inventory_gives_each_node_what_the_pushed_inventory_gives_it(tmp_path: Path) -> None:
    """manifests/<site>/inventory/ (a site that pulls layers), read by Ansible itself as a node's pass reads it:
    each node gets every variable the controller's inventory gives it and is in the same groups, but for the
    connection settings (a node runs its pass over the local connection); no secret value in any file."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    stack = tmp_path / "Pulumi.lab.yaml"
    stack.write_text(pulling((ROOT / "stacks" / "Pulumi.lab.yaml").read_text(), "[hosts]"))
    plan = build_plan(load_site(stack))
    files = {k: v for k, v in manifest_files(plan).items() if k.startswith("inventory/")}
    assert set(files) == {"inventory/hosts.yml", "inventory/group_vars/all.yml"} | {
        f"inventory/host_vars/{n.name}.yml" for n in plan.nodes
    }
    assert "inventory/hosts.yml" not in layer_files(manifest_files(plan))["platform"]  # no platform run for it
    for name, body in files.items():
        (tmp_path / "m" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "m" / name).write_text(body)
        assert "password" not in body.lower()
    pushed = inventory(plan)
    loader = DataLoader()
    inv = InventoryManager(loader=loader, sources=[str(tmp_path / "m" / "inventory")])
    variables = VariableManager(loader=loader, inventory=inv)
    # How the controller reaches a node, and what it copies to one (the lab's wheels): not a node's own business.
    connection = {
        "ansible_host",
        "ansible_connection",
        "ansible_ssh_private_key_file",
        "ansible_ssh_common_args",
        "pull_wheels_src",
    }
    for node in plan.nodes:
        group = NODE_GROUPS[node.role]
        expected = pushed["all"]["vars"] | pushed["all"]["children"][group]["hosts"][node.name]
        host = inv.get_host(node.name)
        assert host is not None and group in [g.name for g in host.get_groups()]
        got = variables.get_vars(host=host, include_hostvars=False)
        for key, value in expected.items():
            if key in connection or key == "aisite_kubeconfig":
                assert key not in got or key == "aisite_kubeconfig", key
                continue
            assert json.loads(json.dumps(got[key], default=list)) == json.loads(json.dumps(value, default=list)), key


def test_inventory_has_no_secret_values(plan) -> None:  # type: ignore[no-untyped-def]
    text = inventory_yaml(plan)
    for name in plan.secrets:
        assert f'"{name}"' in text  # referenced by name ...
    assert "password" not in text.lower()  # ... never by value


def test_lab_inventory_reaches_containers_over_ssh_as_a_site() -> None:
    """SSH to the management address (leaf: its out-of-band address), the lab's key, its host keys checked."""
    plan = build_plan(load_site("lab"))
    inv = inventory(plan)["all"]
    common = inv["vars"]
    ssh = ROOT / ".aisite" / "lab" / "ssh"
    assert common["ansible_connection"] == "ansible.builtin.ssh"
    assert common["ansible_ssh_private_key_file"] == str(ssh / "id_ed25519")
    # The lab's containers' host keys, and those the installs of its VM nodes recorded.
    known = f'UserKnownHostsFile="{ssh / "known_hosts"} {provision_dir(plan.site) / "known_hosts"}"'
    assert known in common["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking=yes" in common["ansible_ssh_common_args"]
    gpu01 = inv["children"]["gpu_nodes"]["hosts"]["gpu01"]
    assert gpu01["ansible_host"] == plan.by_role("gpu")[0].management.address and "ansible_connection" not in gpu01
    leaf01 = inv["children"]["leaf"]["hosts"]["leaf01"]
    assert leaf01["ansible_host"] == plan.switches_by_role("leaf")[0].management_address
    assert "ansible_become" not in leaf01  # root in the lab; a real FRR switch gets its OS's connection settings
    # BMCs are driven from the controller whatever the nodes' connection.
    assert inv["children"]["oob"]["hosts"]["gpu01-bmc"]["ansible_connection"] == "local"
    # A real site's stack gets no lab key.
    assert "ansible_ssh_private_key_file" not in inventory(build_plan(load_site("dc1")))["all"]["vars"]


def test_ansible_inventory_parses_the_rendering(plan, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "inventory.yml"
    path.write_text(inventory_yaml(plan))
    result = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(path), "--list"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    data = json.loads(result.stdout)
    hostvars = data["_meta"]["hostvars"]
    boot = 1 if plan.provisioning else 0  # the boot server
    configured = [s for s in plan.switches if s.role in FABRIC_ROLES or s.vlans]
    assert len(hostvars) == 2 * len(plan.nodes) + len(configured) + boot
    first_gpu = plan.by_role("gpu")[0]
    assert hostvars[first_gpu.name]["roce_qos"]["traffic_class"] == 106
    assert data.get("spine", {}).get("hosts", []) == [s.name for s in plan.switches_by_role("spine")]
    assert data["leaf"]["hosts"] == [s.name for s in plan.switches_by_role("leaf")]


def test_manifests_pass_the_kubernetes_schemas(plan) -> None:  # type: ignore[no-untyped-def]
    version = plan.kubernetes.version
    objs = [o for group in (objects(plan) | jobs(plan)).values() for o in group]
    assert objs, "every shipped stack declares tenants"
    for obj in objs:
        if obj["apiVersion"].split("/")[0] in CUSTOM_GROUPS:
            continue  # custom resources: tests/test_platform.py holds them against their CRDs
        kubernetes_validate.validate(obj, version, strict=True)
    quotas = {
        o["metadata"]["namespace"]: o["spec"]["hard"]["requests.nvidia.com/gpu"]
        for o in objs
        if o["kind"] == "ResourceQuota" and o["metadata"]["name"] == "gpu-quota"
    }
    assert quotas == {t.namespace: str(t.gpu_quota) for t in plan.tenants}


def test_schema_check_catches_a_broken_object(plan) -> None:  # type: ignore[no-untyped-def]
    obj = next(o for group in objects(plan).values() for o in group if o["kind"] == "ResourceQuota")
    obj["spec"]["hardd"] = obj["spec"].pop("hard")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, plan.kubernetes.version, strict=True)


def test_committed_manifests_are_current(plan) -> None:  # type: ignore[no-untyped-def]
    """manifests/<site>/ is what GitOps applies; it must be exactly what the stack renders to (`make manifests`)."""
    site_dir = ROOT / "manifests" / plan.site
    expected = manifest_files(plan)
    on_disk = {str(p.relative_to(site_dir)): p.read_text() for p in site_dir.rglob("*.yaml")}
    assert on_disk == expected, f"manifests/{plan.site} is stale: run `make manifests`"
    gitops_dir = ROOT / "manifests" / "gitops" / plan.site
    on_disk = {str(p.relative_to(gitops_dir)): p.read_text() for p in gitops_dir.rglob("*.yaml")}
    assert on_disk == gitops_files(plan), f"manifests/gitops/{plan.site} is stale: run `make manifests`"


def test_bundle_is_deterministic(plan) -> None:  # type: ignore[no-untyped-def]
    files = bundle(plan)
    assert files == bundle(build_plan(load_site(plan.site)))
    # YAML turns the plan's tuples into lists; compare through JSON, which does the same.
    assert load_inventory(files["inventory.yml"]) == json.loads(json.dumps(inventory(plan)))
    assert json.loads(files["plan.json"])["site"] == plan.site


def test_render_replaces_its_output_whole_or_not_at_all(tmp_path: Path) -> None:
    from aisite.render.bundle import MARKER, OutputError, render_into

    out = tmp_path / "out"
    render_into(out, {"a.txt": "1\n", "sub/b.txt": "2\n"})
    assert (out / MARKER).is_file() and (out / "sub" / "b.txt").read_text() == "2\n"
    render_into(out, {"a.txt": "3\n"})  # b.txt is not rendered any more: it does not survive
    assert sorted(p.name for p in out.rglob("*")) == [MARKER, "a.txt"]

    def fail(stage: Path) -> None:
        (stage / "half.txt").write_text("half")
        raise RuntimeError("the switch play failed")

    with pytest.raises(RuntimeError):
        render_into(out, {"a.txt": "4\n"}, fail)
    assert (out / "a.txt").read_text() == "3\n" and not (out / "half.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no stage left beside it

    def escape(stage: Path) -> None:
        (stage / "link").symlink_to(tmp_path)

    with pytest.raises(OutputError, match="link"):
        render_into(out, {}, escape)
    assert (out / "a.txt").read_text() == "3\n"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(OutputError, match="was not written by aisite render"):
        render_into(mine, {"a.txt": "x"})
    assert (mine / "notes.txt").read_text() == "keep"


def test_a_node_pulling_its_layers_has_every_collection_their_roles_use() -> None:
    """A node's pass has ansible-core, the checkout (with aisite.site) and the collections role pull copies from
    the controller (pull_collections): every module, lookup or filter of another collection that a pullable
    layer's roles (and the roles they include) name must be among those."""
    pull_vars = yaml.safe_load((ROLES / "pull" / "vars" / "main.yml").read_text())
    have = {"ansible.builtin", "ansible.legacy", "aisite.site", *pull_vars["pull_collections"]}
    named = re.compile(
        r"^\s*-?\s*([a-z_]+\.[a-z_]+)\.[a-z_]+:"  # a task's module
        r"|lookup\(\s*'([a-z_]+\.[a-z_]+)\.[a-z_]+'"  # a lookup
        r"|\|\s*([a-z_]+\.[a-z_]+)\.[a-z_]+"  # a filter
        r"|\bis\s+([a-z_]+\.[a-z_]+)\.[a-z_]+",  # a test
        re.M,
    )
    (literal,) = typing.get_args(Gitops.model_fields["pull_layers"].annotation)  # list[Literal[...]]
    used: dict[str, set[str]] = {}
    for layer in typing.get_args(literal):
        for role in playbook_roles(PLAYBOOKS / f"{layer}.yml"):
            for path in (ROLES / role).glob("*/*"):
                if path.parent.name in ("tasks", "handlers", "templates") and path.is_file():
                    for m in named.finditer(path.read_text()):
                        name = next(g for g in m.groups() if g)
                        used.setdefault(name, set()).add(f"{role}/{path.parent.name}/{path.name}")
    assert {"ansible.posix", "community.general"} <= set(used)  # the scan finds what is there
    assert {name: sorted(where) for name, where in used.items() if name not in have} == {}


def test_slurm_topology_puts_every_rail_node_under_its_unit_and_pod(plan) -> None:  # type: ignore[no-untyped-def]
    """slurm/topology.conf as Slurm's tree plugin reads it: each rail node under exactly one switch, its unit's;
    units under their pod (three tiers); one root; every switch named as a child exists."""
    text = bundle(plan)["slurm/topology.conf"]
    switches: dict[str, dict[str, list[str]]] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        fields = dict(f.split("=", 1) for f in line.split())
        name = fields.pop("SwitchName")
        assert name not in switches and set(fields) <= {"Nodes", "Switches"}
        switches[name] = {k: expand_hostlist(v) for k, v in fields.items()}
    placed = [(n, s) for s, f in switches.items() for n in f.get("Nodes", [])]
    rail = {n.name: n for n in plan.by_role("gpu") if n.rails}
    assert sorted(n for n, _ in placed) == sorted(rail)
    for node, sw in placed:
        assert sw == f"su{rail[node].labels['aisite.io/scalable-unit']}"
    children = [c for f in switches.values() for c in f.get("Switches", [])]
    assert set(children) <= set(switches) and len(children) == len(set(children))
    assert len(set(switches) - set(children)) == 1  # one root
    for sw, f in switches.items():
        for c in f.get("Switches", []):
            if sw.startswith("pod"):
                pods = {
                    n.labels["aisite.io/pod"] for n in rail.values() if f"su{n.labels['aisite.io/scalable-unit']}" == c
                }
                assert pods == {sw[3:]}


def test_a_site_without_rail_nodes_gets_no_slurm_topology(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "stacks/Pulumi.lab.yaml").read_text())
    site = data["config"]["aisite:site"]
    site["gpu_nodes"] = site["gpu_nodes"][1:]  # the VM group alone: no rails
    site.pop("workloads")
    site.pop("serving")  # its promotion names a workload
    site["kubernetes"]["tenants"][0]["gpu_quota"] = 1
    (tmp_path / "Pulumi.norails.yaml").write_text(yaml.safe_dump(data))
    plan = build_plan(load_site(tmp_path / "Pulumi.norails.yaml"))
    assert "slurm/topology.conf" not in bundle(plan)
