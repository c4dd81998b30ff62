"""The Ansible inventory of a plan: groups by role, every host's variables from the plan.

No task needs facts gathered from other hosts: what a host must know of the site (every name and address for
/etc/hosts, its rails, its leaf) is written here, which keeps a play linear in the number of hosts.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

import orjson
import yaml

from aisite.drivers.switches import SWITCH_OS
from aisite.fields import secret_env
from aisite.paths import STATE, kubeconfig_path, lab_ssh_dir, provision_dir, pull_wheels_dir, site_dir
from aisite.plan import FABRIC_ROLES, Node, Plan, Switch, plain

# The site repository's .aisite/ as a play sees it: aisite passes the repository to every run (aisite.deploy, the
# puller); a playbook run by hand from the tool's checkout finds it above playbooks/ (the checkout is the collection).
SITE_DIR_VAR = "{{ aisite_site_dir | default(playbook_dir ~ '/..') }}/.aisite"

NODE_GROUPS = {"control-plane": "control_plane", "gpu": "gpu_nodes", "storage": "storage_nodes"}
# The boot server's inventory name (`aisite provision` configures it; the lab runs it as a container).
BOOT_SERVER = "boot-server"
# The fabric's switches by role (the plays select them as leaf:spine:super_spine).
SWITCH_GROUPS = {role: role.replace("-", "_") for role in FABRIC_ROLES}
# Management and out-of-band switches aisite configures (their VLANs and ports), in the fabric layer.
ACCESS_SWITCHES = "access_switches"
LAB_LIFECYCLE_DAY_S = 10


class Template(str):
    """One of the project's own Ansible templates in the inventory (`{{ playbook_dir }}`...): written as a trusted
    template. Every other string in the inventory is site data and is written `!unsafe`, so Ansible never evaluates
    it, whatever it holds (ansible-core trusts inventory strings as templates otherwise)."""


def container_name(plan: Plan, host: str) -> str:
    """The lab container of a host; the lab creates it under this name."""
    return f"aisite-{plan.site}-{host}"


def _lab_ssh(plan: Plan) -> dict[str, Any]:
    """How Ansible reaches a lab's containers: as a real site's hosts, over SSH at their management addresses
    (pipelining and ControlPersist from ansible.cfg), with the lab's key and the host keys `lab up` collected."""
    ssh = lab_ssh_dir(plan.site)
    # Installed nodes (lab VMs) are known by the host keys their install recorded.
    known = (
        f"{ssh / 'known_hosts'} {provision_dir(plan.site) / 'known_hosts'}"
        if plan.provisioning
        else ssh / "known_hosts"
    )
    return {
        "ansible_connection": "ansible.builtin.ssh",
        "ansible_ssh_private_key_file": str(ssh / "id_ed25519"),
        "ansible_ssh_common_args": (
            f'-o UserKnownHostsFile="{known}" -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes'
        ),
    }


def _lab_site_vars(plan: Plan) -> dict[str, Any]:
    # The lab's containers reach the Debian archive only: kubeadm, kubelet and kubectl cannot be installed there,
    # so the kubernetes role writes everything else and reports the rest as skipped.
    return {
        "kubernetes_install": False,
        "kubernetes_install_skip_reason": (
            f"the lab reaches the Debian archive only, not {plan.kubernetes.package_repository}"
        ),
    }


def _lab_vars(plan: Plan) -> dict[str, Any]:
    # Nodes that pull layers get ansible-core's wheels from this machine (`lab up` fetched them).
    pulls = {"pull_wheels_src": str(pull_wheels_dir(plan.site))} if plan.pulled_layers else {}
    return _lab_ssh(plan) | _lab_site_vars(plan) | pulls


def _node_doc(node: Node) -> dict[str, Any]:
    """A node as its host layers read it. Its firmware baseline is its BMC's business (aisite.firmware, through a
    rollout): left out, so a baseline's change runs no host layer."""
    return {k: v for k, v in plain(node).items() if k != "firmware"}


def _node_vars(node: Node) -> dict[str, Any]:
    return {"ansible_host": node.management.address, "aisite_node": _node_doc(node)}


def _switch_vars(plan: Plan, sw: Switch) -> dict[str, Any]:
    out: dict[str, Any] = {"ansible_host": sw.management_address}
    driver = SWITCH_OS[sw.os]
    if plan.connection != "lab":
        # How Ansible reaches it on a real site (its driver's); the lab reaches its FRR switches as root over SSH.
        out |= driver.connection
    # What a rollout can do with it (playbooks/maintenance-switch.yml): its driver's word, not the OS's name.
    out["aisite_switch"] = plain(sw) | {"graceful_shutdown": driver.graceful_shutdown}
    return out


def _bmc_vars(node: Node) -> dict[str, Any]:
    # BMCs are driven from the controller, with the Python that runs Ansible (it has pyghmi).
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": Template("{{ ansible_playbook_python }}"),
        "aisite_bmc": plain(node.bmc) | {"node": node.name},
    }


