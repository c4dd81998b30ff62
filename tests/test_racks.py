"""Blackwell and NVL72 in the catalog, racks in the model and plan, and the IMEX peers the nodes get from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from aisite.catalog import GPU_TYPES, SERVER_MODELS
from aisite.loader import load_site, parse_site
from aisite.plan import build_plan
from aisite.render.inventory import NODE_GROUPS, inventory
from tests.conftest import assert_reported, site_problems, stack_data


def gb200() -> dict[str, Any]:
    return stack_data("gb200")


def test_the_new_models_have_their_sources_and_rack_facts() -> None:
    for name in ("dgx-b200", "dgx-b300", "gb200-nvl72", "gb300-nvl72"):
        model = SERVER_MODELS[name]
        assert model.source, name
        assert GPU_TYPES[model.gpu_type].arch == "blackwell"
        assert GPU_TYPES[model.gpu_type].min_driver_branch == 570
    tray = SERVER_MODELS["gb200-nvl72"]
    assert (tray.gpus, tray.rack_trays, tray.rack_switch_trays, tray.nvlink_domain) == (4, 18, 9, 72)
    assert [p.rdma for p in tray.compute_ports] == ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5"]
    assert tray.cpu_arch == "arm64" and SERVER_MODELS["gb300-nvl72"].cpu_arch == "arm64"
    assert SERVER_MODELS["dgx-b300"].nic_speed_gbps == 800 and SERVER_MODELS["dgx-b300"].nvlink_domain == 8
    assert GPU_TYPES["b200"].memory_gib == 180  # 1,440 GB over 8 GPUs (DGX B200 User Guide)


def test_each_gpu_gets_the_kernel_modules_its_generation_needs_and_the_role_installs_that_flavour() -> None:
    """Open modules from Turing on (Grace and Blackwell need them), proprietary for Volta (NVIDIA's driver README
    and its open-modules announcement, cited in aisite.catalog); the nvidia role's driver packages follow the plan."""
    import jinja2
    import yaml

    from aisite.playbooks import ROLES

    assert {t.name for t in GPU_TYPES.values() if t.kernel_modules == "proprietary"} == {"v100"}
    by_name = {n.name: n for n in build_plan(load_site("gb200")).nodes}
    assert by_name["gb001"].gpu is not None and by_name["gb001"].gpu.kernel_modules == "open"
    dc1 = [n.gpu for n in build_plan(load_site("dc1")).nodes if n.gpu]
    assert {(g.arch, g.kernel_modules) for g in dc1} == {("volta", "proprietary"), ("turing", "open")}
    default = yaml.safe_load((ROLES / "nvidia" / "defaults" / "main.yml").read_text())["nvidia_driver_packages"]
    for modules, want in (("open", "['nvidia-open']"), ("proprietary", "['cuda-drivers-580']")):
        node = {"gpu": {"kernel_modules": modules}}
        got = jinja2.Environment().from_string(default).render(aisite_node=node, nvidia_driver_branch=580)
        assert got == want, modules


def test_fourth_generation_nvswitch_systems_get_the_nvlink_subnet_manager_beside_the_fabric_manager() -> None:
    """DGX B200/B300 (fourth-generation NVSwitches: the Fabric Manager User Guide) install NVLSM with the fabric
    manager; DGX H100 and the NVL72 trays (their switch trays run it) do not."""
    import jinja2
    import yaml

    from aisite.playbooks import ROLES

    data = stack_data("h100pod")
    data["gpu_nodes"][0]["model"] = "dgx-b200"
    data["gpu_nodes"][0]["ports"] = [{"label": f"p{i}", "rdma": f"mlx5_{i}"} for i in range(8)]
    data["gpu_nodes"][0]["install"] = {"method": "adopt", "os": "dgx-os-7"}
    b200 = {n.gpu.nvlsm for n in build_plan(parse_site(data)).nodes if n.gpu}
    h100 = {n.gpu.nvlsm for n in build_plan(load_site("h100pod")).nodes if n.gpu}
    trays = {n.gpu.nvlsm for n in build_plan(load_site("gb200")).nodes if n.gpu}
    assert (b200, h100, trays) == ({True}, {False}, {False})
    default = yaml.safe_load((ROLES / "nvidia" / "defaults" / "main.yml").read_text())["nvidia_fabricmanager_packages"]
    for nvlsm, want in ((True, "['nvidia-fabricmanager-580', 'nvlsm']"), (False, "['nvidia-fabricmanager-580']")):
        node = {"gpu": {"nvlsm": nvlsm}}
        got = jinja2.Environment().from_string(default).render(aisite_node=node, nvidia_driver_branch=580)
        assert got.strip() == want, nvlsm


