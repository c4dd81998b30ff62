"""The S3 buckets module (aisite.site.ceph_s3_buckets): the plan's lifecycle rules as S3's, compared with what RGW
answers whatever order or form it gives them in, and plan fields outside the narrow types refused before RGW is
asked. The module's S3 calls run for real in the ceph role's molecule scenario (a rule's transition watched)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from tests.adhoc import load_module


def _module() -> ModuleType:
    return load_module("ceph_s3_buckets")


PLAN = [["ingest/", 30, "STANDARD_IA"], ["", 365, "GLACIER"]]
# As RGW 16.2 answers GetBucketLifecycleConfiguration for PLAN (botocore's parse), in another order.
RGW = [
    {
        "ID": "aisite-1",
        "Filter": {"Prefix": ""},
        "Status": "Enabled",
        "Transitions": [{"Days": 365, "StorageClass": "GLACIER"}],
    },
    {
        "ID": "aisite-0",
        "Filter": {"Prefix": "ingest/"},
        "Status": "Enabled",
        "Transitions": [{"Days": 30, "StorageClass": "STANDARD_IA"}],
    },
]


def test_the_plans_rules_are_s3_rules_and_rgws_answer_reads_as_the_same() -> None:
    m = _module()
    want = m.rules(PLAN)
    assert want[0] == {
        "ID": "aisite-0",
        "Filter": {"Prefix": "ingest/"},
        "Status": "Enabled",
        "Transitions": [{"Days": 30, "StorageClass": "STANDARD_IA"}],
    }
    assert m.same(RGW, want)
    legacy = [{k: v for k, v in r.items() if k != "Filter"} | {"Prefix": r["Filter"]["Prefix"]} for r in RGW]
    assert m.same(legacy, want), "a rule's prefix given outside Filter (S3's older form) is the same rule"
    later = [RGW[0], RGW[1] | {"Transitions": [{"Days": 31, "StorageClass": "STANDARD_IA"}]}]
    assert not m.same(later, want)
    assert not m.same([RGW[0], RGW[1] | {"Status": "Disabled"}], want)
    assert not m.same(RGW[:1], want) and not m.same([], want)
    assert m.same([], m.rules([]))


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (["x/", 0, "STANDARD_IA"], "days must be an integer from 1 to 36500"),
        (["x/", True, "STANDARD_IA"], "days must be an integer"),
        (["x/ $(reboot)", 1, "STANDARD_IA"], "is not one aisite writes"),
        (["x/", 1, "standard"], "storage class 'standard'"),
        (["x/", 1], "is not a [prefix, days, class] triple"),
    ],
)
def test_a_hostile_rule_is_refused(rule: list[Any], message: str) -> None:
    m = _module()
    with pytest.raises(m.PlanError) as exc:
        m.rules([rule])
    assert message in str(exc.value)


@pytest.mark.parametrize("name", ["Team-a", "ab", "a" * 64, "-team", "team_a", "team a", "../x"])
def test_a_bucket_name_s3_refuses_is_refused(name: str) -> None:
    m = _module()
    with pytest.raises(m.PlanError):
        m.matching(name, m.BUCKET, "bucket")
    assert m.matching("tenant-team-a", m.BUCKET, "bucket") == "tenant-team-a"


@pytest.mark.parametrize(
    "answer",
    [
        [],
        {"keys": []},
        {"keys": [{"access_key": "A"}]},
        {"keys": "AKIA"},
        {"keys": [{"access_key": 1, "secret_key": 2}]},
    ],
)
def test_a_user_without_a_key_pair_is_an_error_that_names_no_key(answer: Any) -> None:
    with pytest.raises(ValueError, match="user tenant-team-a has no S3 key") as exc:
        _module().user_keys(answer, "tenant-team-a")
    assert "AKIA" not in str(exc.value)


@pytest.mark.parametrize("rule", ["rule", {"Transitions": "30"}])
def test_an_answer_of_another_shape_is_an_error_not_a_guess(rule: Any) -> None:
    with pytest.raises(ValueError, match="RGW returned"):
        _module().same([rule], [])


class _Reads:
    """radosgw-admin's answers by command, as JsonCli.read gives them (None: the thing does not exist)."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers, self.asked, self.actions = answers, [], []  # type: ignore[var-annotated]

    def read(self, *args: str, missing_rc: int | None = None) -> Any:
        self.asked.append(" ".join(args))
        return self.answers.get(args[0] + " " + args[1])


def test_a_bucket_another_user_owns_is_never_used() -> None:
    """Issue 64: a tenant with S3 keys could pre-create another's bucket. Buckets now live in each tenant's RGW
    tenant; one that exists is used only when the tenant's own user owns it (radosgw-admin bucket stats), else the
    module fails naming both, before any S3 request."""
    m = _module()
    user = {"keys": [{"access_key": "AKIA", "secret_key": "s"}]}
    r = _Reads({"user info": user, "bucket stats": {"owner": "tenant_team_b$tenant-team-b", "bucket": "x"}})
    with pytest.raises(ValueError) as exc:
        m.converge(None, r, [("tenant-team-a", "tenant_team_a", "tenant-team-a")], [])
    assert str(exc.value) == (
        "bucket tenant_team_a/tenant-team-a is owned by tenant_team_b$tenant-team-b, not the tenant's user "
        "tenant_team_a$tenant-team-a"
    )
    assert r.asked == [
        "user info --tenant=tenant_team_a --uid=tenant-team-a",
        "bucket stats --bucket=tenant_team_a/tenant-team-a",
    ]
    assert "AKIA" not in str(exc.value)
    for stats in ({"owner": ""}, [], {"owner": 5}):
        with pytest.raises(ValueError, match="no owner"):
            m.bucket_owner(stats, "x")