def inventory(plan: Plan) -> dict[str, Any]:
    groups = (*NODE_GROUPS.values(), *SWITCH_GROUPS.values(), ACCESS_SWITCHES, "oob")
    children: dict[str, Any] = {g: {"hosts": {}} for g in groups}
    racks = {r.name: r for r in plan.racks}
    for node in plan.nodes:
        children[NODE_GROUPS[node.role]]["hosts"][node.name] = _node_vars(node)
        if node.rack is not None:  # its rack's IMEX domain (role nvidia): a change re-runs that rack's trays alone
            host = children[NODE_GROUPS[node.role]]["hosts"][node.name]
            host["aisite_imex_peers"] = list(racks[node.rack].imex_peers)
            host["aisite_imex_runs"] = racks[node.rack].imex
        children["oob"]["hosts"][f"{node.name}-bmc"] = _bmc_vars(node)
    for sw in plan.switches:
        group = SWITCH_GROUPS.get(sw.role)
        if group:
            children[group]["hosts"][sw.name] = _switch_vars(plan, sw)
        elif sw.vlans:  # a management or out-of-band switch aisite configures (not `generic`)
            children[ACCESS_SWITCHES]["hosts"][sw.name] = _switch_vars(plan, sw)
    if plan.gitops:
        # The reconciler's host and its settings, as a group of their own: a change to them is that host's alone.
        children["reconciler"] = {
            "hosts": {plan.gitops.reconciler_host: {}},
            "vars": {"aisite_gitops": plain(plan.gitops)},
        }
        if plan.gitops.pull_layers:
            # The nodes that converge themselves (every node: the pulled layers are host layers).
            children["pull"] = {
                "hosts": {node.name: {} for node in plan.nodes},
                "vars": {"aisite_gitops": plain(plan.gitops)},
            }
    if plan.ceph:
        # The Ceph cluster's nodes and its plan, as a group of their own: a change to it is theirs alone.
        children["ceph"] = {
            "hosts": {name: {} for name, _ in plan.ceph.addresses},  # every node the cluster has, in node order
            "vars": {"aisite_ceph": plain(plan.ceph)},
        }
        if plan.connection == "lab":
            # A lifecycle rule's day lasts 10 s in the lab (Ceph's rgw_lc_debug_interval), so the rehearsal
            # sees an S3 object reach its erasure-coded class.
            children["ceph"]["vars"]["ceph_rgw_lc_debug_interval_s"] = LAB_LIFECYCLE_DAY_S
        if plan.ceph.gpu_client:
            # The GPU nodes mount the data sets: they hold the client's view alone (aisite.plan.ceph.CephClientPlan).
            children["ceph_clients"] = {
                "hosts": {n.name: {} for n in plan.by_role("gpu")},
                "vars": {"aisite_ceph_client": plain(plan.ceph.gpu_client)},
            }
    if plan.provisioning:
        children["boot_server"] = {
            "hosts": {BOOT_SERVER: {"ansible_host": plan.provisioning.boot_server}},
            "vars": {"aisite_provisioning": plain(plan.provisioning)},
        }
    common = group_vars(plan) | (_lab_vars(plan) if plan.connection == "lab" else {})
    return {"all": {"vars": common, "children": children}}


def group_vars(plan: Plan) -> dict[str, Any]:
    return {
        "ansible_user": plan.ansible_user,
        "aisite_site": plan.site,
        "aisite_domain": plan.domain,
        "aisite_ntp_servers": list(plan.ntp_servers),
        "aisite_bmc_accounts": [dict(a) for a in plan.bmc_accounts],
        "aisite_dns_servers": list(plan.dns_servers),
        # Every host's name and management address, so /etc/hosts needs no cross-host facts.
        "aisite_hosts": [{"name": n.name, "fqdn": n.fqdn, "address": n.management.address} for n in plan.nodes],
        # Where the cluster layer fetches the admin kubeconfig and the platform play reads it: kubeconfig_path,
        # under the site repository aisite passes each run (aisite_site_dir), so the inventory stays the same on
        # every controller; a run without it (a checkout's own playbooks) finds the repository above them.
        "aisite_kubeconfig": Template(f"{SITE_DIR_VAR}/{kubeconfig_path(plan.site).relative_to(STATE)}"),
        # Where the bmc role saves each BMC's inventory (its default is relative to the playbooks, which an
        # installed package holds apart from the site).
        "bmc_inventory_dir": Template(f"{SITE_DIR_VAR}/{(site_dir(plan.site) / 'bmc').relative_to(STATE)}"),
        "aisite_secrets": {
            name: {"username": s["username"], "env": secret_env(name)} for name, s in plan.secrets.items()
        },
        "aisite_networks": plain(plan.networks),
        "roce_qos": plain(plan.roce),
        "aisite_admin_users": [plain(u) for u in plan.admin_users],
        "aisite_nfs_server": plan.nfs_server,
        "aisite_exports": [plain(e) for e in plan.exports],
        # What kubeadm, kube-vip, containerd and the CNI are given (aisite.plan.kubernetes).
        "aisite_kubernetes": plain(plan.kubernetes),
        "aisite_health": plain(plan.health),
        "k8s_tenants": [plain(t) for t in plan.tenants],
        "k8s_workloads": [plain(w) for w in plan.workloads],
    }


