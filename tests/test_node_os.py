"""Each GPU group's OS and CPUs: x86 and Grace groups in one site (the mixed example), NVIDIA's repository per group,
adopted nodes (never reinstalled), and the OS each node is checked against."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from aisite.catalog import CUDA_REPO_ARCH, OS_RELEASES, SERVER_MODELS
from aisite.loader import load_site, parse_site
from aisite.plan import build_plan
from aisite.platform import jobs
from aisite.render.inventory import inventory
from tests.conftest import assert_reported, run_cli, site_problems, stack_data

ROOT = "https://developer.download.nvidia.com/compute/cuda/repos/"


def test_x86_and_grace_groups_share_one_site_each_with_its_own_repository_and_flavour() -> None:
    plan = build_plan(load_site("mixed"))
    by_group: dict[str, set[tuple[str, str, str]]] = {}
    for n in plan.nodes:
        if n.gpu:
            by_group.setdefault(n.group, set()).add((n.gpu.repository, n.os.machine, n.os.install))
    assert by_group == {
        "gb200": {(ROOT + "ubuntu2404/sbsa/", "aarch64", "adopt")},
        "dgx": {(ROOT + "ubuntu2404/x86_64/", "x86_64", "adopt")},
    }
    # What the nvidia role reads (aisite_node.gpu.repository) and the preflight holds the node to (aisite_node.os).
    hosts = inventory(plan)["all"]["children"]["gpu_nodes"]["hosts"]
    assert hosts["gb001"]["aisite_node"]["gpu"]["repository"] == ROOT + "ubuntu2404/sbsa/"
    assert hosts["dgx01"]["aisite_node"]["os"] == {
        "name": "dgx-os-7",
        "distribution": "Ubuntu",
        "codename": "noble",
        "arch": "amd64",
        "machine": "x86_64",
        "dgx": True,
        "install": "adopt",
    }
    # Nothing of an adopted group is installed by the boot server (the site has none; a plan with one lists no
    # adopted group either: below).
    assert plan.provisioning is None
    # A job of one type lands on that type's nodes alone (its workers' node selector) and asks for their rails
    # only: the trays' four, the DGX's eight.
    rails = {}
    for w in plan.workloads:
        worker = next(o for o in jobs(plan)[f"workloads/{w.name}.yaml"] if o["kind"] == "MPIJob")
        spec = worker["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
        assert spec["nodeSelector"] == {"aisite.io/gpu-type": w.gpu_type}
        limits = spec["containers"][0]["resources"]["limits"]
        rails[w.gpu_type] = sorted(k for k in limits if k.startswith("rdma/"))
    assert rails == {"gb200": [f"rdma/rail{r}" for r in range(4)], "h100": [f"rdma/rail{r}" for r in range(8)]}


def test_images_say_which_platforms_a_mirror_must_hold() -> None:
    r = run_cli("images", "mixed", "--json")
    assert r.returncode == 0, r.stderr
    images = {i["image"]: i["platforms"] for i in json.loads(r.stdout)["images"]}
    both = ["linux/amd64", "linux/arm64"]
    nccl = next(i for i in images if "nccl-tests" in i)
    assert images[nccl] == both  # the trays' and the DGX's jobs
    assert images["ghcr.io/kube-vip/kube-vip:v1.0.0"] == ["linux/amd64"]  # the control plane's own
    assert images["nvcr.io/nvidia/gpu-operator:v26.3.3"] == both
    one = json.loads(run_cli("images", "h100pod", "--json").stdout)["images"]
    assert {tuple(i["platforms"]) for i in one} == {("linux/amd64",)}
    text = run_cli("images", "mixed").stdout
    assert "platforms" in text and "platforms" not in run_cli("images", "h100pod").stdout


@pytest.mark.parametrize(("os_name", "model"), list(itertools.product(OS_RELEASES, SERVER_MODELS)))
def test_every_os_and_model_gets_its_repository_or_a_reason(os_name: str, model: str) -> None:
    """Every OS a group may declare on every catalog model: NVIDIA's directory for that OS and those CPUs, or the
    site is refused because NVIDIA serves no such directory."""
    data = stack_data("mixed")
    data["gpu_nodes"] = [g for g in data["gpu_nodes"] if g["name"] == "dgx"]
    group = data["gpu_nodes"][0]
    group["model"] = model
    group["install"] = {"method": "adopt", "os": os_name}
    tray = SERVER_MODELS[model]
    if tray.rack_trays:
        group["count"] = tray.rack_trays
    data["workloads"] = []
    data["kubernetes"]["tenants"] = [{"name": "llm", "gpu_quota": 8}]
    release = OS_RELEASES[os_name]
    if tray.cpu_arch not in release.cuda_arches:
        found = site_problems(data)
        assert any(p.startswith("site.gpu_nodes[0].install.os: ") and "no debian12" in p for p in found), found
        return
    plan = build_plan(parse_site(data))
    nodes = [n for n in plan.nodes if n.gpu]
    assert {n.gpu.repository for n in nodes if n.gpu} == {
        f"{ROOT}{release.cuda_distro}/{CUDA_REPO_ARCH[tray.cpu_arch]}/"
    }
    assert {(n.os.distribution, n.os.codename, n.os.dgx) for n in nodes} == {
        (release.distribution, release.codename, release.dgx)
    }


def test_the_repository_is_named_at_its_root() -> None:
    data = stack_data("mixed")
    data["nvidia"] = {"repository": ROOT + "debian12/x86_64/"}
    found = site_problems(data)
    assert found[0] == (
        "site.nvidia.repository: names one x86_64 directory (debian12/x86_64/): give the repository's root "
        f"({ROOT}); aisite adds each GPU group's <distro>/<arch>/"
    ), found
    data["nvidia"] = {"repository": "https://mirror.mixed.example.org/cuda"}
    plan = build_plan(parse_site(data))
    assert {n.gpu.repository for n in plan.nodes if n.gpu} == {
        "https://mirror.mixed.example.org/cuda/ubuntu2404/sbsa/",
        "https://mirror.mixed.example.org/cuda/ubuntu2404/x86_64/",
    }


def _with_provisioning(data: dict[str, Any]) -> dict[str, Any]:
    data["provisioning"] = {"boot_server": "10.40.2.250"}
    return data


def test_how_a_group_is_installed_is_checked_all_at_once() -> None:
    data = _with_provisioning(stack_data("mixed"))
    grace, dgx = data["gpu_nodes"]
    grace["install"] = {"method": "adopt", "os": "debian-12", "disk": "/dev/sda"}
    dgx["install"] = {"method": "network", "os": "dgx-os-7"}
    data["control_plane"]["install"] = {"os": "ubuntu-24.04"}
    found = site_problems(data)
    assert_reported(
        found,
        {
            "site.gpu_nodes[0].install.os": "debian-12: NVIDIA's CUDA repository has no debian12 packages for sbsa",
            "site.gpu_nodes[0].install.disk": "an adopted node is never reinstalled",
            "site.gpu_nodes[1].install.os": "dgx-os-7 is installed from NVIDIA's own image, not by aisite",
            "site.control_plane.install.os": "aisite's network install builds Debian 12 only",
        },
    )


def test_an_adopted_group_is_never_installed_by_the_boot_server() -> None:
    data = _with_provisioning(stack_data("mixed"))
    data["control_plane"]["install"] = {}  # Debian 12 over the network
    plan = build_plan(parse_site(data))
    assert plan.provisioning is not None
    assert [p.name for p in plan.provisioning.profiles] == ["control-plane"]
    assert {t.node for t in plan.provisioning.targets} == {"cp01", "cp02", "cp03"}
    installed = {n.name for n in plan.nodes if n.os.install == "network"}
    assert installed == {"cp01", "cp02", "cp03"}


def test_a_job_across_trays_takes_whole_trays_so_no_two_compute_domains_share_one() -> None:
    data = stack_data("mixed")
    rack = data["workloads"][0]
    rack.update(nodes=2, gpus_per_node=2)
    found = site_problems(data)
    assert found == [
        "site.workloads[0].gpus_per_node: 2 of a gb200 tray's 4: a job across trays gets a ComputeDomain, and a "
        "node holds one ComputeDomain at a time, so such a job takes whole trays (give 4, or run it on one tray: "
        "nodes: 1)"
    ], found
    rack.update(nodes=1, gpus_per_node=2)  # one tray: no ComputeDomain
    parse_site(data)
    data["workloads"][1].update(nodes=2, gpus_per_node=4)  # DGX H100: no racks, no ComputeDomain
    parse_site(data)