def test_gb200_trays_keep_their_gpu_memory_with_the_driver_cdmm() -> None:
    """GB200's memory is coherent with its Grace CPUs: from R580 the driver keeps it (CDMM) instead of the OS
    onlining it as NUMA nodes the kubelet would count; an older branch is refused, x86 GPUs get no CDMM."""
    import jinja2
    import yaml

    from aisite.playbooks import ROLES

    mixed = build_plan(load_site("mixed"))
    assert {(n.gpu.type, n.gpu.cdmm) for n in mixed.nodes if n.gpu} == {("gb200", True), ("h100", False)}
    data = gb200()
    data["gpu_nodes"][0]["driver_branch"] = 575
    found = site_problems(data)
    assert "site.gpu_nodes[0].driver_branch: R575: gb200's memory is kept by the driver (CDMM) from R580 on" in (
        " ".join(found)
    ), found
    files = yaml.safe_load((ROLES / "nvidia" / "vars" / "main.yml").read_text())["nvidia_files"]
    for cdmm in (True, False):
        node = {"gpu": {"cdmm": cdmm}}
        got = jinja2.Environment().from_string(files).render(aisite_node=node, nvidia_imex_peers=[])
        assert ("/etc/modprobe.d/aisite-nvidia.conf" in got) == cdmm


def test_a_site_relying_on_a_technology_preview_is_warned_and_its_racks_need_none() -> None:
    """DRA GPU allocation is a technology preview of NVIDIA's DRA driver (its ComputeDomains are fully supported):
    the gb200 example, which asks for it, is warned; with the device plugin its racks still get ComputeDomains."""
    from aisite.cautions import site_warnings

    site = load_site("gb200")
    (warning,) = [w for w in site_warnings(site, build_plan(site)) if w.path == "site.kubernetes.gpu_allocation"]
    assert "technology preview" in warning.message
    data = gb200()
    data["kubernetes"]["gpu_allocation"] = "device-plugin"
    site = parse_site(data, "gb200dp")
    assert not [w for w in site_warnings(site, build_plan(site)) if w.path == "site.kubernetes.gpu_allocation"]


def test_the_gb200_site_plans_four_whole_racks_with_their_imex_peers() -> None:
    plan = build_plan(load_site("gb200"))
    assert [r.name for r in plan.racks] == ["a08", "a09", "a10", "a11"]
    by_name = {n.name: n for n in plan.nodes}
    for i, rack in enumerate(plan.racks):
        assert rack.full and rack.gpus == 72 and rack.switch_trays == 9
        assert rack.trays == tuple(f"gb{n:03d}" for n in range(18 * i + 1, 18 * i + 19))
        assert rack.imex_peers == tuple(by_name[t].management.address for t in rack.trays)
        for tray in rack.trays:
            assert by_name[tray].rack == rack.name and by_name[tray].labels["aisite.io/rack"] == rack.name
    # Every tray is in one rack, and nothing else is.
    assert sorted(t for r in plan.racks for t in r.trays) == sorted(n.name for n in plan.by_role("gpu"))
    assert all(n.rack is None for n in plan.nodes if n.role != "gpu")
    # The rack's workload asks for one NVLink domain: 18 trays of 4 GPUs.
    rack_job = next(w for w in plan.workloads if w.name == "nccl-allreduce-rack")
    assert rack_job.nodes * rack_job.gpus_per_node == plan.racks[0].gpus
    # Each tray's four ConnectX-7 ports are its rails, in the guide's order, at 400G.
    rails = by_name["gb001"].rails
    assert [(r.port, r.rdma, r.speed_gbps) for r in rails] == [
        ("LeftBay-OSFP-P3", "mlx5_0", 400),
        ("LeftBay-OSFP-P4", "mlx5_1", 400),
        ("RightBay-OSFP-P3", "mlx5_4", 400),
        ("RightBay-OSFP-P4", "mlx5_5", 400),
    ]


