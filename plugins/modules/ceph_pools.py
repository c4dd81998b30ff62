# Runs on a Ceph monitor host: converges the plan's pools, their CRUSH rules and erasure-code profiles and the file
# system with the ceph CLI (argument lists, never a shell). What the cluster reports is read as JSON of the narrow
# shapes below; a name from the plan is checked against Ceph's own pool-name rules before it reaches a command.
from __future__ import annotations

import re
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.aisite.site.plugins.module_utils.json_cli import JsonCli
from ansible_collections.aisite.site.plugins.module_utils.plan_fields import PlanError, integer, matching

DOCUMENTATION = r"""
---
module: ceph_pools
short_description: Converge a Ceph cluster's pools and file system to the plan's (aisite.plan.ceph)
description:
  - Creates each pool that is missing (replicated on a CRUSH rule C(aisite-DOMAIN-CLASS); erasure-coded from a
    profile C(aisite-POOL) with its k, m, failure domain and device class), then sets what differs of its size,
    min_size, pg_num, CRUSH rule (replicated), application, and C(allow_ec_overwrites) (an erasure-coded CephFS or
    RBD data pool). The PG autoscaler is off on these pools, since the plan sizes them (in C(warn) mode Ceph
    holds the cluster at HEALTH_WARN, POOL_TOO_FEW_PGS, wherever its own estimate differs from the plan's).
  - A pool whose kind or erasure-code profile differs from the plan's cannot be changed in place (Ceph keeps a
    pool's coding for life), so that is an error naming it, and nothing else is changed on that run.
  - A pool on a device class no OSD has yet fails with Ceph's word (its rule has nothing to choose from), so the
    OSDs come first.
  - Creates the file system when missing (metadata pool, first data pool) and adds the layouts' data pools.
  - Pools the plan does not name are reported in RV(foreign), never removed.
  - In check mode nothing is changed; what would be is reported.
options:
  pools:
    description: The plan's pools (aisite.plan.ceph.PoolPlan as data); a pool with application C(mgr) is the
      manager's own, made by it when it first starts (named per release) and converged once it exists.
    type: list
    elements: dict
    required: true
  filesystem:
    description: C(name), C(metadata_pool), C(data_pool), C(data_pools) (the layouts' further pools), or nothing.
    type: dict
  ceph:
    description: The ceph CLI.
    type: str
    default: ceph
extends_documentation_fragment: [aisite.site.ceph]
author: aisite
"""

EXAMPLES = r"""
- name: Ceph | Pools and file system
  aisite.site.ceph_pools:
    pools:
      - {name: data, application: cephfs, kind: erasure, width: 3, min_size: 2, k: 2, m: 1,
         failure_domain: host, device_class: all, pg_num: 32}
"""

RETURN = r"""
actions:
  description: The ceph commands run (or, in check mode, that would be), as text.
  type: list
  returned: always
foreign:
  description: Pools the cluster has that the plan does not name.
  type: list
  returned: always
"""

# Ceph refuses an empty pool name and ones with '/' and '@'; the plan's are narrower (aisite.model.CephPool).
POOL = re.compile(r"^\.?[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
APPLICATIONS = frozenset({"cephfs", "rgw", "rbd", "mgr"})
CLASSES = frozenset({"nvme", "ssd", "hdd", "all"})
DOMAINS = frozenset({"host", "osd"})


def _int(d: dict[str, Any], key: str, low: int, high: int, none: bool = False) -> int | None:
    v = d.get(key)
    return None if v is None and none else integer(v, low, high, f"pool {d.get('name')!r}: {key}")


def check_pool(d: dict[str, Any]) -> dict[str, Any]:
    """A plan pool, its fields narrowed to what reaches a ceph command."""
    name = matching(d.get("name"), POOL, "pool name", "a Ceph pool name")
    for key, allowed in (
        ("application", APPLICATIONS),
        ("kind", {"replicated", "erasure"}),
        ("failure_domain", DOMAINS),
        ("device_class", CLASSES),
    ):
        if d.get(key) not in allowed:
            raise PlanError(f"pool {name!r}: {key} must be one of {', '.join(sorted(allowed))}, not {d.get(key)!r}")
    out = {k: d[k] for k in ("name", "application", "kind", "failure_domain", "device_class")}
    out["width"] = _int(d, "width", 1, 32)
    out["min_size"] = _int(d, "min_size", 1, 32)
    out["pg_num"] = _int(d, "pg_num", 1, 1 << 16)
    erasure = d["kind"] == "erasure"
    out["k"] = _int(d, "k", 1, 32, none=not erasure)
    out["m"] = _int(d, "m", 1, 32, none=not erasure)
    return out


def rule_name(pool: dict[str, Any]) -> str:
    return f"aisite-{pool['failure_domain']}-{pool['device_class']}"


def profile(pool: dict[str, Any]) -> dict[str, str]:
    """The erasure-code profile as `ceph osd erasure-code-profile get -f json` reports it (the keys set here)."""
    out = {"k": str(pool["k"]), "m": str(pool["m"]), "crush-failure-domain": pool["failure_domain"]}
    if pool["device_class"] != "all":
        out["crush-device-class"] = pool["device_class"]
    return out


def _expect(value: Any, kind: type, what: str) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"ceph reported {what} as {type(value).__name__}, not {kind.__name__}")
    return value


