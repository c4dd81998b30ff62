"""`aisite images` and the image mirror: the catalog of the charts' images is what Helm renders (no image the
render references is missing, no entry is stale), every image of every shipped stack comes from a registry the
mirror covers, and containerd's hosts.toml sends those pulls to the mirror's path."""

from __future__ import annotations

import copy
import json
import tomllib

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from aisite.loader import load_site, parse_site
from aisite.plan import build_plan
from aisite.plan.kubernetes import UPSTREAM_REGISTRIES, registry_host
from aisite.platform.images import CHART_IMAGES, image_refs, site_images
from aisite.playbooks import ROLES
from tests.conftest import STACKS, run_cli, stack_data
from tests.test_helm import RELEASES, rendered, site_renders

MIRROR = "https://mirror.lab.aisite.internal:5000"


@pytest.mark.parametrize(("stack", "release"), RELEASES)
def test_every_image_a_release_renders_is_in_the_catalog(stack: str, release: str) -> None:
    c, _, objs = rendered(stack, release)
    # A chart of CRDs alone (kserve-crd) has no image, and the catalog says so.
    assert image_refs(objs) or CHART_IMAGES[c.chart] == (), f"{release}: no image found in the render"
    assert sorted(image_refs(objs) - set(CHART_IMAGES[c.chart])) == []


def test_no_catalog_entry_is_stale() -> None:
    """Every image the catalog lists for a chart is referenced by its render at some shipped stack."""
    seen: dict[str, set[str]] = {}
    for stack in STACKS:
        for c, _, objs, _ in site_renders(stack).values():
            if objs is not None:
                seen.setdefault(c.chart, set()).update(image_refs(objs))
    if not seen:
        pytest.skip("no chart could be rendered here (../shared/helm-charts absent)")
    for chart, images in seen.items():
        assert set(CHART_IMAGES[chart]) == images, chart


def test_image_refs_reads_every_form() -> None:
    objs = [
        {"spec": {"containers": [{"image": "quay.io/a/b:v1", "args": ["--reloader=quay.io/a/c:v2"]}]}},
        {"spec": {"devicePlugin": {"repository": "nvcr.io/nvidia", "image": "k8s-device-plugin", "version": "v0.19"}}},
    ]
    assert image_refs(objs) == {"quay.io/a/b:v1", "quay.io/a/c:v2", "nvcr.io/nvidia/k8s-device-plugin:v0.19"}
    assert registry_host("nginx:1") == registry_host("library/nginx:1") == "docker.io"
    assert registry_host("localhost:5000/x:1") == "localhost:5000"


@pytest.mark.parametrize("stack", STACKS)
def test_an_image_mirror_reaches_every_image_of_the_site(stack: str) -> None:
    data = copy.deepcopy(stack_data(stack))
    data["kubernetes"]["image_mirror"] = MIRROR
    plan = build_plan(parse_site(data, stack))
    found = site_images(plan)
    assert len(found.images) > 10
    mirrored = {r.host: r for r in plan.kubernetes.registries if r.mirrors}
    assert set(found.registries()) <= set(mirrored), sorted(set(found.registries()) - set(mirrored))
    for host in found.registries():
        r = mirrored[host]
        if host in {x["host"] for x in data["kubernetes"].get("containerd", {}).get("registries", [])}:
            continue  # the site's own entry for that registry stands
        assert r.mirrors == (f"{MIRROR}/v2/{host}",) and r.override_path
    # Without the setting nothing is mirrored that the site did not declare.
    bare = build_plan(load_site(stack))
    assert not [r for r in bare.kubernetes.registries if r.override_path]
    assert set(UPSTREAM_REGISTRIES) >= {h for h in found.registries() if "aisite" not in h and "example" not in h}


def test_containerd_sends_a_registrys_pulls_to_the_mirror_path() -> None:
    data = copy.deepcopy(stack_data("lab"))
    data["kubernetes"]["image_mirror"] = MIRROR
    plan = build_plan(parse_site(data, "lab"))
    item = next(r for r in plan.kubernetes.registries if r.host == "nvcr.io")
    template = (ROLES / "containerd" / "templates" / "hosts.toml.j2").read_text()
    variables = {
        "item": {"host": item.host, "mirrors": list(item.mirrors), "ca": item.ca, "override_path": item.override_path},
        "containerd_certs_dir": "/etc/containerd/certs.d",
    }
    doc = tomllib.loads(Templar(loader=DataLoader(), variables=variables).template(trust_as_template(template)))
    assert doc["server"] == "https://nvcr.io"
    assert doc["host"] == {f"{MIRROR}/v2/nvcr.io": {"capabilities": ["pull", "resolve"], "override_path": True}}


def test_images_command_lists_them_for_a_program_and_a_person() -> None:
    r = run_cli("images", "lab", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    images = [i["image"] for i in doc["images"]]
    assert images == sorted(images) and "registry.k8s.io/kube-apiserver:v1.35.6" in images
    assert doc["registries"]["nvcr.io"] is False  # the lab sets no mirror
    assert any(n.startswith("kubeadm: etcd, CoreDNS and pause") for n in doc["not_enumerated"])
    human = run_cli("images", "lab")
    assert human.returncode == 0 and "nvcr.io/nvidia/k8s-device-plugin:v0.19.3" in human.stdout
    assert run_cli("images", "no-such-stack").returncode == 2


@pytest.mark.parametrize("stack", STACKS)
def test_aisite_images_holds_everything_the_site_renders(stack: str) -> None:
    """The charts as Helm renders them and the project's own objects and jobs: all in `aisite images`."""
    from aisite.platform import jobs, objects

    plan = build_plan(load_site(stack))
    listed = set(site_images(plan).images)
    for _, _, objs, _ in site_renders(stack).values():
        assert image_refs(objs or []) <= listed
    assert image_refs([o for objs in (objects(plan) | jobs(plan)).values() for o in objs]) <= listed
