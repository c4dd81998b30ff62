# Runs on a Ceph node with the admin key and botocore: each tenant's S3 bucket, made by its own user (so the tenant
# owns it), and the site's lifecycle rules on it, through RGW's S3 API. The user's keys are read from radosgw-admin
# into this process to sign its requests; they are never logged, returned or written anywhere.
from __future__ import annotations

import re
from typing import Any

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.aisite.site.plugins.module_utils.json_cli import JsonCli
from ansible_collections.aisite.site.plugins.module_utils.plan_fields import PlanError, integer, matching

try:
    import botocore.session
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    HAS_BOTOCORE = True
except ImportError:  # said by fail_json below
    HAS_BOTOCORE = False

DOCUMENTATION = r"""
---
module: ceph_s3_buckets
short_description: Converge the tenants' S3 buckets and the site's lifecycle rules on them (aisite.plan.ceph)
description:
  - Each tenant with an S3 bucket in the plan gets it, created through RGW's S3 API with that tenant's own user's
    keys (read from C(radosgw-admin user info), never returned), so the tenant owns the bucket; it lives in the
    tenant's RGW tenant, a bucket namespace no other tenant's user reaches.
  - A bucket that exists is used only when its owner is the tenant's user (C(radosgw-admin bucket stats)); one
    owned by anyone else fails the module, naming both, and nothing is done to it.
  - Each bucket's lifecycle configuration is the plan's rules, one per rule (ID C(aisite-N)); the site owns the
    lifecycle of the buckets it makes, so a configuration that differs is replaced and one the plan has no rules for
    is removed.
  - In check mode nothing is changed; what would be is reported.
options:
  endpoint:
    description: RGW's S3 endpoint (http://ADDRESS:PORT).
    type: str
    required: true
  tenants:
    description: The plan's Ceph tenants (aisite.plan.ceph.CephTenantPlan as data); each with an C(s3_bucket) gets
      that bucket, owned by its C(s3_user).
    type: list
    elements: dict
    default: []
  lifecycle:
    description: "[prefix, days, storage class] rules: objects under the prefix move to the class after that many
      days."
    type: list
    elements: list
    default: []
requirements: [botocore]
extends_documentation_fragment: [aisite.site.ceph]
author: aisite
"""

EXAMPLES = r"""
- name: Ceph | The tenants' buckets and their lifecycle
  aisite.site.ceph_s3_buckets:
    endpoint: http://10.250.2.11:7480
    tenants: [{s3_user: tenant-team-a, s3_tenant: tenant_team_a, s3_bucket: tenant-team-a}]
    lifecycle: [[datasets/, 30, STANDARD_IA]]
"""

RETURN = r"""
actions:
  description: What was done (or, in check mode, would be), as text.
  type: list
  returned: always
"""

CLASS = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
USER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
TENANT = re.compile(r"^[A-Za-z0-9_]{1,63}$")  # RGW's tenant names (aisite.plan.ceph.rgw_tenant)
# S3's bucket naming rules (AWS, Bucket naming rules; RGW with rgw_relaxed_s3_bucket_names off): 3-63 characters of
# lowercase letters, digits, dots and hyphens, a letter or digit at each end.
BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
PREFIX = re.compile(r"^[A-Za-z0-9!_.*'()/-]{0,256}$")
ENDPOINT = re.compile(r"^https?://[A-Za-z0-9.:\[\]-]{1,255}$")


def rules(lifecycle: list[Any]) -> list[dict[str, Any]]:
    """The plan's rules as S3's LifecycleConfiguration rules, in the plan's order."""
    out = []
    for i, rule in enumerate(lifecycle):
        if not isinstance(rule, list | tuple) or len(rule) != 3:
            raise PlanError(f"lifecycle rule {rule!r} is not a [prefix, days, class] triple")
        prefix, days, cls = rule
        out.append(
            {
                "ID": f"aisite-{i}",
                "Filter": {"Prefix": matching(prefix, PREFIX, "prefix")},
                "Status": "Enabled",
                "Transitions": [
                    {
                        "Days": integer(days, 1, 36500, f"lifecycle rule {i}: days"),
                        "StorageClass": matching(cls, CLASS, "storage class"),
                    }
                ],
            }
        )
    return out


def _shape(rule: Any) -> tuple[str, str, str, tuple[tuple[int, str], ...]]:
    """A rule as RGW returns it, reduced to what the plan sets (a prefix may come in Filter or at the top)."""
    if not isinstance(rule, dict):
        raise ValueError("RGW returned a lifecycle rule that is not an object")
    flt = rule.get("Filter") if isinstance(rule.get("Filter"), dict) else {}
    prefix = flt.get("Prefix", rule.get("Prefix", ""))
    transitions = rule.get("Transitions") or []
    if not isinstance(transitions, list):
        raise ValueError("RGW returned lifecycle transitions that are not a list")
    return (
        str(rule.get("ID", "")),
        str(prefix or ""),
        str(rule.get("Status", "")),
        tuple(
            (t["Days"] if isinstance(t.get("Days"), int) else -1, str(t.get("StorageClass", "")))
            for t in transitions
            if isinstance(t, dict)
        ),
    )


