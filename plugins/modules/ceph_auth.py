# Runs on a Ceph node with the admin key: the cephx clients the plan names for users outside the cluster (tenants,
# ceph-csi, the GPU nodes), each with the plan's capabilities. Ceph makes each key; this module reads only an
# entity's capabilities (the key it reads with them stays in this process) and never returns a key.
from __future__ import annotations

import re
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.aisite.site.plugins.module_utils.json_cli import JsonCli
from ansible_collections.aisite.site.plugins.module_utils.plan_fields import PlanError, matching

DOCUMENTATION = r"""
---
module: ceph_auth
short_description: Converge the plan's cephx clients and their capabilities (aisite.plan.ceph.CephIdentity)
description:
  - Each identity is created when missing (C(ceph auth get-or-create); its key made by Ceph, never read out) and its
    capabilities set to the plan's when they differ (C(ceph auth caps), which replaces them all).
  - Entities the plan does not name are never touched.
  - In check mode nothing is changed; what would be is reported.
options:
  identities:
    description: The plan's identities (name, caps as [daemon type, capability] pairs).
    type: list
    elements: dict
    default: []
extends_documentation_fragment: [aisite.site.ceph]
author: aisite
"""

EXAMPLES = r"""
- name: Ceph | Clients for the tenants, ceph-csi and the GPU nodes
  aisite.site.ceph_auth:
    identities:
      - {name: client.gpu-nodes, caps: [[mds, allow r fsname=cephfs path=/datasets], [mon, allow r fsname=cephfs],
         [osd, allow r tag cephfs data=cephfs]]}
"""

RETURN = r"""
actions:
  description: The commands run (or, in check mode, that would be), as text; no key is in them.
  type: list
  returned: always
"""

NAME = re.compile(r"^client\.[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
DAEMONS = ("mds", "mgr", "mon", "osd")
# What the plan's capabilities are made of (profiles, allow, paths, pools, tags); a quote or a semicolon never is.
CAP = re.compile(r"^[A-Za-z0-9 =,./_*-]{1,4096}$")


def wanted(identities: list[dict[str, Any]]) -> list[tuple[str, dict[str, str]]]:
    out = []
    for i in identities:
        name = matching(i.get("name"), NAME, "identity", "a client name")
        caps: dict[str, str] = {}
        for pair in i.get("caps") or []:
            if not isinstance(pair, list | tuple) or len(pair) != 2 or pair[0] not in DAEMONS:
                raise PlanError(f"{name}: capability {pair!r} is not a [mds|mgr|mon|osd, capability] pair")
            if not isinstance(pair[1], str) or not CAP.match(pair[1]) or pair[0] in caps:
                raise PlanError(f"{name}: {pair[0]} capability {pair[1]!r} is not one aisite writes, or given twice")
            caps[pair[0]] = pair[1]
        out.append((name, caps))
    return out


def have_caps(answer: Any, name: str) -> dict[str, str]:
    """`ceph auth get NAME -f json`: the entity's capabilities (its key is not looked at)."""
    if not isinstance(answer, list) or len(answer) != 1 or not isinstance(answer[0], dict):
        raise ValueError(f"ceph auth get {name} did not answer one entity")
    caps = answer[0].get("caps")
    if not isinstance(caps, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in caps.items()):
        raise ValueError(f"ceph auth get {name}: capabilities that are not text")
    return dict(caps)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "identities": {"type": "list", "elements": "dict", "default": []},
            "cluster": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    try:
        want = wanted(module.params["identities"])
    except PlanError as e:
        module.fail_json(msg=str(e))
    r = JsonCli(module, "ceph", module.params["cluster"], ["--format", "json"])
    try:
        for name, caps in want:
            args = [a for daemon, cap in sorted(caps.items()) for a in (daemon, cap)]
            answer = r.read("auth", "get", name, missing_rc=2)  # ENOENT: no such entity
            if answer is None:
                r.do("auth", "get-or-create", name, *args, "-o", "/dev/null")  # the new keyring, unread
            elif have_caps(answer, name) != caps:
                r.do("auth", "caps", name, *args)
    except ValueError as e:
        module.fail_json(msg=str(e), actions=r.actions)
    module.exit_json(changed=bool(r.actions), actions=r.actions)


if __name__ == "__main__":
    main()