def parse_pools(doc: Any) -> dict[str, dict[str, Any]]:
    """`ceph osd pool ls detail -f json`: per pool the fields compared, each type-checked."""
    out: dict[str, dict[str, Any]] = {}
    for p in _expect(doc, list, "the pool list"):
        _expect(p, dict, "a pool")
        name = _expect(p.get("pool_name"), str, "a pool's name")
        apps = _expect(p.get("application_metadata", {}), dict, f"{name}'s applications")
        flags = _expect(p.get("flags_names", ""), str, f"{name}'s flags")
        out[name] = {
            "erasure": _expect(p.get("erasure_code_profile", ""), str, f"{name}'s profile"),
            "size": _expect(p.get("size"), int, f"{name}'s size"),
            "min_size": _expect(p.get("min_size"), int, f"{name}'s min_size"),
            # While Ceph moves a pool to a new count, the target is what was asked.
            "pg_num": _expect(p.get("pg_num_target", p.get("pg_num")), int, f"{name}'s pg_num"),
            "crush_rule": _expect(p.get("crush_rule"), int, f"{name}'s crush rule"),
            "autoscale": _expect(p.get("pg_autoscale_mode", ""), str, f"{name}'s autoscale mode"),
            "applications": sorted(str(a) for a in apps),
            "ec_overwrites": "ec_overwrites" in flags.split(","),
        }
    return out


def parse_rules(doc: Any) -> dict[str, int]:
    """`ceph osd crush rule dump -f json`: rule name -> id."""
    out = {}
    for r in _expect(doc, list, "the rule list"):
        _expect(r, dict, "a rule")
        out[_expect(r.get("rule_name"), str, "a rule's name")] = _expect(r.get("rule_id"), int, "a rule's id")
    return out


def parse_filesystems(doc: Any) -> dict[str, dict[str, Any]]:
    """`ceph fs ls -f json`: name -> metadata pool and data pools."""
    out = {}
    for f in _expect(doc, list, "the file system list"):
        _expect(f, dict, "a file system")
        name = _expect(f.get("name"), str, "a file system's name")
        data = [_expect(p, str, f"{name}'s data pool") for p in _expect(f.get("data_pools"), list, "data pools")]
        out[name] = {"metadata_pool": _expect(f.get("metadata_pool"), str, f"{name}'s metadata pool"), "data": data}
    return out