def test_each_tray_gets_its_own_racks_imex_peers_and_other_nodes_none() -> None:
    plan = build_plan(load_site("gb200"))
    hosts = inventory(plan)["all"]["children"][NODE_GROUPS["gpu"]]["hosts"]
    assert hosts["gb019"]["aisite_imex_peers"] == list(plan.racks[1].imex_peers)
    assert hosts["gb018"]["aisite_imex_peers"] == list(plan.racks[0].imex_peers)
    h100 = inventory(build_plan(load_site("h100pod")))["all"]["children"][NODE_GROUPS["gpu"]]["hosts"]
    assert not any("aisite_imex_peers" in v for v in h100.values())


def test_a_partial_rack_is_declared_and_planned_as_a_smaller_domain() -> None:
    data = gb200()
    group = data["gpu_nodes"][0]
    group["count"] = 38
    group["racks"] = [{"name": "a08"}, {"name": "a09"}, {"name": "a10", "trays": 2}]
    for tenant, quota in zip(data["kubernetes"]["tenants"], (100, 52), strict=True):
        tenant["gpu_quota"] = quota  # the stack's were for four racks
    plan = build_plan(parse_site(data))
    last = plan.racks[-1]
    assert (last.name, last.full, last.gpus, last.trays) == ("a10", False, 8, ("gb037", "gb038"))


def test_trays_that_do_not_fill_racks_and_other_rack_mistakes_are_all_reported() -> None:
    data = gb200()
    data["gpu_nodes"][0]["count"] = 20
    del data["gpu_nodes"][0]["racks"]
    data["gpu_nodes"][0]["driver_branch"] = 560
    data["gpu_nodes"][0]["install"] = {"os": "ubuntu-24.04"}
    data["gpu_nodes"].append(
        {"name": "h100", "model": "dgx-h100", "count": 2, "name_pattern": "h{n:02d}", "racks": [{"name": "r1"}]}
    )
    found = site_problems(data)
    want = {
        "site.gpu_nodes[0].count": "20 trays do not fill whole gb200-nvl72 racks of 18",
        "site.gpu_nodes[0].driver_branch": "the first branch with Blackwell support is R570",
        "site.gpu_nodes[0].install.method": "amd64 install images only",
        "site.gpu_nodes[1].racks": "dgx-h100 is not a rack-scale system",
    }
    assert_reported(found, want)


def test_racks_must_hold_the_groups_trays_each_once_within_a_rack() -> None:
    data = gb200()
    group = data["gpu_nodes"][0]
    group["racks"] = [{"name": "a08"}, {"name": "a08"}, {"name": "a10", "trays": 19}, {"name": "a11", "trays": 1}]
    found = site_problems(data)
    assert any(p.startswith("site.gpu_nodes[0].racks[1].name: ") and "already racks[0]" in p for p in found), found
    assert any(p.startswith("site.gpu_nodes[0].racks[2].trays: ") and "has 18" in p for p in found), found
    assert any(p.startswith("site.gpu_nodes[0].racks: ") and "hold 56 trays" in p for p in found), found


def test_dgx_b200_sites_run_400g_rails_and_declare_their_ports() -> None:
    """The DGX B200's eight ConnectX-7 run at 400G; no document read here maps its ports, so the rails carry no
    RDMA device until the site declares them (and ib-write-bw, which needs them, is refused until it does)."""
    data = stack_data("h100pod")
    data["gpu_nodes"][0]["model"] = "dgx-b200"
    found = site_problems(data)
    assert_reported(found, {"site.workloads[3].kind": "declare its ports with each rdma"})
    data["gpu_nodes"][0]["ports"] = [{"label": f"osfp{i}", "rdma": f"mlx5_{i}"} for i in range(8)]
    plan = build_plan(parse_site(data))
    gpu = plan.by_role("gpu")
    assert {n.gpu.type for n in gpu if n.gpu} == {"b200"} and {n.gpu.driver_branch for n in gpu if n.gpu} == {580}
    assert {r.speed_gbps for n in gpu for r in n.rails} == {400}
    assert [r.rdma for r in gpu[0].rails] == [f"mlx5_{i}" for i in range(8)]