def same(have: list[Any], want: list[dict[str, Any]]) -> bool:
    """Whether the bucket's rules are the plan's (order aside)."""
    return sorted(map(_shape, have)) == sorted(map(_shape, want))


def user_keys(info: Any, uid: str) -> tuple[str, str]:
    """`radosgw-admin user info`: the user's first S3 key pair."""
    keys = info.get("keys") if isinstance(info, dict) else None
    for k in keys if isinstance(keys, list) else []:
        if isinstance(k, dict) and isinstance(k.get("access_key"), str) and isinstance(k.get("secret_key"), str):
            return k["access_key"], k["secret_key"]
    raise ValueError(f"user {uid} has no S3 key (radosgw-admin user info)")


def _code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def bucket_owner(stats: Any, name: str) -> str:
    """`radosgw-admin bucket stats`: the bucket's owner (TENANT$USER for a user of a tenant)."""
    owner = stats.get("owner") if isinstance(stats, dict) else None
    if not isinstance(owner, str) or not owner:
        raise ValueError(f"radosgw-admin bucket stats {name}: no owner")
    return owner


def converge(
    module: AnsibleModule, r: JsonCli, buckets: list[tuple[str, str, str]], want: list[dict[str, Any]]
) -> None:
    session = None
    for bucket, tenant, uid in buckets:
        who = (f"--tenant={tenant}", f"--uid={uid}")
        info = r.read("user", "info", *who, missing_rc=22)
        if info is None:
            raise ValueError(f"bucket {bucket}: its user {tenant}${uid} does not exist (made by aisite.site.ceph_rgw)")
        # Before the bucket is used: whoever made it owns it, and only the tenant's own user may.
        # RGW's ERR_NO_SUCH_BUCKET (2002) is radosgw-admin's exit status modulo 256: 210.
        stats = r.read("bucket", "stats", f"--bucket={tenant}/{bucket}", missing_rc=210)
        if stats is not None and (owner := bucket_owner(stats, bucket)) != f"{tenant}${uid}":
            raise ValueError(f"bucket {tenant}/{bucket} is owned by {owner}, not the tenant's user {tenant}${uid}")
        access, secret = user_keys(info, uid)
        session = session or botocore.session.get_session()
        s3 = session.create_client(
            "s3",
            region_name="default",  # RGW's default zone group; with path-style addressing any name signs
            endpoint_url=module.params["endpoint"],
            aws_access_key_id=access,
            aws_secret_access_key=secret,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}, connect_timeout=10),
        )
        try:
            s3.head_bucket(Bucket=bucket)
        except ClientError as e:
            if _code(e) not in ("404", "NoSuchBucket"):
                raise
            r.actions.append(f"create bucket {bucket} as {uid}")
            if not module.check_mode:
                s3.create_bucket(Bucket=bucket)
        try:
            have = s3.get_bucket_lifecycle_configuration(Bucket=bucket).get("Rules", [])
        except ClientError as e:
            if _code(e) not in ("NoSuchLifecycleConfiguration", "NoSuchBucket"):
                raise
            have = []
        if same(have, want):
            continue
        if want:
            r.actions.append(f"set lifecycle of {bucket}: " + ", ".join(f"{w['ID']} {_shape(w)[1:]}" for w in want))
            if not module.check_mode:
                s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": want})
        else:
            r.actions.append(f"remove lifecycle of {bucket}")
            if not module.check_mode:
                s3.delete_bucket_lifecycle(Bucket=bucket)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "endpoint": {"type": "str", "required": True},
            "tenants": {"type": "list", "elements": "dict", "default": []},
            "lifecycle": {"type": "list", "elements": "list", "default": []},
            "cluster": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    if not HAS_BOTOCORE:
        module.fail_json(msg=missing_required_lib("botocore"))
    p = module.params
    try:
        matching(p["endpoint"], ENDPOINT, "endpoint")
        want = rules(p["lifecycle"])
        buckets = [
            (
                matching(t["s3_bucket"], BUCKET, "bucket"),
                matching(t.get("s3_tenant"), TENANT, "RGW tenant"),
                matching(t.get("s3_user"), USER, "user"),
            )
            for t in p["tenants"]
            if t.get("s3_bucket")
        ]
    except PlanError as e:
        module.fail_json(msg=str(e))
    r = JsonCli(module, "radosgw-admin", p["cluster"], ["--format", "json"])
    try:
        converge(module, r, buckets, want)
    except (ValueError, ClientError, BotoCoreError) as e:
        # botocore's messages name the operation and RGW's error code, never the keys.
        module.fail_json(msg=str(e), actions=r.actions)
    module.exit_json(changed=bool(r.actions), actions=r.actions)


if __name__ == "__main__":
    main()
