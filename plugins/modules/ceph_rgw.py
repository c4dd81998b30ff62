# Runs on a Ceph node with the admin key: RGW's storage classes (its zone's placement) and the tenants' S3 users
# with their quotas, converged with radosgw-admin (argument lists, never a shell). A user's keys, which
# radosgw-admin prints, are read by nothing here and never returned.
from __future__ import annotations

import re
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.aisite.site.plugins.module_utils.json_cli import JsonCli
from ansible_collections.aisite.site.plugins.module_utils.plan_fields import PlanError, integer, matching

DOCUMENTATION = r"""
---
module: ceph_rgw
short_description: Converge RGW's storage classes and the tenants' S3 users to the plan's (aisite.plan.ceph)
description:
  - Each storage class of the plan is added to the zone group's placement target and given its data pool in the
    zone (C(radosgw-admin zonegroup placement add), C(zone placement add) or C(modify)); RGW reads its zone when it
    starts, so RV(restart) says when its daemons must restart.
  - Each user is created when missing, inside its RGW tenant (C(--tenant), RGW multitenancy, a bucket namespace
    per tenant, so no other tenant can create or reach its buckets), its keys made by RGW, kept in Ceph, never read
    or returned here; its user quota is set and enabled. Users the plan does not name are never touched.
  - In check mode nothing is changed; what would be is reported.
options:
  storage_classes:
    description: "[class, pool] pairs (S3 storage class names: STANDARD, STANDARD_IA, ...)."
    type: list
    elements: list
    default: []
  tenants:
    description: The plan's Ceph tenants (aisite.plan.ceph.CephTenantPlan as data); each with an C(s3_user) gets that
      user in RGW tenant C(s3_tenant), its quota C(s3_gb) GB of 10^9 bytes (0 for none).
    type: list
    elements: dict
    default: []
  zone:
    description: The zone (RGW's default when none is configured).
    type: str
    default: default
  zonegroup:
    description: The zone group.
    type: str
    default: default
  placement:
    description: The placement target.
    type: str
    default: default-placement
extends_documentation_fragment: [aisite.site.ceph]
author: aisite
"""

EXAMPLES = r"""
- name: Ceph | Storage classes and S3 users
  aisite.site.ceph_rgw:
    storage_classes: [[STANDARD, rgw-hot], [STANDARD_IA, rgw-ec]]
    tenants: [{s3_user: tenant-team-a, s3_tenant: tenant_team_a, s3_gb: 100}]
"""

RETURN = r"""
actions:
  description: The radosgw-admin commands run (or, in check mode, that would be), as text.
  type: list
  returned: always
restart:
  description: Whether RGW must restart to read a changed zone.
  type: bool
  returned: always
"""

CLASS = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
# An RGW tenant: letters, digits and '_' alone (radosgw-admin refuses others); the plan's is its tenant's
# Kubernetes namespace with '_' for '-' (aisite.plan.ceph.rgw_tenant).
TENANT = re.compile(r"^[A-Za-z0-9_]{1,63}$")


def _obj(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"radosgw-admin reported {what} as {type(value).__name__}, not an object")
    return value


def zone_classes(zone: Any, placement: str) -> dict[str, str]:
    """`radosgw-admin zone get`: the placement target's storage class -> data pool."""
    for p in _obj(zone, "the zone").get("placement_pools") or []:
        if _obj(p, "a placement").get("key") == placement:
            classes = _obj(_obj(p.get("val"), "a placement's pools").get("storage_classes") or {}, "storage classes")
            return {str(k): str(_obj(v, k).get("data_pool", "")) for k, v in classes.items()}
    return {}


def zonegroup_classes(zonegroup: Any, placement: str) -> list[str]:
    """`radosgw-admin zonegroup get`: the placement target's storage classes."""
    for t in _obj(zonegroup, "the zone group").get("placement_targets") or []:
        if _obj(t, "a placement target").get("name") == placement:
            return [str(c) for c in t.get("storage_classes") or []]
    return []