def test_dgx_b300_sites_run_800g_rails() -> None:
    data = stack_data("h100pod")
    data["gpu_nodes"][0]["model"] = "dgx-b300"
    # No document read here maps the B300's ports: the site declares them (from ibdev2netdev on one system).
    data["gpu_nodes"][0]["ports"] = [{"label": f"cx8-{i}", "rdma": f"mlx5_{i}", "gpu": i} for i in range(8)]
    # Nor gives its power: in the site's 30 kW racks it needs the site's figure (test_power.py).
    data["gpu_nodes"][0]["power_kw"] = 14.5
    for tier in ("leaves", "spines"):
        data["switches"][tier] |= {"ports": 64, "speed_gbps": 800}
    plan = build_plan(parse_site(data))
    gpu = plan.by_role("gpu")
    assert {r.speed_gbps for n in gpu for r in n.rails} == {800}
    assert {n.gpu.type for n in gpu if n.gpu} == {"b300"} and not plan.racks
    assert {c.speed_gbps for c in plan.cables if c.kind == "rail"} == {800}


# ------------------------------------------------------------------------------ NVLink domains in the health check
# The Fabric section as drivers print it on multi-node NVLink trays: a healthy registration with its clique
# (kubernetes-sigs/dra-driver-nvidia-gpu#626: State Completed, Status Success, CliqueId 2, ClusterUUID
# dc6e40c4-...), and one out of the domain (Azure/azhpc-images#506: Status Insufficient Resources, CliqueId 0, a zero
# ClusterUUID), edited into the real H200's `nvidia-smi -q` (R580), whose Fabric section has the same keys.
CLUSTER = "dc6e40c4-d722-4357-9ba6-5291dd461278"
DRA_626 = (
    ("State", "Completed", "Fabric"),
    ("Status", "Success", "Fabric"),
    ("CliqueId", "2", "Fabric"),
    ("ClusterUUID", CLUSTER, "Fabric"),
)


def tray(*edits: tuple[str, str, str], rack: str = "a08") -> Any:
    from aisite.health import parse
    from aisite.health.judge import Expected, Facts, judge
    from tests.test_health import _edited_h200

    return judge(Facts(memory=parse.smi_query(_edited_h200(*edits))), Expected("gb001", 1, True, (), rack=rack))


def test_a_trays_gpus_must_be_in_one_nvlink_domain() -> None:
    ok = tray(*DRA_626)
    assert ok.healthy and ok.clique == f"{CLUSTER}.2"
    # Registered but in no domain (the figures of Azure's case, with Success so the domain check is what speaks).
    zero = tray(
        *DRA_626[:2], ("CliqueId", "0", "Fabric"), ("ClusterUUID", "00000000-0000-0000-0000-000000000000", "Fabric")
    )
    assert [(p.check, p.message) for p in zero.problems] == [
        ("gpu-fabric", "in no NVLink domain (ClusterUUID 00000000-0000-0000-0000-000000000000, CliqueId 0)")
    ]
    assert zero.clique == ""
    # Azure's case as printed: its status already says it, once.
    azure = tray(*DRA_626[:1], ("Status", "Insufficient Resources", "Fabric"), ("CliqueId", "0", "Fabric"))
    assert [p.message for p in azure.problems] == ["fabric registration failed: Insufficient Resources"]
    # A DGX (no rack) is not asked for a clique.
    assert tray(*DRA_626, rack="").clique == ""


def test_two_cliques_on_one_tray_are_a_problem() -> None:
    from aisite.health.judge import Expected, Facts, judge
    from aisite.health.parse import GpuMemoryState

    gpus = [
        GpuMemoryState(f"0000:0{i}:00.0", fabric_state="Completed", fabric_status="Success", fabric_cluster=CLUSTER)
        for i in range(4)
    ]
    for i, g in enumerate(gpus):
        g.fabric_clique = 2 if i < 3 else 7
    h = judge(Facts(memory=gpus), Expected("gb001", 4, True, (), rack="a08"))
    assert [(p.subject, p.message) for p in h.problems] == [
        ("node", f"its GPUs are in 2 NVLink cliques: ['{CLUSTER}.2', '{CLUSTER}.7']")
    ]