UNSAFE_TAG = "!unsafe"
_STR = "tag:yaml.org,2002:str"


class _InventoryLoader(yaml.SafeLoader):
    """Reads a rendered inventory back (tests, tools): `!unsafe` strings as plain strings."""


_InventoryLoader.add_constructor(
    UNSAFE_TAG,
    lambda loader, node: loader.construct_scalar(node),  # type: ignore[arg-type]
)


# Every JSON string that is a value (followed by a comma or the end of its line), never a key (followed by `:`).
_VALUE = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"(?=,?$)', re.M)
# What a YAML reader refuses as raw text (not printable) or reads as a line break inside a quoted scalar (NEL,
# LS, PS: folded to a space), written as \u escapes; JSON's own escapes cover < 0x20.
_UNPRINTABLE = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufeff\ufffe\uffff]")
# First characters of the scalars YAML 1.1 reads as something other than a string (bool, int, float, null,
# timestamp, merge, value): only those need the resolver.
_RESOLVABLE = frozenset("-+0123456789.yYnNtTfFoO~=<")
_RESOLVER = yaml.resolver.Resolver()


def _tagged(token: str, cache: dict[str, str], template: str) -> str:
    """A JSON string value as the inventory writes it: `!unsafe "..."` (data, never templated by Ansible), a
    project Template untagged, and a string YAML would read as another type when plain untagged (Ansible reads a
    `!unsafe` scalar as if it were plain: "on", "123" or "null" would stop being strings; they hold no template
    syntax)."""
    hit = cache.get(token)
    if hit is not None:
        return hit
    if token.startswith(template):
        out = '"' + token[len(template) :]
    else:
        text = json.loads(token) if "\\" in token else token[1:-1]
        plain = not text or text[0] in _RESOLVABLE
        if plain and _RESOLVER.resolve(yaml.ScalarNode, text, (True, False)) != _STR:  # type: ignore[no-untyped-call]
            out = token
        else:
            out = f"{UNSAFE_TAG} {token}"
    cache[token] = out
    return out


def inventory_text(inv: dict[str, Any], header: str = "Rendered by aisite from the plan; do not edit.") -> str:
    """An inventory as Ansible reads it: site strings are `!unsafe`, never templates.

    Written as JSON by orjson (a 32,768-GPU site's 58 MB in well under a second; PyYAML's representer took 20 s)
    with each string value then tagged: JSON with tags is YAML in flow style, which Ansible's YAML inventory reads
    as it reads block style."""
    # A Template passes through orjson as a marker no site string can hold (a fresh random one, after a NUL that
    # JSON escapes) + its text, so the tagging can tell the project's own templates from site data.
    mark = f"\x00{secrets.token_hex(16)}:"

    def passthrough(value: Any) -> Any:
        if isinstance(value, Template):
            return mark + value
        if isinstance(value, str):
            return str(value)
        raise TypeError(f"cannot write {type(value).__name__} to an inventory")

    body = orjson.dumps(inv, default=passthrough, option=orjson.OPT_INDENT_2 | orjson.OPT_PASSTHROUGH_SUBCLASS)
    text = body.decode()
    template = '"\\u0000' + mark[1:]
    if not text.isascii() or "\x7f" in text:
        text = _UNPRINTABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    cache: dict[str, str] = {}
    text = _VALUE.sub(lambda m: _tagged(m.group(), cache, template), text)
    return f"# {header}\n{text}\n"


def load_inventory(text: str) -> Any:
    return yaml.load(text, Loader=_InventoryLoader)  # a SafeLoader with one more scalar tag


def inventory_yaml(plan: Plan) -> str:
    return inventory_text(inventory(plan))


PULL_INVENTORY_DIR = "inventory/"


def pull_inventory_files(plan: Plan) -> dict[str, str]:
    """The inventory the nodes read in the site repository when they converge themselves (gitops.pull_layers;
    none otherwise), as `manifests/<site>/inventory/`: the node groups (hosts.yml), the site's variables once
    (group_vars/all.yml) and each node's own (host_vars/<node>.yml), so a node's pass reads its own file and the
    site's, and a commit that changes one node changes one file. No connection settings: a node's pass runs over
    the local connection."""
    if not plan.pulled_layers:
        return {}
    groups: dict[str, Any] = {g: {"hosts": {}} for g in NODE_GROUPS.values()}
    files = {
        "group_vars/all.yml": inventory_text(
            group_vars(plan) | (_lab_site_vars(plan) if plan.connection == "lab" else {})
        )
    }
    for node in plan.nodes:
        groups[NODE_GROUPS[node.role]]["hosts"][node.name] = None
        files[f"host_vars/{node.name}.yml"] = inventory_text({"aisite_node": _node_doc(node)})
    files["hosts.yml"] = inventory_text({"all": {"children": groups}})
    return {PULL_INVENTORY_DIR + name: text for name, text in sorted(files.items())}


def group_sizes(inv: dict[str, Any]) -> dict[str, int]:
    """Hosts per inventory group: how the progress bars know each play's host count."""
    return {name: len(g["hosts"]) for name, g in inv["all"]["children"].items()}
