"""`aisite diff` shows what a reviewer approves: Kubernetes objects field by field (as `kubectl diff` would), a Helm
release's values per key, an object added or removed whole; never a digest."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from aisite.diff import markdown, site_diff
from aisite.loader import parse_site
from aisite.plan import Plan, build_plan
from tests.conftest import stack_data


def _plans(edit: Any) -> tuple[Plan, Plan]:
    data = stack_data("lab")
    old = build_plan(parse_site(copy.deepcopy(data)))
    edit(data)
    return old, build_plan(parse_site(data))


def test_a_quota_change_shows_each_objects_field_with_its_values() -> None:
    old, new = _plans(lambda d: d["kubernetes"]["tenants"][1].update(gpu_quota=1))
    changes = {c.key: (c.old, c.new) for c in site_diff(old, new, []).sections["kubernetes"]}
    queue = "ClusterQueue team-b .spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"
    assert changes[queue] == ("0", "1")
    assert changes["ResourceQuota tenant-team-b/gpu-quota .spec.hard.requests.nvidia.com/gpu"] == ("0", "1")
    text = markdown(site_diff(old, new, []), "t")
    assert f"- `{queue}`: 0 -> 1" in text
    assert not re.search(r"\b[0-9a-f]{12}\b", text), "a digest where a value should be"


def test_a_helm_value_shows_per_key_and_a_new_object_whole() -> None:
    def edit(d: dict[str, Any]) -> None:
        d["kubernetes"]["mig_strategy"] = "mixed"
        d["kubernetes"]["tenants"].append({"name": "team-c", "gpu_quota": 0, "groups": ["team-c"]})

    old, new = _plans(edit)
    changes = {c.key: c for c in site_diff(old, new, []).sections["kubernetes"]}
    mig = changes["HelmRelease gpu-operator/gpu-operator .values.mig.strategy"]
    assert (mig.old, mig.new) == ("single", "mixed")
    added = changes["Namespace tenant-team-c"]
    assert added.kind == "added" and json.loads(added.new or "")["metadata"]["name"] == "tenant-team-c"
    assert all(c.kind == "changed" for k, c in changes.items() if " ." in k)