def test_the_site_names_a_tray_in_another_clique_than_its_rack() -> None:
    from aisite.health.judge import NodeHealth
    from aisite.health.site import from_status, rack_domains

    plan = build_plan(load_site("gb200"))
    rack = plan.racks[0]
    results = {t: NodeHealth(t, clique=f"{CLUSTER}.2") for t in rack.trays}
    results[rack.trays[5]].clique = f"{CLUSTER}.9"
    assert rack_domains(plan, results) == {}
    bad = {n: [p.message for p in h.problems] for n, h in results.items() if h.problems}
    assert bad == {rack.trays[5]: [f"in NVLink clique {CLUSTER}.9; 17 of rack a08's trays are in {CLUSTER}.2"]}
    # A rack split evenly has no partition of its own: the rack's fabric is at fault, every tray carries it.
    even = {t: NodeHealth(t, clique=f"{CLUSTER}.{2 if i % 2 else 3}") for i, t in enumerate(rack.trays)}
    faults = rack_domains(plan, even)
    why = f"NVLink fabric: its trays split evenly between cliques {CLUSTER}.2 and {CLUSTER}.3"
    assert faults == {"a08": (list(rack.trays), why)}
    assert all([(p.subject, p.message) for p in h.problems] == [("rack a08", why)] for h in even.values())
    # Two trays alone naming two cliques (the rest naming none) are a tie of a minority: not the rack's word.
    quiet = {t: NodeHealth(t) for t in rack.trays}
    quiet[rack.trays[0]].clique, quiet[rack.trays[1]].clique = f"{CLUSTER}.2", f"{CLUSTER}.3"
    assert rack_domains(plan, quiet) == {}
    # The clique is a node's word: anything but "<uuid>.<id>" makes its whole status unreadable.
    status = {"node": "gb001", "problems": [], "clique": "$(reboot).2"}
    assert from_status("gb001", status).problems[0].check == "status"
    assert from_status("gb001", status | {"clique": f"{CLUSTER}.2"}).clique == f"{CLUSTER}.2"


def _fabric_failure(tray: str) -> Any:
    from aisite.health.judge import NodeHealth, Problem

    return NodeHealth(tray, [Problem("gpu-fabric", "0000:0A:00.0", "fabric registration In Progress")])


def _statuses(plan: Any, failing: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every node's status.json: clean and in one clique, but `failing`, which report a fabric problem."""
    out: dict[str, Any] = {n.name: {"node": n.name, "problems": [], "clique": f"{CLUSTER}.2"} for n in plan.nodes}
    for t in failing:
        p = _fabric_failure(t).problems[0]
        out[t] = {"node": t, "problems": [{"check": p.check, "subject": p.subject, "message": p.message}]}
    return out


def test_two_lying_trays_are_two_trays_not_their_rack(tmp_path: Path) -> None:
    """The reproducer of issue 64: two trays of rack a08 each report a `gpu-fabric` problem. Before, that took
    all 18 trays (72 GPUs) out, past the node cap (7) and the site's budget (36 GPUs). Two of 18 are a minority:
    the two trays are quarantined as nodes, the rest of the rack stays in service."""
    from aisite.health.site import run_pass

    plan = build_plan(load_site("gb200"))
    a08 = plan.racks[0]
    liars = (a08.trays[0], a08.trays[3])
    hp = run_pass(plan, _statuses(plan, liars), tmp_path / "health", tmp_path / "members.json")
    assert sorted(n for n, r in hp.state.items() if r.quarantined) == sorted(liars)
    assert all(not hp.state[t].rack for t in liars)
    assert {a.node: a.kind for a in hp.actions} == dict.fromkeys(liars, "quarantine")
    # Nine of 18 (half) are still a minority.
    hp = run_pass(plan, _statuses(plan, a08.trays[:9]), tmp_path / "half", tmp_path / "half.json")
    assert not any(r.rack for r in hp.state.values()) and hp.limit == 7
    assert sum(r.quarantined for r in hp.state.values()) == 7  # the node cap, tray by tray


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 3),
    st.lists(st.tuples(st.integers(0, 17), st.booleans(), st.sampled_from(["", "2", "3", "9"])), max_size=9),
    st.sampled_from(["", "2"]),
)
def test_lying_trays_short_of_a_majority_never_take_their_rack_out(
    rack_index: int, lies: list[tuple[int, bool, str]], honest: str
) -> None:
    """Up to nine trays of one rack lie (a fabric problem, any clique or none) while the rest report clean, all in
    one clique or none: no minority speaks for the rack. Only liars reporting a problem are decided, one by one,
    never more than the node cap, always within the site's budget."""
    from aisite.health.quarantine import cap, decide
    from aisite.health.site import from_status, rack_domains
    from aisite.members.budget import site_budget

    plan = _GB200
    rack = plan.racks[rack_index]
    records = _statuses(plan)
    for n in plan.nodes:
        records[n.name]["clique"] = f"{CLUSTER}.{honest}" if honest else ""
    liars = {rack.trays[i]: (problem, clique) for i, problem, clique in lies}
    for tray, (problem, clique) in liars.items():
        records[tray] = _statuses(plan, (tray,) if problem else ())[tray] | {
            "clique": f"{CLUSTER}.{clique}" if clique else ""
        }
    results = {name: from_status(name, doc) for name, doc in records.items()}
    assert rack_domains(plan, results) == {}
    assert plan.health is not None
    limit = cap(len(plan.nodes), plan.health.max_quarantined_fraction, plan.health.max_quarantined)
    budget = site_budget(plan)
    state, _ = decide({}, results, limit, 3, "t0", budget=budget, racks={}, rack_limit=1)
    out = {n for n, r in state.items() if r.quarantined}
    assert out <= set(liars) and len(out) <= limit and budget.problem(out) is None
    assert not any(r.rack for r in state.values())