def converge(c: JsonCli, pools: list[dict[str, Any]], fs: dict[str, Any] | None) -> list[str]:
    have = parse_pools(c.read("osd", "pool", "ls", "detail"))
    # Refuse before changing anything: a pool whose coding differs cannot be converged.
    for p in pools:
        cur = have.get(p["name"])
        if cur is None:
            continue
        if (p["kind"] == "erasure") != bool(cur["erasure"]):
            kind = "erasure-coded" if cur["erasure"] else "replicated"
            raise PlanError(
                f"pool {p['name']!r} is {kind} in the cluster, {p['kind']} in the plan: Ceph cannot change it"
            )
        if p["kind"] == "erasure":
            # A profile with no device class reports it empty: compared too, so a class set by hand is seen.
            want = {"crush-device-class": ""} | profile(p)
            got = _expect(c.read("osd", "erasure-code-profile", "get", cur["erasure"]), dict, "a profile")
            got = {k: str(got.get(k, "")) for k in want}
            if got != want:
                raise PlanError(f"pool {p['name']!r}: erasure coding {got} in the cluster, {want} in the plan")
    rules = parse_rules(c.read("osd", "crush", "rule", "dump"))
    for p in pools:
        if p["kind"] == "replicated" and rule_name(p) not in rules:
            cls = [] if p["device_class"] == "all" else [p["device_class"]]
            c.do("osd", "crush", "rule", "create-replicated", rule_name(p), "default", p["failure_domain"], *cls)
            rules[rule_name(p)] = -1  # created (or would be): its id is read back below
    if any(v < 0 for v in rules.values()) and not c.module.check_mode:
        rules = parse_rules(c.read("osd", "crush", "rule", "dump"))
    for p in pools:
        name, cur = p["name"], have.get(p["name"])
        if cur is None and p["application"] == "mgr":
            continue  # the manager makes its pool when it first starts (with Ceph's defaults, converged below)
        if cur is None:
            if p["kind"] == "erasure":
                prof = f"aisite-{name}"
                c.do(
                    "osd", "erasure-code-profile", "set", prof, *[f"{k}={v}" for k, v in profile(p).items()], "--force"
                )
                c.do("osd", "pool", "create", name, str(p["pg_num"]), str(p["pg_num"]), "erasure", prof)
            else:
                c.do("osd", "pool", "create", name, str(p["pg_num"]), str(p["pg_num"]), "replicated", rule_name(p))
            cur = {
                "size": -1,
                "min_size": -1,
                "pg_num": p["pg_num"],
                "crush_rule": rules.get(rule_name(p), -1),
                "autoscale": "",
                "applications": [],
                "ec_overwrites": False,
            }
        sets: list[tuple[str, str]] = []
        if p["kind"] == "replicated":
            if cur["crush_rule"] != rules.get(rule_name(p)):
                sets.append(("crush_rule", rule_name(p)))
            if cur["size"] != p["width"]:
                sets.append(("size", str(p["width"])))
        if cur["min_size"] != p["min_size"]:
            sets.append(("min_size", str(p["min_size"])))
        if cur["autoscale"] != "off":
            sets.append(("pg_autoscale_mode", "off"))
        if cur["pg_num"] != p["pg_num"]:
            sets.append(("pg_num", str(p["pg_num"])))
        if p["kind"] == "erasure" and p["application"] in ("cephfs", "rbd") and not cur["ec_overwrites"]:
            sets.append(("allow_ec_overwrites", "true"))
        for key, value in sets:
            c.do("osd", "pool", "set", name, key, value, *(["--yes-i-really-mean-it"] if key == "size" else []))
        if p["application"] != "mgr" and p["application"] not in cur["applications"]:
            c.do("osd", "pool", "application", "enable", name, p["application"])
    if fs:
        filesystems = parse_filesystems(c.read("fs", "ls"))
        cur_fs = filesystems.get(fs["name"])
        if cur_fs is None:
            c.do("fs", "new", fs["name"], fs["metadata_pool"], fs["data_pool"])
            cur_fs = {"metadata_pool": fs["metadata_pool"], "data": [fs["data_pool"]]}
        elif cur_fs["metadata_pool"] != fs["metadata_pool"] or cur_fs["data"][:1] != [fs["data_pool"]]:
            raise PlanError(
                f"file system {fs['name']!r} has metadata pool {cur_fs['metadata_pool']!r} and first data pool "
                f"{cur_fs['data'][:1]} in the cluster, {fs['metadata_pool']!r} and {fs['data_pool']!r} in the plan"
            )
        for pool in fs.get("data_pools") or []:
            if pool not in cur_fs["data"]:
                c.do("fs", "add_data_pool", fs["name"], pool)
    return sorted(set(have) - {p["name"] for p in pools})


def check_filesystem(fs: Any, pools: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not fs:
        return None
    names = {p["name"] for p in pools}
    out = {"name": fs.get("name"), "metadata_pool": fs.get("metadata_pool"), "data_pool": fs.get("data_pool")}
    extra = fs.get("data_pools") or []
    for key, value in (*out.items(), *(("data_pools", v) for v in extra)):
        matching(value, POOL, f"file system {key}", "a name")
        if key != "name" and value not in names:
            raise PlanError(f"file system {key} {value!r} is not one of the pools")
    return out | {"data_pools": list(extra)}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "pools": {"type": "list", "elements": "dict", "required": True},
            "filesystem": {"type": "dict"},
            "cluster": {"type": "list", "elements": "str", "default": []},
            "ceph": {"type": "str", "default": "ceph"},
        },
        supports_check_mode=True,
    )
    try:
        pools = [check_pool(p) for p in module.params["pools"]]
        fs = check_filesystem(module.params["filesystem"], pools)
    except PlanError as e:
        module.fail_json(msg=str(e))
    c = JsonCli(module, module.params["ceph"], module.params["cluster"], ["-f", "json"])
    try:
        foreign = converge(c, pools, fs)
    except (PlanError, ValueError) as e:
        module.fail_json(msg=str(e), actions=c.actions)
    module.exit_json(changed=bool(c.actions), actions=c.actions, foreign=foreign)


if __name__ == "__main__":
    main()