def user_quota(info: Any) -> tuple[bool, int]:
    """`radosgw-admin user info`: the user quota's (enabled, max_size in bytes)."""
    q = _obj(_obj(info, "the user").get("user_quota"), "the user quota")
    size = q.get("max_size")
    if not isinstance(size, int) or isinstance(size, bool):
        raise ValueError("radosgw-admin reported a user quota's max_size that is not an integer")
    return bool(q.get("enabled")), size


def converge(r: JsonCli, classes: list[tuple[str, str]], users: list[tuple[str, str, int]]) -> bool:
    p = r.module.params
    restart = False
    if classes:
        zg, zone, placement = p["zonegroup"], p["zone"], p["placement"]
        have_zg = zonegroup_classes(r.read("zonegroup", "get", f"--rgw-zonegroup={zg}"), placement)
        have_zone = zone_classes(r.read("zone", "get", f"--rgw-zone={zone}"), placement)
        for cls, pool in classes:
            if cls not in have_zg:
                r.do(
                    "zonegroup",
                    "placement",
                    "add",
                    f"--rgw-zonegroup={zg}",
                    f"--placement-id={placement}",
                    f"--storage-class={cls}",
                )
            if have_zone.get(cls) != pool:
                verb = "modify" if cls in have_zone else "add"
                r.do(
                    "zone",
                    "placement",
                    verb,
                    f"--rgw-zone={zone}",
                    f"--placement-id={placement}",
                    f"--storage-class={cls}",
                    f"--data-pool={pool}",
                )
                restart = True
    for tenant, uid, quota in users:
        who = (f"--tenant={tenant}", f"--uid={uid}")
        info = r.read("user", "info", *who, missing_rc=22)  # EINVAL: no such user
        if info is None:
            r.do("user", "create", *who, f"--display-name={uid}")
            enabled, size = False, -1
        else:
            enabled, size = user_quota(info)
        # RGW keeps a quota in whole KiB, rounded up (16.2: 10^9 bytes reads back as 1000000512).
        if quota and size != -(-quota // 1024) * 1024:
            r.do("quota", "set", "--quota-scope=user", *who, f"--max-size={quota}")
        if bool(quota) != enabled:
            r.do("quota", "enable" if quota else "disable", "--quota-scope=user", *who)
    return restart


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "storage_classes": {"type": "list", "elements": "list", "default": []},
            "tenants": {"type": "list", "elements": "dict", "default": []},
            "zone": {"type": "str", "default": "default"},
            "zonegroup": {"type": "str", "default": "default"},
            "placement": {"type": "str", "default": "default-placement"},
            "cluster": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        for key in ("zone", "zonegroup", "placement"):
            matching(p[key], NAME, key, "a name")
        classes = []
        for pair in p["storage_classes"]:
            if len(pair) != 2:
                raise PlanError(f"storage class {pair!r} is not a [class, pool] pair")
            classes.append(
                (matching(pair[0], CLASS, "storage class", "a name"), matching(pair[1], NAME, "pool", "a name"))
            )
        users = []
        for t in p["tenants"]:
            if not t.get("s3_user"):
                continue
            gb = integer(t.get("s3_gb"), 0, 10**9, f"user {t.get('s3_user')!r}: s3_gb")
            uid = matching(t["s3_user"], NAME, "user", "a name")
            users.append((matching(t.get("s3_tenant"), TENANT, "RGW tenant", "a tenant name"), uid, gb * 10**9))
    except PlanError as e:
        module.fail_json(msg=str(e))
    r = JsonCli(module, "radosgw-admin", p["cluster"], ["--format", "json"])
    try:
        restart = converge(r, classes, users)
    except ValueError as e:
        module.fail_json(msg=str(e), actions=r.actions)
    module.exit_json(changed=bool(r.actions), actions=r.actions, restart=restart)


if __name__ == "__main__":
    main()