_GB200 = build_plan(load_site("gb200"))


def test_a_rack_whose_fabric_fails_goes_out_whole_only_within_the_cap_and_the_budget(tmp_path: Path) -> None:
    """Ten of a08's 18 trays report fabric problems: its NVLink fabric is at fault. With the example's defaults
    (node cap 7, budget 36 GPUs) the rack is held whole, each tray saying why. With a cap and a budget that hold a
    rack, all 18 go out together, counted in both: a lone tray elsewhere then waits for the budget, a second
    faulted rack is held by the racks' cap of one; a08 comes back after recover_after (3) clean checks, a09 then
    goes out. A node cap of 0 holds a rack too."""
    from aisite.health.judge import NodeHealth
    from aisite.health.site import confirm_applied, run_pass

    plan = build_plan(load_site("gb200"))
    a08, a09, a10 = plan.racks[0], plan.racks[1], plan.racks[2]
    assert plan.health is not None and plan.health.max_quarantined_racks == 1
    broken = a08.trays[:10]
    hp = run_pass(plan, _statuses(plan, broken), tmp_path / "defaults", tmp_path / "defaults.json")
    assert not any(r.quarantined for r in hp.state.values())
    held = {a.node: a.reason for a in hp.actions if a.kind == "held"}
    assert sorted(held) == sorted(a08.trays), held
    assert held[a08.trays[12]].startswith("its 18 tray(s) would make 18 quarantined nodes, over the cap of 7: rack a08")

    data = gb200()
    data["health"] = {"max_quarantined": 20}
    data["maintenance"] = {"max_unavailable_gpus": 72}
    roomy = build_plan(parse_site(data))
    folder, members = tmp_path / "health", tmp_path / "members.json"
    hp = run_pass(roomy, _statuses(roomy, (*broken, a10.trays[1])), folder, members)
    quarantined = sorted(n for n, r in hp.state.items() if r.quarantined)
    assert quarantined == sorted(a08.trays), quarantined
    assert all(hp.state[t].rack == "a08" and hp.state[t].reason == "gpu-fabric" for t in a08.trays)
    (lone,) = [a for a in hp.actions if a.node == a10.trays[1]]
    assert lone.kind == "held" and "site's disruption budget: 76 GPUs out of service, over" in lone.reason, lone
    first = next(a for a in hp.actions if a.node == a08.trays[15])
    assert first.kind == "quarantine" and first.reason.startswith("rack a08: NVLink fabric: 10 of its 18 trays"), first
    assert 'aisite_health_rack_quarantined{rack="a08"} 18.0' in Path(hp.files["metrics"]).read_text()
    # A second rack's fabric fails while a08 is out: held whole, the cap of one rack reached.
    hp = run_pass(roomy, _statuses(roomy, (*broken, *a09.trays[:10])), folder, members)
    held = {a.node: a.reason for a in hp.actions if a.kind == "held"}
    assert sorted(held) == sorted(a09.trays) and not any(hp.state[t].quarantined for t in a09.trays)
    assert held[a09.trays[0]].startswith("cap of 1 quarantined rack(s) reached: rack a09: NVLink fabric"), held
    assert all(hp.state[t].quarantined for t in a08.trays)  # still failing: still out
    # a08's fabric repaired: its trays are released after recover_after (3) clean checks; until the cluster has
    # taken the release they are still out, so a09 waits on the budget; then a09 goes out.
    for _ in range(3):
        hp = run_pass(roomy, _statuses(roomy, a09.trays[:10]), folder, members)
    released = sorted(a.node for a in hp.actions if a.kind == "release")
    assert released == sorted(a08.trays), released
    held = {a.reason for a in hp.actions if a.kind == "held"}
    assert len(held) == 1 and held.pop().startswith("site's disruption budget: 144 GPUs out of service"), held
    confirm_applied(folder, released, members, "2026-12-07T00:00:00+00:00")
    hp = run_pass(roomy, _statuses(roomy, a09.trays[:10]), folder, members)
    assert all(hp.state[t].quarantined and hp.state[t].rack == "a09" for t in a09.trays)
    # A node cap of 0 (never quarantine) holds a rack too.
    data["health"] = {"max_quarantined": 0}
    off = build_plan(parse_site(data))
    hp = run_pass(off, _statuses(off, broken), tmp_path / "off", tmp_path / "off.json")
    assert not any(r.quarantined for r in hp.state.values())
    assert {a.kind for a in hp.actions} == {"held"} and all("quarantine is off" in a.reason for a in hp.actions)
    assert len(hp.actions) == 18 and isinstance(hp.results[a08.trays[1]], NodeHealth)


