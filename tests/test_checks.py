"""Every class of bad input is rejected with its key path, and all problems come back at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from aisite.examples import dgx_h100_site
from aisite.loader import load_site, parse_site
from aisite.model import Site
from aisite.plan import build_plan, fabric_bfd
from tests.conftest import STACKS, run_cli, site_problems, stack_data

problems = site_problems


def has(found: list[str], path: str, *words: str) -> bool:
    return any(p.startswith(f"{path}: ") and all(w in p for w in words) for p in found)


@pytest.mark.parametrize("stack", STACKS)
def test_shipped_stacks_are_valid(stack: str) -> None:
    site = load_site(stack)
    assert site.name == stack


def test_stacks_cover_the_three_reference_sites() -> None:
    assert {"lab", "dc1", "h100pod"} <= set(STACKS)
    h100 = load_site("h100pod")
    assert sum(g.size for g in h100.gpu_nodes if g.model == "dgx-h100") >= 32


def test_duplicate_node_names(lab: dict[str, Any]) -> None:
    lab["gpu_nodes"][0]["nodes"][1]["name"] = "gpu01"
    assert has(
        problems(lab), "site.gpu_nodes[0].nodes[1].name", "'gpu01' is already used by site.gpu_nodes[0].nodes[0]"
    )


def test_node_name_clashing_with_a_switch(lab: dict[str, Any]) -> None:
    lab["storage_nodes"]["name_pattern"] = "leaf{n:02d}"
    assert has(
        problems(lab), "site.switches.leaves.nodes[0].name", "'leaf01' is already used by site.storage_nodes.nodes[0]"
    )


def test_duplicate_addresses_name_both_places(lab: dict[str, Any]) -> None:
    lab["control_plane"]["nodes"] = [{"bmc": {"address": "10.250.0.5"}}]
    lab["gpu_nodes"][0]["nodes"][1]["bmc"]["address"] = "10.250.0.5"
    assert has(
        problems(lab),
        "site.gpu_nodes[0].nodes[1].bmc.address",
        "10.250.0.5 is already used by site.control_plane.nodes[0].bmc",
    )


def test_address_outside_its_network_and_the_gateway(lab: dict[str, Any]) -> None:
    lab["gpu_nodes"][0]["nodes"][0] = {"management": {"address": "10.99.0.1"}, "storage": {"address": "10.250.2.1"}}
    found = problems(lab)
    assert has(found, "site.gpu_nodes[0].nodes[0].management.address", "outside site.networks.management")
    assert has(found, "site.gpu_nodes[0].nodes[0].storage.address", "gateway")


def test_vip_outside_management(lab: dict[str, Any]) -> None:
    lab["control_plane"]["vip"] = "10.250.2.9"
    assert has(problems(lab), "site.control_plane.vip", "outside site.networks.management")


def test_validate_prints_each_problem_once(lab: dict[str, Any], tmp_path: Path) -> None:
    lab["control_plane"]["vip"] = "192.168.1.1"
    lab["control_plane"]["count"] = 2
    stack = tmp_path / "Pulumi.bad.yaml"
    stack.write_text(yaml.safe_dump({"config": {"aisite:site": lab}}))
    r = run_cli("validate", str(stack))
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and lines[0] == f"error: {stack}: 2 problem(s)", r.stderr
    assert sum(line.startswith("site.control_plane.vip: 192.168.1.1 is outside") for line in lines) == 1, lines
    assert len(lines) == 3 and len(set(lines)) == 3, lines


def test_duplicate_macs(lab: dict[str, Any]) -> None:
    lab["gpu_nodes"][0]["nodes"][0] = {"management": {"mac": "AA:BB:CC:00:00:01"}}
    lab["gpu_nodes"][0]["nodes"][1]["bmc"]["mac"] = "aa-bb-cc-00-00-01"
    assert has(
        problems(lab),
        "site.gpu_nodes[0].nodes[1].bmc.mac",
        "aa:bb:cc:00:00:01 is already used by site.gpu_nodes[0].nodes[0].management",
    )


def test_bad_mac_format(lab: dict[str, Any]) -> None:
    lab["gpu_nodes"][0]["nodes"][0] = {"bmc": {"mac": "not-a-mac"}}
    assert has(problems(lab), "site.gpu_nodes[0].nodes[0].bmc.mac", "not a MAC address")


def test_multicast_mac(lab: dict[str, Any]) -> None:
    lab["gpu_nodes"][0]["nodes"][0] = {"management": {"mac": "01:00:5e:00:00:01"}}
    assert has(problems(lab), "site.gpu_nodes[0].nodes[0].management.mac", "multicast")


def test_overlapping_subnets(lab: dict[str, Any]) -> None:
    lab["networks"]["rails"][1] = "10.250.1.128/25"
    assert has(problems(lab), "site.networks.rails[1]", "overlaps site.networks.management (10.250.1.0/24)")


def test_too_small_subnets(lab: dict[str, Any]) -> None:
    lab["networks"]["management"] = "10.250.1.0/30"
    lab["control_plane"]["vip"] = "10.250.1.2"
    lab["networks"]["rails"][0] = "10.250.16.0/30"
    found = problems(lab)
    assert has(found, "site.networks.management", "usable addresses but 9 are needed (7 nodes + the API VIP + the boot")
    assert has(found, "site.networks.rails[0]", "too small")


def test_more_rails_than_nics(lab: dict[str, Any]) -> None:
    lab["gpu_nodes"][0]["rails"] = 3
    assert has(problems(lab), "site.gpu_nodes[0].rails", "3 rails but generic has 2 compute NICs")


def test_more_cables_than_switch_ports(lab: dict[str, Any]) -> None:
    lab["gpu_nodes"][0]["count"] = 4
    lab["gpu_nodes"][0]["name_pattern"] = "gpu{n:02d}"
    lab["switches"]["leaves"]["ports"] = 4
    assert has(problems(lab), "site.switches.leaves.ports", "need 6 ports (4 to nodes, 2 to the fabric) but have 4")


def test_more_cables_than_access_switch_ports() -> None:
    dc1 = stack_data("dc1")
    dc1["switches"]["oob"]["ports"] = 8
    assert has(problems(dc1), "site.switches.oob", "12 cables (9 BMCs + 3 switch management ports)", "1 x 8 ports")


def test_too_few_leaves() -> None:
    dc1 = stack_data("dc1")
    dc1["switches"]["leaves"]["count"] = 1
    assert has(problems(dc1), "site.switches.leaves.count", "1 leaves but the fabric needs 2")


@pytest.mark.parametrize("count", [2, 4])
def test_even_control_plane(lab: dict[str, Any], count: int) -> None:
    lab["control_plane"]["count"] = count
    assert has(problems(lab), "site.control_plane.count", f"{count} control-plane nodes", "odd number")


def test_unknown_gpu_model(lab: dict[str, Any]) -> None:
    lab["gpu_nodes"][0]["model"] = "dgx-3"
    assert has(problems(lab), "site.gpu_nodes[0].model", "unknown GPU server model 'dgx-3'", "dgx-h100")


def test_known_model_rejects_explicit_counts() -> None:
    dc1 = stack_data("dc1")
    dc1["gpu_nodes"][1]["gpus"] = 8
    assert has(problems(dc1), "site.gpu_nodes[1].gpus", "only with model 'generic'")


def test_v100_driver_above_r580_at_group_level() -> None:
    dc1 = stack_data("dc1")
    dc1["gpu_nodes"][1]["driver_branch"] = 590
    assert has(problems(dc1), "site.gpu_nodes[1].driver_branch", "R590 does not support Volta", "R580")


def test_v100_driver_above_r580_at_site_level() -> None:
    dc1 = stack_data("dc1")
    del dc1["gpu_nodes"][1]["driver_branch"]
    dc1["nvidia"] = {"driver_branch": 595}
    assert has(problems(dc1), "site.nvidia.driver_branch", "R595 does not support Volta")


def test_missing_credential_reference(lab: dict[str, Any]) -> None:
    lab["gpu_nodes"][0]["nodes"][1]["bmc"]["credentials"] = "nope"
    assert has(problems(lab), "site.gpu_nodes[0].nodes[1].bmc.credentials", "secret 'nope' is not declared", "lab-bmc")


def test_no_credentials_at_all(lab: dict[str, Any]) -> None:
    del lab["oob"]["credentials"]
    assert has(problems(lab), "site.control_plane.bmc.credentials", "1 BMC(s) have no credentials")


def test_inline_password_is_refused_with_advice(lab: dict[str, Any]) -> None:
    lab["gpu_nodes"][0]["nodes"][0] = {"bmc": {"password": "hunter2"}}
    found = problems(lab)
    assert has(found, "site.gpu_nodes[0].nodes[0].bmc.password", "never written in a stack file")
    assert not any("hunter2" in p for p in found)


def test_unknown_key_suggests_the_right_one(lab: dict[str, Any]) -> None:
    lab["switches"]["spine"] = lab["switches"].pop("spines")
    found = problems(lab)
    assert has(found, "site.switches.spine", "unknown key 'spine'", "did you mean 'spines'")
    assert has(found, "site.switches.spines", "required key is missing")


def test_every_problem_is_reported_at_once(lab: dict[str, Any]) -> None:
    lab["control_plane"]["count"] = 2
    lab["gpu_nodes"][0]["rails"] = 5
    lab["networks"]["storage"] = "10.250.1.0/25"
    lab["oob"]["credentials"] = "missing"
    lab["workloads"][0]["tenant"] = "nobody"
    found = problems(lab)
    for path in (
        "site.control_plane.count",
        "site.gpu_nodes[0].rails",
        "site.networks.storage",
        "site.oob.credentials",
        "site.workloads[0].tenant",
    ):
        assert has(found, path), f"{path} not reported in {found}"


def test_shape_errors_are_all_reported(lab: dict[str, Any]) -> None:
    lab["networks"]["oob"] = "10.250.0.0/33"
    lab["fabric"]["switch_mtu"] = 20000
    lab["gpu_nodes"][0]["count"] = -1
    found = problems(lab)
    assert has(found, "site.networks.oob")
    assert has(found, "site.fabric.switch_mtu", "9216")
    assert has(found, "site.gpu_nodes[0].count", "greater than or equal to 0")


def test_workload_beyond_tenant_quota(lab: dict[str, Any]) -> None:
    lab["workloads"][0]["gpus_per_node"] = 2
    found = problems(lab)
    assert has(found, "site.workloads[0]", "needs 4 t4 GPUs (2 nodes x 2) but tenant 'team-a' has a t4 quota of 2")
    assert has(found, "site.workloads[0].gpus_per_node", "largest t4 node has 1")


def test_workloads_are_held_to_their_gpu_type_nodes_operator_and_image(lab: dict[str, Any]) -> None:
    lab["workloads"] += [
        {"name": "four", "kind": "resnet50-train", "tenant": "team-a", "nodes": 4, "gpus_per_node": 0},
        {"name": "lonely", "kind": "ib-write-bw", "tenant": "team-a", "nodes": 1, "gpus_per_node": 0},
        {"name": "noimage", "kind": "fio", "tenant": "team-a", "nodes": 1, "gpus_per_node": 0},
        {"name": "v100", "kind": "fio", "tenant": "team-a", "gpu_type": "v100", "image": "x/fio:1"},
    ]
    lab["kubernetes"]["addons"].remove("mpi-operator")
    found = problems(lab)
    assert has(found, "site.workloads[0].kind", "nccl-allreduce runs as a job of the mpi-operator addon")
    assert has(found, "site.workloads[1].kind", "resnet50-train runs as a job of the training-operator addon")
    assert has(found, "site.workloads[3].nodes", "4 nodes but the site has 3 t4 nodes")
    assert has(found, "site.workloads[4].nodes", "ib-write-bw measures between nodes")
    assert has(found, "site.workloads[5].image", "fio has no pinned upstream image")
    assert has(found, "site.workloads[6].gpu_type", "the site has no v100 nodes (it has: t4)")
    # A site of two GPU types: each workload names its type, and is held to that type's quota.
    dc1 = stack_data("dc1")
    dc1["workloads"][0].pop("gpu_type")
    dc1["workloads"][2]["gpu_type"] = "t4"
    found = problems(dc1)
    assert has(found, "site.workloads[0].gpu_type", "the site has GPU types t4, v100")
    assert has(found, "site.workloads[2].gpus_per_node", "8 but the largest t4 node has 4")


def test_thresholds_are_checked_for_shape(lab: dict[str, Any]) -> None:
    lab["workloads"][1]["thresholds"] = {"min_scaling_efficiency": 3, "min_fraction": 0.9}
    found = problems(lab)
    assert has(found, "site.workloads[1].thresholds.min_scaling_efficiency", "less than or equal to 1.5")
    assert has(found, "site.workloads[1].thresholds.min_fraction", "did you mean 'min_fraction_of_reference'")


def test_roce_profile_consistency(lab: dict[str, Any]) -> None:
    lab["fabric"]["roce"] = {"cnp_priority": 3, "ecn_min_kb": 2000}
    found = problems(lab)
    assert has(found, "site.fabric.roce.cnp_priority", "lossless priority")
    assert has(found, "site.fabric.roce.ecn_min_kb", "not below")


def test_asn_range(lab: dict[str, Any]) -> None:
    lab["fabric"]["asn_base"] = 65533
    assert has(problems(lab), "site.fabric.asn_base", "run past the private range 64512-65534")


def test_bmc_accounts_name_declared_secrets_once(lab: dict[str, Any]) -> None:
    lab["secrets"]["ops"] = {"username": "ops", "password_from": {"env": "OPS_PW"}}
    lab["oob"]["accounts"] = [
        {"secret": "ops", "role": "ReadOnly"},
        {"secret": "nope"},
        {"secret": "ops"},
    ]
    found = problems(lab)
    assert has(found, "site.oob.accounts[1].secret", "secret 'nope' is not declared")
    assert has(found, "site.oob.accounts[2].secret", "user 'ops' is already an account above")
    lab["oob"]["accounts"] = [{"secret": "ops", "role": "Root"}]
    assert has(problems(lab), "site.oob.accounts[0].role", "'ReadOnly'", "got 'Root'")


def test_pod_and_service_networks_may_not_overlap_a_site_network(lab: dict[str, Any]) -> None:
    lab["networks"]["pods"] = "10.250.1.0/24"  # the management network
    lab["networks"]["services"] = str(lab["networks"]["rails"][0])
    found = problems(lab)
    assert any("site.networks.pods" in p and "site.networks.management" in p and "overlaps" in p for p in found)
    assert any("site.networks.services" in p and "site.networks.rails[0]" in p and "overlaps" in p for p in found)


def test_vip_may_not_be_a_node_address(lab: dict[str, Any]) -> None:
    lab["control_plane"]["nodes"] = [{"management": {"address": str(lab["control_plane"]["vip"])}}]
    assert has(problems(lab), "site.control_plane.nodes[0].management.address", "already used by site.control_plane")


@pytest.mark.parametrize("version", ["1.32.9", "1.36.0"])
def test_kubernetes_version_outside_the_pinned_components(lab: dict[str, Any], version: str) -> None:
    lab["kubernetes"]["version"] = version
    assert has(problems(lab), "site.kubernetes.version", version, "Calico", "use 1.33 to 1.35")


def test_cni_without_a_pinned_manifest_needs_one(lab: dict[str, Any]) -> None:
    lab["kubernetes"]["cni"] = "cilium"
    assert has(problems(lab), "site.kubernetes.cni", "no pinned manifest for cilium", "cni_manifest")
    lab["kubernetes"]["cni_manifest"] = "https://mirror.example/cilium.yaml"
    parse_site(lab, "test")


def test_registry_needs_mirrors_or_a_ca(lab: dict[str, Any]) -> None:
    lab["kubernetes"]["containerd"] = {"registries": [{"host": "registry.example:5000"}]}
    assert has(problems(lab), "site.kubernetes.containerd.registries[0]", "registry.example:5000")


def test_tenant_quotas_beyond_the_sites_gpus_are_refused() -> None:
    """A 1,024-GPU site (128 DGX H100) with tenants of 768 + 1,000 GPUs: each fits alone, together they do not."""
    site = dgx_h100_site(128)
    site["kubernetes"]["tenants"] = [{"name": "llm", "gpu_quota": 768}, {"name": "vision", "gpu_quota": 1000}]
    parse_site(dgx_h100_site(128), "test")  # the site itself is valid
    found = problems(site)
    assert has(found, "site.kubernetes.tenants", "quotas add up to 1768 h100 GPUs (llm 768, vision 1000)", "1024")
    site["kubernetes"]["gpu_overcommit"] = True
    parse_site(site, "test")  # said explicitly, Kueue shares them by borrowing
    site["kubernetes"]["tenants"][1]["gpu_quota"] = 1025
    assert has(problems(site), "site.kubernetes.tenants[1].gpu_quota", "1025 h100 GPUs but the site has 1024")


def test_tenant_quota_per_gpu_type(lab: dict[str, Any]) -> None:
    dc1 = stack_data("dc1")
    dc1["kubernetes"]["tenants"][0]["gpu_quota"] = 20  # dc1 has t4 and v100: which?
    dc1["kubernetes"]["tenants"][1]["gpu_quota"] = {"a100": 1, "t4": 5}
    dc1["kubernetes"]["tenants"][1]["lending_limit"] = 6
    found = problems(dc1)
    assert has(found, "site.kubernetes.tenants[0].gpu_quota", "GPU types t4, v100", "{t4: 20}")
    assert has(found, "site.kubernetes.tenants[1].gpu_quota.a100", "no a100 GPUs (it has: t4, v100)")
    assert has(found, "site.kubernetes.tenants[1].gpu_quota.t4", "5 t4 GPUs but the site has 4")
    assert has(found, "site.kubernetes.tenants[1].lending_limit", "6 is more than its t4 quota of 5")


def test_gitops_settings_are_checked_together(lab: dict[str, Any]) -> None:
    lab["gitops"]["reconciler_host"] = "cp09"
    lab["gitops"]["allowed_signers"] = []
    found = problems(lab)
    assert has(found, "site.gitops.reconciler_host", "'cp09' is not a node of the site", "cp01")
    assert has(found, "site.gitops.signers_secret", "list the same keys in allowed_signers")
    lab["gitops"]["git_secret"] = "Lab_Git"
    assert has(problems(lab), "site.gitops.git_secret", "'Lab_Git' is not a DNS-1123 subdomain")


def test_pull_mode_without_signers_is_refused(lab: dict[str, Any]) -> None:
    """A node that pulls runs what it accepts as root: with no signers it would accept whatever answers its fetch."""
    lab["gitops"]["pull_layers"] = ["hosts"]
    lab["gitops"]["allowed_signers"] = []
    lab["gitops"].pop("signers_secret")
    assert has(problems(lab), "site.gitops.pull_layers", "apply only signed commits")


def test_gitops_refuses_an_unsigned_looking_signer_line(lab: dict[str, Any]) -> None:
    lab["gitops"]["allowed_signers"] = ["admin@example.com not-a-key"]
    lab["gitops"]["interval_seconds"] = 5
    found = problems(lab)
    assert any(p.startswith("site.gitops.allowed_signers[0]: ") for p in found)
    assert has(found, "site.gitops.interval_seconds", "greater than or equal to 30")


def test_switch_os_release_bfd_and_tenant_pod_security(lab: dict[str, Any]) -> None:
    """Cumulus switches say their release (NVUE's syntax changed in 5.15) within what aisite renders; SONiC's
    bgpcfgd cannot enable BFD; an MPIJob runs in a restricted tenant too (non-root: tests/test_pod_security.py);
    the watchdog's detection is a whole number of polls."""
    lab["switches"]["leaves"]["os"] = lab["switches"]["spines"]["os"] = "cumulus"
    lab["switches"]["spines"]["os_version"] = "5.16"
    lab["kubernetes"]["tenants"][0].pop("pod_security", None)
    lab["fabric"]["roce"] = {"pfc_watchdog_poll_ms": 100, "pfc_watchdog_detection_ms": 250}
    found = problems(lab)
    assert has(found, "site.switches.leaves.os_version", "say which Cumulus Linux release", "5.11 to 5.15")
    assert has(found, "site.switches.spines.os_version", "5.16: aisite renders NVUE for 5.11 to 5.15")
    assert not any(p.startswith("site.workloads[0].tenant") for p in found), found
    assert has(found, "site.fabric.roce.pfc_watchdog_detection_ms", "250 is not a whole number of polls of 100 ms")
    lab["switches"]["leaves"]["os"] = lab["switches"]["spines"]["os"] = "sonic"
    # Unset, BFD follows the OS (off on SONiC): a SONiC fabric is valid as it comes.
    assert not any(p.startswith("site.fabric.bfd") for p in problems(lab))
    assert fabric_bfd(Site.model_validate(lab)) is False
    lab["switches"]["leaves"]["os"] = lab["switches"]["spines"]["os"] = "cumulus"
    assert fabric_bfd(Site.model_validate(lab)) is True
    lab["switches"]["leaves"]["os"] = lab["switches"]["spines"]["os"] = "sonic"
    lab["fabric"]["bfd"] = True
    assert has(problems(lab), "site.fabric.bfd", "SONiC's BGP_NEIGHBOR table (bgpcfgd) cannot enable BFD")
    lab["fabric"]["bfd"] = False
    assert not any(p.startswith("site.fabric.bfd") for p in problems(lab))


# ------------------------------------------------------------------------------------------------ three tiers
def test_a_third_tier_needs_pods_and_pods_need_super_spines() -> None:
    site = stack_data("lab3")
    del site["fabric"]["pod_size"]
    assert has(problems(site), "site.fabric.pod_size", "super-spines need pods")
    site = stack_data("lab3")
    del site["switches"]["super_spines"]
    assert has(problems(site), "site.switches.super_spines", "pods of 1 scalable unit(s) need super-spines")


def test_pods_take_the_same_spines_and_planes_the_same_super_spines() -> None:
    site = stack_data("lab3")
    site["switches"]["spines"]["count"] = 3
    site["switches"]["super_spines"]["count"] = 3
    site["fabric"]["super_spine_planes"] = 2
    found = problems(site)
    assert has(found, "site.switches.spines.count", "3 spines do not split evenly over 2 pod(s)")
    assert has(found, "site.switches.super_spines.count", "3 super-spines do not split into 2 planes")


def test_each_tiers_ports_are_counted_against_its_switches() -> None:
    site = stack_data("lab3")
    site["fabric"]["uplinks_per_super_spine"] = 4  # each spine: 2 leaves + 2 x 4 to the super-spines
    site["switches"]["spines"]["ports"] = 8
    site["switches"]["super_spines"]["ports"] = 8
    site["fabric"]["oversubscription"] = {"spines": 64}
    found = problems(site)
    assert has(found, "site.switches.spines.ports", "needs 10 ports", "2 leaves of a pod x 1 uplinks + 8")
    assert has(found, "site.switches.super_spines.ports", "needs 16 ports", "2 pods x 8 links")


def test_oversubscription_beyond_what_the_site_allows_is_refused() -> None:
    site = stack_data("lab3")
    site["switches"]["super_spines"]["count"] = 1  # each spine: 2 x 100 down, 1 x 100 up
    found = problems(site)
    assert has(found, "site.fabric.oversubscription.spines", "2:1 oversubscribed", "200 Gbps down, 100 Gbps up")
    site["fabric"]["oversubscription"] = {"spines": 2}
    parse_site(site, "test")  # stated, it is allowed


def test_a_floor_on_bisection_bandwidth_per_gpu() -> None:
    site = stack_data("lab3")
    site["fabric"]["min_bisection_gbps_per_gpu"] = 400
    assert has(problems(site), "site.fabric.min_bisection_gbps_per_gpu", "200 Gbps per GPU, below 400")
    site["fabric"]["min_bisection_gbps_per_gpu"] = 200
    parse_site(site, "test")


def test_address_blocks_and_asns_of_every_tier_say_what_is_missing() -> None:
    site = stack_data("lab3")
    site["networks"]["loopbacks"] = "10.248.3.0/29"  # 5 usable, 10 fabric switches
    site["networks"]["p2p"] = "10.248.3.64/28"  # 8 /31s, 16 links
    site["fabric"]["asn_base"] = 65530  # 2 pods + 4 leaves past 65534
    found = problems(site)
    assert has(found, "site.networks.loopbacks", "5 usable addresses but 10 are needed", "5 missing")
    assert has(found, "site.networks.p2p", "fewer than 16 /31 links: 8 missing")
    assert has(found, "site.fabric.asn_base", "ASNs 65530-65536 run past the private range 64512-65534")


def test_super_spines_peer_the_way_the_spines_do() -> None:
    site = stack_data("lab3")
    site["switches"]["super_spines"]["os"] = "sonic"
    site["fabric"]["bfd"] = False
    assert has(problems(site), "site.switches.super_spines.os", "sonic super-spines cannot peer with frr spines")


def test_loopbacks_are_counted_as_the_pool_hands_them_out() -> None:
    """A /26 holds 61 loopbacks (network, gateway and broadcast are not handed out): a site of 64 fabric switches
    was once called valid and then failed to plan with a traceback."""
    site = dgx_h100_site(128)
    site["networks"]["loopbacks"] = "10.0.48.0/26"
    site["switches"]["spines"]["count"] = 32  # 32 leaves + 32 spines
    site["switches"]["spines"]["ports"] = 64
    site["fabric"]["uplinks_per_spine"] = 1
    assert has(problems(site), "site.networks.loopbacks", "61 usable addresses but 64 are needed", "3 missing")


@pytest.mark.parametrize("gpus", [1024, 32768])
def test_the_generated_scale_sites_are_valid(gpus: int) -> None:
    """The benchmark's sites (make bench-sites) are real three-tier fabrics: 1:1 at every tier, 64-port switches."""
    from aisite.examples import scale_site

    site = parse_site(scale_site(gpus), "test")
    assert site.switches.super_spines is not None
    assert max(g.ports for g in (site.switches.leaves, site.switches.spines, site.switches.super_spines)) == 64


def test_ecmp_wider_than_the_roles_install_is_refused() -> None:
    site = stack_data("lab3")
    site["fabric"]["uplinks_per_super_spine"] = 16  # 5 super-spines x 16 links from each spine
    site["switches"]["super_spines"]["count"] = 5
    site["switches"]["spines"]["ports"] = 128
    assert has(problems(site), "site.fabric.uplinks_per_super_spine", "80 equal-cost next hops", "at most 64")


def test_rail_subnets_too_small_for_the_units_say_how_many_they_hold() -> None:
    site = scale_site_data(4096)
    site["networks"]["rails"][3] = "10.103.0.0/24"  # 4 blocks of /26 for 16 scalable units
    assert has(problems(site), "site.networks.rails[3]", "16 scalable unit(s) of /26 need a /22 or larger; it holds 4")


def scale_site_data(gpus: int) -> dict[str, Any]:
    from aisite.examples import scale_site

    return scale_site(gpus)


def test_a_known_switch_model_holds_its_tier_to_its_front_panel() -> None:
    site = stack_data("lab3")
    site["switches"]["spines"] |= {"model": "SN2700", "ports": 48, "speed_gbps": 100}  # 32 cages of 100G
    site["switches"]["super_spines"] |= {"model": "SN5600", "ports": 16, "speed_gbps": 1600}
    site["switches"]["leaves"] |= {"model": "SN5600", "ports": 200, "speed_gbps": 400}  # 64 x 800G split in two
    found = problems(site)
    assert has(found, "site.switches.spines.ports", "48: an SN2700 (32 x 100G) has at most 32 ports at 100 Gbps")
    assert has(found, "site.switches.super_spines.speed_gbps", "ports run at most 800 Gbps")
    assert has(found, "site.switches.leaves.ports", "at most 128 ports at 400 Gbps")
    site = stack_data("lab3")
    site["switches"]["spines"] |= {"model": "SN2700", "ports": 64, "speed_gbps": 50}  # each cage split in two
    site["switches"]["leaves"]["speed_gbps"] = 50
    site["switches"]["super_spines"]["speed_gbps"] = 50
    # Each cage split in two: the lab's FRR names the ports as Cumulus does (swp1s0, swp1s1).
    plan = build_plan(parse_site(site, "test"))
    spine = next(s for s in plan.switches if s.role == "spine")
    assert (spine.breakout, spine.cages) == (2, 32) and spine.neighbors[0].interface == "swp1s0"


def test_a_sonic_breakout_names_a_mode_the_platform_defines_or_is_refused() -> None:
    """SONiC's BREAKOUT_CFG carries the mode's name as the platform's platform.json defines it: the plan takes it
    from the driver's platform table, and a split the platform has no mode for (or a model whose platform files
    aisite does not hold) is refused with what there is."""
    site = stack_data("lab3")
    for tier in ("leaves", "spines", "super_spines"):
        site["switches"][tier] |= {"os": "sonic", "model": "SN2700", "ports": 64, "speed_gbps": 50}
    site["fabric"]["bfd"] = False
    plan = build_plan(parse_site(site, "test"))
    spine = next(s for s in plan.switches if s.role == "spine")
    assert (spine.breakout, spine.breakout_mode, spine.hwsku) == (2, "2x50G[25G,10G]", "ACS-MSN2700")
    assert spine.neighbors[0].interface == "Ethernet0"
    site["switches"]["spines"] |= {"model": "SN4700", "ports": 64, "speed_gbps": 200}
    site["switches"]["leaves"] |= {"model": "SN2700", "ports": 64, "speed_gbps": 40}
    site["switches"]["super_spines"] |= {"model": "SN5600", "ports": 256, "speed_gbps": 200}
    found = problems(site)
    assert has(found, "site.switches.spines.ports", "which aisite's catalog holds for SN2700, SN5600 only")
    assert has(found, "site.switches.leaves.speed_gbps", "broken out as 2x50G[25G,10G] runs none at that speed")
    assert not [p for p in found if p.startswith("site.switches.super_spines")], found  # 4x200G is the SN5600's


def test_the_planner_never_hands_out_the_sites_own_servers(lab: dict[str, Any]) -> None:
    # A new team's site: DNS and NTP servers inside the management subnet, where the first nodes' addresses go.
    lab["dns_servers"] = ["10.250.1.2"]
    lab["ntp_servers"] = ["10.250.1.3"]
    plan = build_plan(parse_site(lab))
    given = {n.management.address for n in plan.nodes}
    assert not given & {"10.250.1.2", "10.250.1.3"}
    assert "10.250.1.2" not in plan.kubernetes.cert_sans
    reserved = {r.address: r.by for r in plan.reserved if r.network == "management"}
    assert reserved["10.250.1.1"].startswith("gateway")
    assert (reserved["10.250.1.2"], reserved["10.250.1.3"]) == ("site.dns_servers[0]", "site.ntp_servers[0]")


def test_a_node_given_a_named_servers_address_or_a_server_in_a_rail_network(lab: dict[str, Any]) -> None:
    lab["dns_servers"] = ["10.250.1.20", lab["networks"]["rails"][0].split("/")[0].rsplit(".", 1)[0] + ".9"]
    lab["control_plane"]["nodes"] = [{"management": {"address": "10.250.1.20"}}]
    found = problems(lab)
    assert has(found, "site.control_plane.nodes[0].management.address", "named by site.dns_servers[0]")
    assert has(found, "site.dns_servers[1]", "inside site.networks.rails[0]")


def test_a_field_error_does_not_hide_the_cross_key_checks(lab: dict[str, Any]) -> None:
    """One bad address (an optional key) and a duplicate name (a cross-key check) come back together, and the
    checks say what they ran without; a required key that did not parse says the checks did not run."""
    lab["gpu_nodes"][0]["nodes"][0]["management"] = {"address": "10.250.1.999"}
    lab["gpu_nodes"][0]["nodes"][1]["name"] = "gpu01"
    found = problems(lab)
    assert has(found, "site.gpu_nodes[0].nodes[0].management.address", "Octet 999")
    assert has(found, "site.gpu_nodes[0].nodes[1].name", "'gpu01' is already used by site.gpu_nodes[0].nodes[0]")
    assert has(found, "site", "cross-key checks ran without site.gpu_nodes[0].nodes[0].management.address")
    lab["control_plane"]["vip"] = "10.250.1"
    found = problems(lab)
    assert has(found, "site.control_plane.vip")
    assert has(found, "site", "cross-key checks not run: site.control_plane.vip is required")
