"""The RGW module (aisite.site.ceph_rgw): radosgw-admin's JSON read narrowly, from outputs recorded on the ceph
role's molecule cluster (Debian's radosgw 16.2.15; the user's keys redacted), and plan fields outside the narrow
types refused before radosgw-admin is asked. The module's changes run for real in that scenario."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.adhoc import load_module, run_module

FIXTURES = Path(__file__).parent / "fixtures" / "ceph"


def _module() -> ModuleType:
    return load_module("ceph_rgw")


def _load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def test_recorded_outputs_read_as_the_zone_the_zone_group_and_the_quota_say() -> None:
    m = _module()
    assert m.zone_classes(_load("zone-get.json"), "default-placement") == {
        "STANDARD": "rgw-hot",
        "STANDARD_IA": "rgw-ec",
    }
    assert m.zone_classes(_load("zone-get.json"), "other") == {}
    assert m.zonegroup_classes(_load("zonegroup-get.json"), "default-placement") == ["STANDARD", "STANDARD_IA"]
    assert m.user_quota(_load("user-info.json")) == (True, 1000000512)  # 10^9 bytes asked, kept in whole KiB


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"placement_pools": [{"key": "default-placement", "val": []}]},
        {"placement_pools": [{"key": "default-placement", "val": {"storage_classes": {"STANDARD": "pool"}}}]},
    ],
)
def test_a_zone_of_another_shape_is_an_error_not_a_guess(doc: Any) -> None:
    with pytest.raises(ValueError, match="radosgw-admin reported"):
        _module().zone_classes(doc, "default-placement")


def test_a_quota_that_is_not_an_integer_is_an_error() -> None:
    user = _load("user-info.json")
    user["user_quota"]["max_size"] = "1e9"
    with pytest.raises(ValueError, match="max_size"):
        _module().user_quota(user)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"storage_classes": [["standard", "p"]]}, "storage class 'standard' is not a name"),
        ({"storage_classes": [["STANDARD"]]}, "is not a [class, pool] pair"),
        ({"storage_classes": [["STANDARD", "a b"]]}, "pool 'a b' is not a name"),
        ({"tenants": [{"s3_user": "t;rm", "s3_gb": 1, "s3_tenant": "t"}]}, "user 't;rm' is not a name"),
        ({"tenants": [{"s3_user": "t", "s3_gb": -1, "s3_tenant": "t"}]}, "s3_gb must be an integer"),
        # RGW takes letters, digits and '_' alone in a tenant's name; every user lives in one.
        ({"tenants": [{"s3_user": "t", "s3_gb": 1, "s3_tenant": "tenant-a"}]}, "RGW tenant 'tenant-a' is not"),
        ({"tenants": [{"s3_user": "t", "s3_gb": 1}]}, "RGW tenant None is not"),
        ({"zone": "../x"}, "zone '../x' is not a name"),
    ],
)
def test_plan_fields_outside_the_narrow_types_are_refused_before_radosgw_admin(
    args: dict[str, Any], message: str
) -> None:
    r = run_module("aisite.site.ceph_rgw", args)
    assert r.get("failed") and message in r["msg"], r