IMEX = Path(__file__).parent / "fixtures" / "health"


def test_the_host_imex_domain_is_read_from_nvidia_imex_ctl() -> None:
    """`nvidia-imex-ctl -N` of 18 GB200 trays (AWS's published example, tests/fixtures/health/README.md): every
    member READY, all connected, the domain UP; then the edited copy with member 5 unreachable and the domain
    DEGRADED, read from member 0 and from member 5; then no tool at all."""
    from aisite.health.judge import Expected, Facts, judge
    from aisite.health.parse import imex_domain

    up = imex_domain((IMEX / "nvidia-imex-ctl-N-gb200-18-aws.txt").read_text())
    assert len(up.members) == 18 and up.state == "UP" and {m.state for m in up.members} == {"READY"}
    assert up.members[5].address == "172.31.50.44" and up.members[5].version == "570.172"
    assert sorted(up.connections) == list(range(18)) and all(r == ["C"] * 18 for r in up.connections.values())

    def verdict(domain: Any, address: str, error: str | None = None) -> list[tuple[str, str]]:
        h = judge(Facts(imex=domain, imex_error=error), Expected("gb001", 0, False, (), imex_address=address))
        assert "imex" in h.checked
        return [(p.subject, p.message) for p in h.problems]

    assert verdict(up, "172.31.50.44") == []
    down = imex_domain((IMEX / "nvidia-imex-ctl-N-node5-down-edited.txt").read_text())
    assert down.members[5].state == "UNAVAILABLE" and down.connections[5] == ["I"] * 18
    assert verdict(down, "172.31.48.81") == [
        ("172.31.48.81", "not connected to 172.31.50.44 (D)"),
        ("domain", "IMEX domain DEGRADED"),
    ]
    assert verdict(down, "172.31.50.44") == [
        ("172.31.50.44", "this tray's IMEX daemon is UNAVAILABLE"),
        ("domain", "IMEX domain DEGRADED"),
    ]
    # A member the domain does not list, and a line a hostile daemon might print, are not read as members.
    forged = imex_domain("Node #0   - $(reboot)    - READY    - Version: 570.172\nDomain State: UP\n")
    assert forged.members == [] and verdict(forged, "10.0.0.1") == [
        ("10.0.0.1", "not a member of the IMEX domain it reports")
    ]
    assert verdict(None, "10.0.0.1", "nvidia-imex-ctl is not installed") == [
        ("node", "nvidia-imex-ctl -N: nvidia-imex-ctl is not installed")
    ]
    # Where the host does not run IMEX (the DRA driver's pods do), nothing is asked of it.
    h = judge(Facts(), Expected("gb001", 0, False, ()))
    assert "imex" not in h.checked and h.healthy


def test_imex_runs_in_pods_beside_the_gpu_operator_and_on_the_hosts_without_it() -> None:
    plan = build_plan(load_site("gb200"))
    assert {r.imex for r in plan.racks} == {"pods"}
    data = gb200()
    data["kubernetes"]["addons"] = [a for a in data["kubernetes"]["addons"] if a != "gpu-operator"]
    data["kubernetes"]["gpu_allocation"] = "device-plugin"
    own = build_plan(parse_site(data))
    assert {r.imex for r in own.racks} == {"host"}
    tray = inventory(own)["all"]["children"][NODE_GROUPS["gpu"]]["hosts"][own.racks[0].trays[0]]
    assert tray["aisite_imex_runs"] == "host" and tray["aisite_imex_peers"] == list(own.racks[0].imex_peers)
