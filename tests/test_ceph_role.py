"""What the ceph role is given: the plan's Ceph cluster in an inventory group of its own (its nodes alone, so a
change to it re-runs the hosts layer on them and nowhere else), in the shape the role and its molecule scenario
read."""

from __future__ import annotations

import copy
import dataclasses
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

from aisite.changes import host_digests, layer_reads, layer_targets
from aisite.loader import parse_site
from aisite.plan import build_plan
from aisite.plan.ceph_types import CephClientPlan, CephIdentity, CephPlan, CephTenantPlan, Osd, PoolPlan
from aisite.plan.types import plain
from aisite.playbooks import ROLES
from aisite.render.inventory import inventory
from tests.test_ceph_plan import DESIGN, _site

ROOT = Path(__file__).resolve().parent.parent
CONVERGE = ROLES / "ceph/molecule/default/converge.yml"


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_the_ceph_group_holds_the_clusters_nodes_and_its_plan_only_there() -> None:
    plan = build_plan(parse_site(_site(copy.deepcopy(DESIGN))))
    inv = inventory(plan)
    group = inv["all"]["children"]["ceph"]
    assert list(group["hosts"]) == ["stor01", "stor02", "stor03"]
    assert set(group["vars"]["aisite_ceph"]) == _fields(CephPlan)
    assert "aisite_ceph" not in inv["all"]["vars"], "a GPU node's hosts layer must not read the Ceph plan"
    assert set(layer_targets("hosts", inv)) >= {"stor01", "stor02", "stor03"}
    assert layer_reads("hosts", ["aisite_ceph"]) == {"aisite_ceph": None}

    bare = _site(copy.deepcopy(DESIGN))
    del bare["storage_nodes"]["ceph"]
    assert "ceph" not in inventory(build_plan(parse_site(bare)))["all"]["children"]


def test_a_changed_ceph_plan_changes_the_storage_nodes_hosts_layer_digests_only() -> None:
    design = copy.deepcopy(DESIGN)
    before = inventory(build_plan(parse_site(_site(design))))
    design["pools"][0]["share"] = 6
    after = inventory(build_plan(parse_site(_site(design))))
    reads = layer_reads("hosts", {"aisite_ceph", "aisite_node"})
    a, b = host_digests(before, reads), host_digests(after, reads)
    moved = sorted(h for h in a if a[h] != b[h])
    assert moved == ["stor01", "stor02", "stor03"], moved


def test_the_molecule_scenarios_plan_has_the_plans_shape() -> None:
    """The scenario writes its plan by hand (one node, loopback): its keys must stay the plan's."""
    play = yaml.safe_load(CONVERGE.read_text())[0]
    ceph = play["vars"]["aisite_ceph"]
    assert set(ceph) == _fields(CephPlan)
    assert all(set(p) == _fields(PoolPlan) for p in ceph["pools"])
    assert all(set(o) == _fields(Osd) for o in ceph["osds"])
    assert ceph["tenants"] and all(set(t) == _fields(CephTenantPlan) for t in ceph["tenants"])
    assert ceph["identities"] and all(set(i) == _fields(CephIdentity) for i in ceph["identities"])
    assert (
        set(ceph["gpu_client"]) == _fields(CephClientPlan) and play["vars"]["aisite_ceph_client"] == ceph["gpu_client"]
    )


def test_the_gpu_nodes_hold_the_clients_view_alone_and_mount_each_data_set() -> None:
    """The GPU nodes' group holds what they mount (the data sets, never the tenants' tree) and no more: a pool's
    change leaves their digests as they were; a new data set moves them all."""
    design = copy.deepcopy(DESIGN)
    design["filesystem"]["layouts"]["/tenants/shared"] = "datasets-ec"  # under the tenants' tree: not a data set
    plan = build_plan(parse_site(_site(design)))
    assert plan.ceph is not None and plan.ceph.gpu_client is not None
    inv = inventory(plan)
    group = inv["all"]["children"]["ceph_clients"]
    gpus = [n.name for n in plan.by_role("gpu")]
    assert list(group["hosts"]) == gpus and set(group["vars"]) == {"aisite_ceph_client"}
    client = group["vars"]["aisite_ceph_client"]
    assert client["mounts"] == [["/datasets", "/mnt/ceph/datasets"]], client["mounts"]
    assert client["mon_host"] == ",".join(plan.ceph.mon_addrvecs) and client["keys_from"] == plan.ceph.monitors[0]
    (gpu_identity,) = [i for i in plan.ceph.identities if i.name == client["client"]]
    assert dict(gpu_identity.caps)["mds"] == "allow r fsname=data path=/datasets"

    reads = layer_reads("hosts", {"aisite_ceph", "aisite_ceph_client", "aisite_node"})
    before = host_digests(inv, reads)
    design["pools"][0]["share"] = 6
    after = host_digests(inventory(build_plan(parse_site(_site(design)))), reads)
    assert not [g for g in gpus if before[g] != after[g]]
    design["filesystem"]["layouts"]["/models"] = "datasets-ec"
    after = host_digests(inventory(build_plan(parse_site(_site(design)))), reads)
    assert [g for g in gpus if before[g] != after[g]] == gpus

    design["filesystem"]["layouts"] = {}
    assert "ceph_clients" not in inventory(build_plan(parse_site(_site(design))))["all"]["children"]


@pytest.mark.skipif(
    shutil.which("ceph-conf") is None, reason="ceph-conf is not installed (scripts/setup.sh installs Ceph)"
)
def test_the_rendered_ceph_conf_reads_back_through_cephs_own_parser(tmp_path: Path) -> None:
    """The role's ceph.conf for a three-node plan, as Ceph's own ceph-conf reads it for a monitor, an OSD and RGW."""
    plan = build_plan(parse_site(_site(copy.deepcopy(DESIGN))))
    assert plan.ceph is not None
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    template = env.from_string((ROLES / "ceph/templates/ceph.conf.j2").read_text())
    conf = tmp_path / "ceph.conf"
    conf.write_text(
        template.render(
            ansible_managed="managed",
            ceph_plan=plain(plan.ceph),
            ceph_is_rgw=True,
            ceph_me="stor02",
            ceph_address=dict(plan.ceph.addresses)["stor02"],
            ceph_rgw_lc_debug_interval_s=10,
        )
    )

    def lookup(name: str, key: str) -> str:
        r = subprocess.run(
            ["ceph-conf", "-c", str(conf), "--name", name, "--lookup", key], capture_output=True, text=True, check=True
        )
        return r.stdout.strip()

    addresses = [a for _, a in plan.ceph.mon_addresses]
    assert lookup("mon.stor01", "fsid") == plan.ceph.fsid
    assert lookup("mon.stor01", "mon_host") == ",".join(f"[v2:{a}:3300,v1:{a}:6789]" for a in addresses)
    assert lookup("mon.stor01", "auth_allow_insecure_global_id_reclaim") == "false"
    assert lookup("osd.0", "osd_memory_target") == str(plan.ceph.osd_memory_target_mib * 1048576)
    assert lookup("osd.0", "osd_class_update_on_start") == "false"
    assert lookup("client.rgw.stor02", "rgw_frontends") == f"beast endpoint={dict(plan.ceph.addresses)['stor02']}:7480"
    assert lookup("mon.stor01", "public_network") == ",".join(plan.ceph.public_networks)
    assert lookup("client.rgw.stor02", "rgw_lc_debug_interval") == "10"
