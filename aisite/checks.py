"""Cross-field rules of a site: everything pydantic cannot see from one field alone.

Each check appends `Problem(path, message)` and carries on, so a user sees every mistake in one run.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from ipaddress import IPv4Address, IPv4Network

from aisite.catalog import (
    ACCESS_SWITCH_MODELS,
    CUDA_REPO_ARCH,
    GENERIC_MODEL,
    GPU_TYPES,
    SERVER_MODELS,
    SWITCH_MODELS,
)
from aisite.errors import Problem
from aisite.fields import DNS_LABEL, secret_env
from aisite.model import (
    AccessSwitchGroup,
    BmcSpec,
    GpuGroup,
    Install,
    NodeGroup,
    Site,
    SwitchGroup,
    SwitchGroupBase,
    compute_ports,
    group_hardware,
    group_racks,
)
from aisite.plan import FabricLayout, fabric_capacity, fabric_layout, group_rails, rail_block_prefix
from aisite.plan.ceph import ceph_problems
from aisite.plan.fabric import switch_port
from aisite.plan.kubernetes import (
    CNI_MANIFESTS,
    DRA_MIN_VERSION,
    PINNED,
    SUPPORTED_MINORS,
    gpu_inventory,
    job_operator,
    minor,
    node_gpus,
    tenant_flavors,
    version_tuple,
)
from aisite.plan.pools import is_own_address, named_addresses
from aisite.serving.checks import serving_problems

PRIVATE_ASN_RANGES = ((64512, 65534), (4200000000, 4294967294))


def check_site(site: Site) -> list[Problem]:
    out: list[Problem] = []
    groups = list(_node_groups(site))
    _check_group_sizes(groups, out)
    _check_control_plane(site, out)
    _check_gpu_groups(site, out)
    _check_names(site, groups, out)
    _check_networks(site, out)
    _check_addresses(site, groups, out)
    _check_macs(groups, out)
    _check_credentials(site, groups, out)
    _check_admin_users(site, out)
    layout = fabric_layout(site)
    _check_fabric(site, layout, out)
    _check_tiers(site, layout, out)
    _check_switch_models(site, out)
    _check_access_switches(site, out)
    _check_capacity(site, layout, out)
    _check_kubernetes(site, out)
    _check_tenants(site, out)
    _check_exports(site, out)
    _check_gitops(site, groups, out)
    _check_provisioning(site, groups, out)
    _check_acceptance(site, out)
    _check_firmware_images(site, groups, out)
    out += ceph_problems(site)
    out += serving_problems(site)
    return out


def _check_acceptance(site: Site, out: list[Problem]) -> None:
    a = site.acceptance
    if a.degraded_fraction < a.fail_fraction:
        out.append(
            Problem(
                "site.acceptance.degraded_fraction",
                f"{a.degraded_fraction} is below fail_fraction {a.fail_fraction}: a figure would fail before degrading",
            )
        )
    types = {group_hardware(g)[0] for g in site.gpu_nodes}
    out.extend(
        Problem(f"site.acceptance.nccl_busbw_gbps.{t}", f"the site has no {t} GPUs")
        for t in a.nccl_busbw_gbps
        if t not in types
    )


def _check_firmware_images(site: Site, groups: list[tuple[str, NodeGroup]], out: list[Problem]) -> None:
    """A firmware image is fetched over https outside a lab: aisite checks its digest, but the BMC fetches it again,
    and over http anyone on the path could swap it after the check."""
    if site.ansible.connection == "lab":
        return
    for path, g in groups:
        image = g.firmware.bios_firmware if g.firmware else None
        if image is not None and not image.image.startswith("https://"):
            out.append(
                Problem(
                    f"{path}.firmware.bios_firmware.image",
                    "an https URL is required outside a lab: the BMC fetches the image after aisite has checked "
                    "its sha256, and over http anyone on the path could replace it in between",
                )
            )


def _check_provisioning(site: Site, groups: list[tuple[str, NodeGroup]], out: list[Problem]) -> None:
    installing = [(path, g) for path, g in groups if g.install]
    if installing and site.provisioning is None:
        out.extend(
            Problem(f"{path}.install", "needs site.provisioning: the boot server that installs the nodes")
            for path, _ in installing
        )
    for path, group in installing:
        assert group.install is not None
        _check_partitions(f"{path}.install", group.install, out)
    # A node's boot MAC is not checked here: a site may declare nodes before their MACs are known (`aisite oob
    # discover` reads them off the BMCs); `aisite provision` refuses a node it would boot without one.


def _check_partitions(path: str, install: Install, out: list[Problem]) -> None:
    mounts: dict[str, int] = {}
    last = len(install.partitions) - 1
    reserved = "/boot/efi" if install.boot_mode == "uefi" else None
    for i, p in enumerate(install.partitions):
        where = f"{path}.partitions[{i}]"
        if p.fs == "swap" and p.mount is not None:
            out.append(Problem(f"{where}.mount", "swap is not mounted: leave mount out"))
        if p.fs != "swap" and p.mount is None:
            out.append(Problem(f"{where}.mount", f"a {p.fs} partition needs a mount point"))
        if p.size_gb is None and i != last:
            out.append(Problem(f"{where}.size_gb", "only the last partition may take the rest of the disk"))
        if p.mount is not None:
            if p.mount in mounts:
                out.append(Problem(f"{where}.mount", f"{p.mount} is already partitions[{mounts[p.mount]}]"))
            mounts.setdefault(p.mount, i)
            if p.mount == reserved:
                out.append(Problem(f"{where}.mount", f"{p.mount} is the EFI system partition aisite adds in uefi mode"))
    if "/" not in mounts:
        out.append(Problem(f"{path}.partitions", "no partition is mounted at /"))


def _check_gitops(site: Site, groups: list[tuple[str, NodeGroup]], out: list[Problem]) -> None:
    g = site.gitops
    if g is None:
        return
    nodes = [name for _, group in groups for name in group.node_names()]
    if g.reconciler_host is not None and g.reconciler_host not in nodes:
        out.append(
            Problem(
                "site.gitops.reconciler_host",
                f"{g.reconciler_host!r} is not a node of the site (nodes: {', '.join(nodes[:8])}"
                + (", ...)" if len(nodes) > 8 else ")"),
            )
        )
    if g.pull_layers and not g.allowed_signers:
        # A pulling node runs as root whatever commit it accepts, fetched over transports (git://, a mirror) that
        # authenticate nothing: without signers it would accept whatever answers its fetch.
        out.append(
            Problem(
                "site.gitops.pull_layers",
                "nodes that pull their layers apply only signed commits: list the signers' keys in allowed_signers",
            )
        )
    if g.signers_secret and not g.allowed_signers:
        out.append(
            Problem(
                "site.gitops.signers_secret",
                "Flux would verify signatures the reconciler does not: list the same keys in allowed_signers",
            )
        )


def _node_groups(site: Site) -> Iterator[tuple[str, NodeGroup]]:
    yield "site.control_plane", site.control_plane
    for i, group in enumerate(site.gpu_nodes):
        yield f"site.gpu_nodes[{i}]", group
    if site.storage_nodes:
        yield "site.storage_nodes", site.storage_nodes


def _switch_groups(site: Site) -> Iterator[tuple[str, SwitchGroupBase]]:
    sw = site.switches
    yield "site.switches.leaves", sw.leaves
    yield "site.switches.spines", sw.spines
    if sw.super_spines:
        yield "site.switches.super_spines", sw.super_spines
    if sw.management:
        yield "site.switches.management", sw.management
    if sw.oob:
        yield "site.switches.oob", sw.oob


def _check_group_sizes(groups: list[tuple[str, NodeGroup]], out: list[Problem]) -> None:
    for path, group in groups:
        if group.count is not None and len(group.nodes) > group.count:
            out.append(Problem(f"{path}.nodes", f"{len(group.nodes)} node entries but count is {group.count}"))


def _check_control_plane(site: Site, out: list[Problem]) -> None:
    n = site.control_plane.size
    if n == 0:
        out.append(Problem("site.control_plane.count", "a site needs a control plane: 1 node, or an odd number from 3"))
    elif n != 1 and n % 2 == 0:
        out.append(
            Problem(
                "site.control_plane.count",
                f"{n} control-plane nodes: etcd needs a majority, so an even count tolerates no more failures than "
                f"{n - 1}; use 1 or an odd number from 3",
            )
        )


_GENERIC_ONLY = ("gpu_type", "gpus", "nics", "nic_speed_gbps", "nvswitch")


def _check_gpu_groups(site: Site, out: list[Problem]) -> None:
    seen: dict[str, int] = {}
    racks: dict[str, str] = {}  # rack name -> the group path that has it: a rack name is one place
    for i, group in enumerate(site.gpu_nodes):
        path = f"site.gpu_nodes[{i}]"
        if group.name in seen:
            out.append(Problem(f"{path}.name", f"group {group.name!r} is already site.gpu_nodes[{seen[group.name]}]"))
        seen.setdefault(group.name, i)
        if group.model == GENERIC_MODEL:
            for key in ("gpu_type", "gpus", "nics"):
                if getattr(group, key) is None:
                    out.append(Problem(f"{path}.{key}", "required for model 'generic'"))
        else:
            for key in _GENERIC_ONLY:
                if getattr(group, key) is not None:
                    out.append(Problem(f"{path}.{key}", f"set only with model 'generic'; {group.model} defines it"))
        gpu_type, _, nics, _, _ = group_hardware(group)
        if group.rails is not None and group.rails > nics:
            out.append(Problem(f"{path}.rails", f"{group.rails} rails but {group.model} has {nics} compute NICs"))
        rails = group_rails(group)
        _check_ports(path, group, nics, out)
        if group.interfaces.rails is not None and len(group.interfaces.rails) < rails:
            out.append(Problem(f"{path}.interfaces.rails", f"{len(group.interfaces.rails)} names for {rails} rails"))
        if gpu_type:
            _check_driver(site, path, group, gpu_type, out)
        _check_racks(path, group, out)
        _check_cpu_arch(site, path, group, out)
        for name, _, _ in group_racks(group):
            if racks.setdefault(name, path) != path:
                out.append(Problem(f"{path}.racks", f"rack {name!r} is already a rack of {racks[name]}"))


def _check_cpu_arch(site: Site, path: str, group: GpuGroup, out: list[Problem]) -> None:
    """The driver repository serves the group's CPU architecture (a Grace tray cannot install x86_64 packages)."""
    model = SERVER_MODELS.get(group.model)
    if model is None:
        return
    if model.cpu_arch != "amd64" and group.install is not None:
        out.append(
            Problem(
                f"{path}.install",
                f"aisite builds amd64 install images only; {group.model} trays are {model.cpu_arch}: install them "
                "with the vendor's image and leave install out",
            )
        )
    repo = site.nvidia.repository.rstrip("/").rsplit("/", 1)[-1]
    want = CUDA_REPO_ARCH[model.cpu_arch]
    if repo in CUDA_REPO_ARCH.values() and repo != want:
        out.append(
            Problem(
                "site.nvidia.repository",
                f"serves {repo} packages, but {path} ({group.model}) has {model.cpu_arch} CPUs: use the "
                f"repository's {want}/ directory (one architecture's GPU nodes a site, for now)",
            )
        )


def _check_racks(path: str, group: GpuGroup, out: list[Problem]) -> None:
    """A rack-scale group's trays fill its racks: whole racks unless a rack says it holds fewer, never more trays
    than a rack has, every node in a rack; racks only on rack-scale models."""
    model = SERVER_MODELS.get(group.model)
    full = model.rack_trays if model else 0
    if not full:
        if group.racks is not None:
            out.append(Problem(f"{path}.racks", f"{group.model} is not a rack-scale system (NVL72): it has no racks"))
        return
    if group.racks is None:
        if group.size % full:
            out.append(
                Problem(
                    f"{path}.count",
                    f"{group.size} trays do not fill whole {group.model} racks of {full} trays; declare racks "
                    f"(a partial one with its trays) to place {group.size % full} trays in a smaller NVLink domain",
                )
            )
        return
    seen: dict[str, int] = {}
    for j, rack in enumerate(group.racks):
        if rack.trays is not None and rack.trays > full:
            out.append(Problem(f"{path}.racks[{j}].trays", f"{rack.trays} trays; a {group.model} rack has {full}"))
        if rack.name in seen:
            out.append(Problem(f"{path}.racks[{j}].name", f"{rack.name!r} is already racks[{seen[rack.name]}]"))
        seen.setdefault(rack.name, j)
    trays = sum(t for _, _, t in group_racks(group))
    if trays != group.size:
        out.append(Problem(f"{path}.racks", f"the racks hold {trays} trays; the group has {group.size} nodes"))


def _check_ports(path: str, group: GpuGroup, nics: int, out: list[Problem]) -> None:
    """A site's port list names each compute NIC once; for a catalogued model it is a permutation of the
    model's ports (firmware that numbers differently), never a port the model does not have."""
    if group.ports is None:
        return
    if len(group.ports) != nics:
        out.append(Problem(f"{path}.ports", f"{len(group.ports)} ports for {nics} compute NICs"))
    model = SERVER_MODELS.get(group.model)
    labels = {p.label for p in model.compute_ports} if model else set()
    seen: dict[str, int] = {}
    for j, port in enumerate(group.ports):
        if labels and port.label not in labels:
            known = ", ".join(sorted(labels))
            out.append(
                Problem(f"{path}.ports[{j}].label", f"{group.model} has no port {port.label!r}; its ports: {known}")
            )
        if port.label in seen:
            out.append(Problem(f"{path}.ports[{j}].label", f"{port.label!r} is already ports[{seen[port.label]}]"))
        seen.setdefault(port.label, j)
    missing = labels - {p.label for p in group.ports}
    if labels and missing and len(group.ports) == nics:
        out.append(
            Problem(f"{path}.ports", "not a permutation of the model's ports: missing " + ", ".join(sorted(missing)))
        )
    resolved = compute_ports(group)
    for key in ("netdev", "rdma", "pci"):
        values = [getattr(p, key) for p in resolved if getattr(p, key)]
        dup = sorted({v for v in values if values.count(v) > 1})
        if dup:
            out.append(Problem(f"{path}.ports", f"two ports share the {key} " + ", ".join(dup)))


def _check_driver(site: Site, path: str, group: GpuGroup, gpu_type: str, out: list[Problem]) -> None:
    info = GPU_TYPES[gpu_type]
    if group.driver_branch is not None:
        branch, where = group.driver_branch, f"{path}.driver_branch"
    elif site.nvidia.driver_branch is not None:
        branch, where = site.nvidia.driver_branch, "site.nvidia.driver_branch"
    else:
        return
    if info.min_driver_branch is not None and branch < info.min_driver_branch:
        out.append(
            Problem(
                where,
                f"R{branch} does not support {info.arch.capitalize()} ({gpu_type}, {path} {group.model}); "
                f"the first branch with {info.arch.capitalize()} support is R{info.min_driver_branch}",
            )
        )
    if info.max_driver_branch is not None and branch > info.max_driver_branch:
        out.append(
            Problem(
                where,
                f"R{branch} does not support {info.arch.capitalize()} ({gpu_type}, {path} {group.model}); "
                f"the last branch with {info.arch.capitalize()} support is R{info.max_driver_branch}"
                + (" (CUDA 12)" if info.max_cuda_major else ""),
            )
        )


def _check_names(site: Site, groups: list[tuple[str, NodeGroup]], out: list[Problem]) -> None:
    used: dict[str, str] = {}

    def claim(name: str, where: str, what: str) -> None:
        if name in used:
            out.append(Problem(f"{where}.name", f"{name!r} is already used by {used[name]}"))
        else:
            used[name] = what

    def generated(path: str, pattern: str, names: list[str]) -> None:
        # A pattern's names are host names, file names and configuration words: each a DNS label. The longest
        # is the last; one problem per pattern.
        for i, name in enumerate(names):
            if not DNS_LABEL.fullmatch(name):
                out.append(
                    Problem(
                        f"{path}.name_pattern",
                        f"{pattern!r} gives {name[:80]!r} for node {i + 1}, which is not a DNS label "
                        "(lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63)",
                    )
                )
                return

    for path, group in groups:
        names = group.node_names()
        generated(path, group.name_pattern, names)
        for i, name in enumerate(names):
            claim(name, f"{path}.nodes[{i}]", f"{path}.nodes[{i}]")
    for path, sgroup in _switch_groups(site):
        names = sgroup.switch_names()
        generated(path, sgroup.name_pattern, names)
        for i, name in enumerate(names):
            claim(name, f"{path}.nodes[{i}]", f"{path}.nodes[{i}]")


def _named_networks(site: Site) -> list[tuple[str, IPv4Network]]:
    n = site.networks
    nets = [
        ("site.networks.oob", n.oob),
        ("site.networks.management", n.management),
        ("site.networks.loopbacks", n.loopbacks),
        ("site.networks.p2p", n.p2p),
        ("site.networks.storage", n.storage),
        ("site.networks.pods", n.pods),
        ("site.networks.services", n.services),
    ]
    nets.extend((f"site.networks.rails[{i}]", net) for i, net in enumerate(n.rails))
    return nets


def _check_networks(site: Site, out: list[Problem]) -> None:
    nets = _named_networks(site)
    # Sorted by start address, only neighbours can overlap: O(n log n) instead of every pair.
    ordered = sorted(nets, key=lambda x: (int(x[1].network_address), -x[1].num_addresses))
    widest: tuple[str, IPv4Network] | None = None
    for path, net in ordered:
        if widest and net.overlaps(widest[1]):
            out.append(Problem(path, f"{net} overlaps {widest[0]} ({widest[1]})"))
        if widest is None or int(net.broadcast_address) > int(widest[1].broadcast_address):
            widest = (path, net)


def _node_addresses(path: str, group: NodeGroup) -> Iterator[tuple[str, str, IPv4Address]]:
    """(key path, network key, address) of every address written for a group's nodes."""
    if group.bmc and group.bmc.address:
        yield f"{path}.bmc.address", "oob", group.bmc.address
    for i, spec in enumerate(group.nodes):
        base = f"{path}.nodes[{i}]"
        if spec.bmc and spec.bmc.address:
            yield f"{base}.bmc.address", "oob", spec.bmc.address
        if spec.management and spec.management.address:
            yield f"{base}.management.address", "management", spec.management.address
        if spec.storage and spec.storage.address:
            yield f"{base}.storage.address", "storage", spec.storage.address


def _check_addresses(site: Site, groups: list[tuple[str, NodeGroup]], out: list[Problem]) -> None:
    entries: list[tuple[str, str, IPv4Address]] = [("site.control_plane.vip", "management", site.control_plane.vip)]
    if site.provisioning:
        entries.append(("site.provisioning.boot_server", "management", site.provisioning.boot_server))
    for path, group in groups:
        if group.bmc and group.bmc.address and group.size > 1:
            out.append(Problem(f"{path}.bmc.address", "a group-wide BMC address would be shared by every node"))
        entries.extend(_node_addresses(path, group))
    for path, sgroup in _switch_groups(site):
        for i, spec in enumerate(sgroup.nodes):
            if spec.management and spec.management.address:
                entries.append((f"{path}.nodes[{i}].management.address", "oob", spec.management.address))
    nets = {"oob": site.networks.oob, "management": site.networks.management, "storage": site.networks.storage}
    used: dict[IPv4Address, str] = {}
    for path, netkey, addr in entries:
        net = nets[netkey]
        if addr not in net:
            out.append(Problem(path, f"{addr} is outside site.networks.{netkey} ({net})"))
        elif net.prefixlen < 31 and addr in (net.network_address, net.broadcast_address, net.network_address + 1):
            role = "gateway" if addr == net.network_address + 1 else "network or broadcast"
            out.append(Problem(path, f"{addr} is the {role} address of site.networks.{netkey}"))
        owner = path.rsplit(".", 1)[0]
        if addr in used:
            out.append(Problem(path, f"{addr} is already used by {used[addr]}"))
        else:
            used[addr] = owner
    _check_named_addresses(site, {addr: path for path, _, addr in entries if is_own_address(path)}, out)


def _check_named_addresses(site: Site, given: dict[IPv4Address, str], out: list[Problem]) -> None:
    """A server the site names (DNS, NTP, a registry) must not be an address given to a node by hand, nor sit in
    a rail or point-to-point network, whose addresses are laid out by position and cannot skip it."""
    positional = {f"site.networks.rails[{i}]": n for i, n in enumerate(site.networks.rails)}
    positional["site.networks.p2p"] = site.networks.p2p
    for path, addr in named_addresses(site):
        if is_own_address(path):
            continue
        if addr in given:
            out.append(Problem(given[addr], f"{addr} is named by {path}: a node given it would answer for that server"))
        for key, net in positional.items():
            if addr in net:
                out.append(
                    Problem(
                        path,
                        f"{addr} is inside {key} ({net}), whose addresses go to switches and nodes by "
                        "position: name a server outside it",
                    )
                )


def _check_macs(groups: list[tuple[str, NodeGroup]], out: list[Problem]) -> None:
    used: dict[str, str] = {}
    for path, group in groups:
        if group.bmc and group.bmc.mac and group.size > 1:
            out.append(Problem(f"{path}.bmc.mac", "a group-wide MAC would be shared by every node"))
        for i, spec in enumerate(group.nodes):
            for key, iface in (("bmc", spec.bmc), ("management", spec.management), ("storage", spec.storage)):
                if iface and iface.mac:
                    where = f"{path}.nodes[{i}].{key}.mac"
                    if iface.mac in used:
                        out.append(Problem(where, f"{iface.mac} is already used by {used[iface.mac]}"))
                    else:
                        used[iface.mac] = where.rsplit(".", 1)[0]


def _check_admin_users(site: Site, out: list[Problem]) -> None:
    seen: dict[str, int] = {}
    for i, user in enumerate(site.admin_users):
        if user.name in seen:
            out.append(
                Problem(f"site.admin_users[{i}].name", f"{user.name!r} is already site.admin_users[{seen[user.name]}]")
            )
        seen.setdefault(user.name, i)
        if user.name == "root":
            out.append(
                Problem(f"site.admin_users[{i}].name", "root is not an admin user: keys for root are the deploy's")
            )
        if not user.ssh_keys:
            out.append(Problem(f"site.admin_users[{i}].ssh_keys", "no key: admin users log in with SSH keys only"))


def _check_credentials(site: Site, groups: list[tuple[str, NodeGroup]], out: list[Problem]) -> None:
    envs: dict[str, str] = {}
    for name, secret in site.secrets.items():
        env = secret_env(name)
        if env in envs:
            out.append(
                Problem(
                    f"site.secrets.{name}",
                    f"reaches Ansible as {env}, as secret {envs[env]!r} does: one would get the other's password; "
                    "rename one",
                )
            )
        envs.setdefault(env, name)
        src = secret.password_from
        if not (src.env or src.pulumi_config or src.vault_file):
            out.append(
                Problem(f"site.secrets.{name}.password_from", "names no source: set env, pulumi_config or vault_file")
            )

    def ref(where: str, value: str) -> None:
        if value not in site.secrets:
            known = ", ".join(sorted(site.secrets)) or "none"
            out.append(Problem(where, f"secret {value!r} is not declared under site.secrets (declared: {known})"))

    if site.oob.credentials:
        ref("site.oob.credentials", site.oob.credentials)
    seen: set[str] = set()
    for i, account in enumerate(site.oob.accounts):
        ref(f"site.oob.accounts[{i}].secret", account.secret)
        user = site.secrets[account.secret].username if account.secret in site.secrets else None
        if user is not None and user in seen:
            out.append(Problem(f"site.oob.accounts[{i}].secret", f"user {user!r} is already an account above"))
        if user is not None:
            seen.add(user)
    for path, group in groups:
        gspec: BmcSpec | None = group.bmc
        if gspec and gspec.credentials:
            ref(f"{path}.bmc.credentials", gspec.credentials)
        group_has = bool(site.oob.credentials or (gspec and gspec.credentials))
        missing = 0
        for i in range(group.size):
            spec = group.nodes[i].bmc if i < len(group.nodes) else None
            if spec and spec.credentials:
                ref(f"{path}.nodes[{i}].bmc.credentials", spec.credentials)
            elif not group_has:
                missing += 1
        if missing:
            out.append(
                Problem(
                    f"{path}.bmc.credentials",
                    f"{missing} BMC(s) have no credentials: set site.oob.credentials, {path}.bmc.credentials or "
                    "each node's bmc.credentials to a secret under site.secrets",
                )
            )


def _asn_problem(first: int, last: int) -> str | None:
    for lo, hi in PRIVATE_ASN_RANGES:
        if lo <= first <= hi:
            return None if last <= hi else f"ASNs {first}-{last} run past the private range {lo}-{hi}"
    return f"{first} is not a private ASN (64512-65534 or 4200000000-4294967294)"


def _check_fabric(site: Site, layout: FabricLayout, out: list[Problem]) -> None:
    sw, fab = site.switches, site.fabric
    r = fab.roce
    if r.pfc_watchdog_detection_ms % r.pfc_watchdog_poll_ms:
        out.append(
            Problem(
                "site.fabric.roce.pfc_watchdog_detection_ms",
                f"{r.pfc_watchdog_detection_ms} is not a whole number of polls of {r.pfc_watchdog_poll_ms} ms "
                "(Cumulus counts detection in polls)",
            )
        )
    if layout.rails == 0:
        return
    if len(site.networks.rails) < layout.rails:
        out.append(Problem("site.networks.rails", f"{len(site.networks.rails)} subnet(s) for {layout.rails} rails"))
    if fab.leaves_per_su is not None and fab.leaves_per_su > layout.rails:
        out.append(Problem("site.fabric.leaves_per_su", f"{fab.leaves_per_su} leaves for {layout.rails} rails"))
    if sw.leaves.count < layout.leaves_needed:
        out.append(
            Problem(
                "site.switches.leaves.count",
                f"{sw.leaves.count} leaves but the fabric needs {layout.leaves_needed} "
                f"({layout.scalable_units} scalable unit(s) x {layout.leaves_per_su} leaves)",
            )
        )
    problem = _asn_problem(fab.asn_base, fab.asn_base + layout.first_leaf_asn - 1 + sw.leaves.count)
    if problem:
        out.append(Problem("site.fabric.asn_base", problem))
    if fab.host_mtu > fab.switch_mtu:
        out.append(Problem("site.fabric.host_mtu", f"{fab.host_mtu} is above the switch MTU {fab.switch_mtu}"))
    r = fab.roce
    if r.ecn_min_kb >= r.ecn_max_kb:
        out.append(Problem("site.fabric.roce.ecn_min_kb", f"{r.ecn_min_kb} KB is not below ecn_max_kb {r.ecn_max_kb}"))
    if r.cnp_priority == r.pfc_priority:
        out.append(Problem("site.fabric.roce.cnp_priority", "CNPs must not share the lossless priority"))
    if r.cnp_dscp == r.roce_dscp:
        out.append(Problem("site.fabric.roce.cnp_dscp", "CNP and RoCE data must use different DSCP values"))
    _check_switch_os(site, out)


# BGP maximum-paths as the switch roles render it (fabric_frr_max_paths, fabric_cumulus_max_paths,
# fabric_onyx_max_paths; SONiC's bgpcfgd templates use 64): the widest ECMP a route gets.
ECMP_MAX_PATHS = 64
# How each switch OS peers on a fabric link (its role's template): BGP unnumbered over IPv6 link-local, or /31s.
UNNUMBERED_OS = frozenset({"frr", "cumulus"})
# The Cumulus Linux releases whose NVUE syntax aisite renders (5.11-5.14, and from 5.15 on with its renames):
# the releases tests/test_switch_configs.py's NVUE path table documents.
CUMULUS_RELEASES = ((5, 11), (5, 15))
# Onyx's `roce lossless` fixes these; the fabric_onyx role cannot express another profile.
ONYX_ROCE = {"roce_dscp": 26, "pfc_priority": 3, "cnp_dscp": 48, "cnp_priority": 6}
# Knobs the Onyx lines aisite renders cannot set (its ECN command takes thresholds, its watchdog only `enable`):
# a site must leave them at the plan's defaults, and Onyx keeps its own values.
ONYX_UNSET = (
    "ecn_probability_percent",
    "pfc_watchdog_poll_ms",
    "pfc_watchdog_detection_ms",
    "pfc_watchdog_restoration_ms",
)


def _fabric_groups(site: Site) -> list[tuple[str, SwitchGroup]]:
    """The fabric's tiers that have switches, bottom first, with their keys under site.switches."""
    sw = site.switches
    groups = [("leaves", sw.leaves)]
    if sw.spines.count:
        groups.append(("spines", sw.spines))
    if sw.super_spines and sw.super_spines.count:
        groups.append(("super_spines", sw.super_spines))
    return groups


def _check_switch_models(site: Site, out: list[Problem]) -> None:
    """Each tier's ports and speed against its model's front panel, where the catalog knows the model."""
    for path, group in _fabric_groups(site):
        model = SWITCH_MODELS.get(group.model)
        if model is None:
            continue
        if group.speed_gbps > model.cage_gbps:
            out.append(
                Problem(
                    f"site.switches.{path}.speed_gbps",
                    f"{group.speed_gbps}: an {model.name}'s ports run at most {model.cage_gbps} Gbps",
                )
            )
        elif group.ports > model.ports_at(group.speed_gbps):
            out.append(
                Problem(
                    f"site.switches.{path}.ports",
                    f"{group.ports}: an {model.name} ({model.cages} x {model.cage_gbps}G) has at most "
                    f"{model.ports_at(group.speed_gbps)} ports at {group.speed_gbps} Gbps",
                )
            )
        elif group.ports > model.cages and group.os == "onyx":
            # More ports than cages splits each cage (an SN5600's 2x400G): rendered for Cumulus (NVUE `link
            # breakout`), SONiC (BREAKOUT_CFG) and the lab's FRR (its ports named as Cumulus names them), not yet
            # for Onyx: refuse rather than configure ports the switch does not have.
            out.append(
                Problem(
                    f"site.switches.{path}.ports",
                    f"{group.ports} ports on {model.cages} cages means splitting each {model.name} cage, and aisite "
                    f"renders no Onyx breakout yet: declare at most {model.cages} (one {group.speed_gbps}G port a "
                    "cage) or run Cumulus or SONiC",
                )
            )


# The OSes aisite configures management and out-of-band switches with (VLAN-aware bridge, access ports, trunk
# uplinks); `generic` leaves one to the site.
ACCESS_OS = ("cumulus",)


def _check_access_switches(site: Site, out: list[Problem]) -> None:
    """Management and out-of-band switches aisite configures: an OS it renders them for, the release NVUE needs,
    two networks never on one VLAN, uplinks that are not a port it cables a node to."""
    for key in ("management", "oob"):
        group: AccessSwitchGroup | None = getattr(site.switches, key)
        if group is None or not group.count:
            continue
        path = f"site.switches.{key}"
        hw = ACCESS_SWITCH_MODELS.get(group.model)
        if hw is not None and group.speed_gbps > hw.port_gbps:
            out.append(
                Problem(
                    f"{path}.speed_gbps",
                    f"{group.speed_gbps}: an {hw.name}'s {hw.ports} node ports run at most {hw.port_gbps} Gbps "
                    f"({', '.join(hw.uplinks)} are its uplinks)",
                )
            )
        elif hw is not None and group.ports > hw.ports:
            out.append(Problem(f"{path}.ports", f"{group.ports}: an {hw.name} has {hw.ports} node ports"))
        if group.os == "generic":
            if group.uplinks:
                out.append(Problem(f"{path}.uplinks", "generic switches are the site's to configure: no uplinks"))
            continue
        if group.os not in ACCESS_OS:
            out.append(
                Problem(
                    f"{path}.os",
                    f"{group.os}: aisite configures {key} switches on {', '.join(ACCESS_OS)} only; `generic` "
                    "leaves them to the site (their cables are still planned and checked)",
                )
            )
            continue
        _check_cumulus_release(path, group, out)
        if key == "management" and group.vlans.management == group.vlans.storage:
            out.append(
                Problem(f"{path}.vlans.storage", f"{group.vlans.storage}: the management network's VLAN as well")
            )
        cabled = {switch_port(group, n) for n in range(1, group.ports + 1)}
        seen: set[str] = set()
        for i, port in enumerate(group.uplinks):
            if port in cabled:
                out.append(
                    Problem(
                        f"{path}.uplinks[{i}]",
                        f"{port} is one of the {group.ports} ports aisite cables nodes and BMCs to (ports: "
                        f"{group.ports}): an uplink is a port beyond them",
                    )
                )
            elif port in seen:
                out.append(Problem(f"{path}.uplinks[{i}]", f"{port} is named twice"))
            elif hw is not None and port not in hw.uplinks:
                out.append(
                    Problem(f"{path}.uplinks[{i}]", f"{port}: an {hw.name}'s uplink ports are {', '.join(hw.uplinks)}")
                )
            seen.add(port)


def _check_cumulus_release(path: str, group: SwitchGroupBase, out: list[Problem]) -> None:
    """A Cumulus group names a release aisite renders NVUE for (fabric and access switches alike)."""
    if group.os != "cumulus":
        return
    low, high = CUMULUS_RELEASES
    supported = f"{low[0]}.{low[1]} to {high[0]}.{high[1]}"
    if group.os_version is None:
        out.append(
            Problem(
                f"{path}.os_version",
                f"say which Cumulus Linux release the switches run ({supported}): NVUE's syntax changed in 5.15",
            )
        )
    elif not low <= tuple(int(p) for p in group.os_version.split(".")[:2]) <= high:
        out.append(Problem(f"{path}.os_version", f"{group.os_version}: aisite renders NVUE for {supported}"))


def _check_switch_os(site: Site, out: list[Problem]) -> None:
    groups = _fabric_groups(site)
    for path, group in groups:
        _check_cumulus_release(f"site.switches.{path}", group, out)
    for (below_path, below), (path, group) in itertools.pairwise(groups):
        if (below.os in UNNUMBERED_OS) != (group.os in UNNUMBERED_OS):
            out.append(
                Problem(
                    f"site.switches.{path}.os",
                    f"{group.os} {path.replace('_', '-')} cannot peer with {below.os} {below_path}: aisite configures "
                    f"{', '.join(sorted(UNNUMBERED_OS))} with BGP unnumbered and the others with /31 addresses",
                )
            )
    oses = {group.os for _, group in groups}
    if site.fabric.bfd is True and "sonic" in oses:
        # bgpcfgd's BGP_NEIGHBOR (what aisite writes) has no BFD field in SONiC's YANG; only frrcfgd's
        # vrf-keyed table does, a different management mode aisite does not render.
        out.append(
            Problem(
                "site.fabric.bfd",
                "true, but SONiC's BGP_NEIGHBOR table (bgpcfgd) cannot enable BFD on a session: leave it unset "
                "or false for a SONiC fabric (sessions then fail over on the BGP hold time, 9 s)",
            )
        )
    if "onyx" in oses:
        r = site.fabric.roce
        for key in ONYX_UNSET:
            if key in r.model_fields_set:
                out.append(
                    Problem(f"site.fabric.roce.{key}", "Onyx: the lines aisite renders cannot set it; leave it out")
                )
        for key, want in ONYX_ROCE.items():
            if getattr(r, key) != want:
                out.append(Problem(f"site.fabric.roce.{key}", f"{getattr(r, key)}: Onyx's `roce lossless` uses {want}"))


def _check_tiers(site: Site, layout: FabricLayout, out: list[Problem]) -> None:
    """A third tier's shape (pods, planes), each tier's oversubscription and the bisection bandwidth."""
    sw, fab = site.switches, site.fabric
    supers = sw.super_spines.count if sw.super_spines else 0
    if supers and fab.pod_size is None:
        out.append(
            Problem("site.fabric.pod_size", "super-spines need pods: set how many scalable units each pod holds")
        )
    if fab.pod_size is not None and not supers:
        out.append(Problem("site.switches.super_spines", f"pods of {fab.pod_size} scalable unit(s) need super-spines"))
    if fab.pod_size is not None and not sw.spines.count:
        out.append(Problem("site.switches.spines.count", "pods need spines: 0 declared"))
    if layout.three_tier:
        if sw.spines.count % layout.pods:
            out.append(
                Problem(
                    "site.switches.spines.count",
                    f"{sw.spines.count} spines do not split evenly over {layout.pods} pod(s) "
                    f"({max(sw.leaves.count, layout.leaves_needed)} leaves, {layout.leaves_per_pod} per pod)",
                )
            )
        planes = fab.super_spine_planes
        if supers % planes:
            out.append(
                Problem("site.switches.super_spines.count", f"{supers} super-spines do not split into {planes} planes")
            )
        if layout.spines_per_pod % planes:
            out.append(
                Problem(
                    "site.fabric.super_spine_planes",
                    f"{planes} planes for {layout.spines_per_pod} spines per pod: each pod needs the same number "
                    "of spines in every plane",
                )
            )
    # ECMP: a route up has a next hop per uplink; the roles install at most ECMP_MAX_PATHS of them.
    widths = [("site.fabric.uplinks_per_spine", "a leaf", layout.uplinks(sw.leaves.count) if sw.spines.count else 0)]
    if layout.three_tier:
        widths.append(("site.fabric.uplinks_per_super_spine", "a spine", layout.spine_uplinks))
    for path, who, width in widths:
        if width > ECMP_MAX_PATHS:
            out.append(
                Problem(
                    path,
                    f"{who}'s routes up would have {width} equal-cost next hops; the switch roles install at most "
                    f"{ECMP_MAX_PATHS} (BGP maximum-paths): fewer, faster links",
                )
            )
    capacity = fabric_capacity(site, layout)
    if capacity is None:
        return
    limits = {"leaves": fab.oversubscription.leaves, "spines": fab.oversubscription.spines}
    # A leaf mesh (no spines) has no tier above the leaves to oversubscribe: its bisection is what counts.
    for tier in capacity.tiers if sw.spines.count else ():
        limit = limits[tier.name]
        if tier.oversubscription > limit:
            out.append(
                Problem(
                    f"site.fabric.oversubscription.{tier.name}",
                    f"the {tier.name} are {tier.oversubscription:.3g}:1 oversubscribed ({tier.down_gbps} Gbps down, "
                    f"{tier.up_gbps} Gbps up each) but at most {limit:g}:1 is allowed",
                )
            )
    floor = fab.min_bisection_gbps_per_gpu
    if floor is not None and capacity.bisection_gbps_per_gpu < floor:
        out.append(
            Problem(
                "site.fabric.min_bisection_gbps_per_gpu",
                f"the fabric's bisection bandwidth is {capacity.bisection_gbps_per_gpu:.4g} Gbps per GPU, below "
                f"{floor:g}",
            )
        )


def _port_budget(path: str, group: SwitchGroup, need: int, what: str, out: list[Problem]) -> None:
    if need > group.ports:
        out.append(Problem(path, f"needs {need} ports ({what}) but {group.ports} are declared"))


def _access_budget(path: str, group: AccessSwitchGroup | None, need: int, what: str, out: list[Problem]) -> None:
    if group is not None and need > group.count * group.ports:
        out.append(Problem(path, f"{need} cables ({what}) but {group.count} x {group.ports} ports are declared"))


def _check_capacity(site: Site, layout: FabricLayout, out: list[Problem]) -> None:
    sw, nets = site.switches, site.networks
    n_nodes = sum(g.size for _, g in _node_groups(site))
    with_storage = sum(g.size for g in site.gpu_nodes) + (site.storage_nodes.size if site.storage_nodes else 0)
    fabric_switches = sum(group.count for _, group in _fabric_groups(site))
    managed = fabric_switches + (sw.management.count if sw.management else 0)  # switches cabled to OOB ports
    oob_addresses = managed + (sw.oob.count if sw.oob else 0)

    # Cables: leaves carry a unit's rails and the uplinks; spines one link per leaf and uplink.
    if layout.rails and sw.leaves.count >= layout.leaves_needed:
        uplinks = layout.uplinks(sw.leaves.count)
        for su in range(layout.scalable_units):
            down = layout.downlinks(su, site.fabric.scalable_unit)
            if down + uplinks > sw.leaves.ports:
                out.append(
                    Problem(
                        "site.switches.leaves.ports",
                        f"leaves of scalable unit {su} need {down + uplinks} ports ({down} to nodes, {uplinks} to "
                        f"the fabric) but have {sw.leaves.ports}",
                    )
                )
                break
    up = site.fabric.uplinks_per_spine
    if layout.three_tier and sw.super_spines:
        pod_leaves, supers_up = layout.leaves_per_pod, layout.spine_uplinks
        _port_budget(
            "site.switches.spines.ports",
            sw.spines,
            layout.spine_downlinks + supers_up,
            f"{pod_leaves} leaves of a pod x {up} uplinks + {supers_up} to the super-spines of its plane",
            out,
        )
        _port_budget(
            "site.switches.super_spines.ports",
            sw.super_spines,
            layout.super_spine_downlinks,
            f"{layout.pods} pods x {layout.super_spine_downlinks // layout.pods} links from the spines of its plane",
            out,
        )
    elif sw.spines.count:
        _port_budget(
            "site.switches.spines.ports",
            sw.spines,
            sw.leaves.count * up,
            f"{sw.leaves.count} leaves x {up} uplinks",
            out,
        )
    _access_budget(
        "site.switches.management",
        sw.management,
        n_nodes + with_storage,
        f"{n_nodes} management + {with_storage} storage",
        out,
    )
    _access_budget(
        "site.switches.oob",
        sw.oob,
        n_nodes + managed,
        f"{n_nodes} BMCs + {managed} switch management ports",
        out,
    )

    # Addresses: gateway, network and broadcast are not handed out.
    def fits(path: str, net: IPv4Network, need: int, what: str) -> None:
        hosts = net.num_addresses - (3 if net.prefixlen < 31 else 0)
        if need > hosts:
            out.append(
                Problem(
                    path, f"{net} has {hosts} usable addresses but {need} are needed ({what}): {need - hosts} missing"
                )
            )

    boot = 1 if site.provisioning else 0
    fits(
        "site.networks.management",
        nets.management,
        n_nodes + 1 + boot,
        f"{n_nodes} nodes + the API VIP" + (" + the boot server" if boot else ""),
    )
    fits(
        "site.networks.oob",
        nets.oob,
        n_nodes + oob_addresses,
        f"{n_nodes} BMCs + {oob_addresses} switches",
    )
    fits("site.networks.storage", nets.storage, with_storage, f"{with_storage} nodes on the storage network")
    fits(
        "site.networks.loopbacks",
        nets.loopbacks,
        fabric_switches,
        f"a loopback for each of {fabric_switches} fabric switches",
    )
    links = layout.links
    if nets.p2p.num_addresses < 2 * links:
        missing = links - nets.p2p.num_addresses // 2
        out.append(Problem("site.networks.p2p", f"{nets.p2p} holds fewer than {links} /31 links: {missing} missing"))
    if layout.rails:
        block = rail_block_prefix(site.fabric.scalable_unit, site.fabric.rail_pod_addresses)
        need_prefix = block - math.ceil(math.log2(max(layout.scalable_units, 1)))
        for i, net in enumerate(nets.rails[: layout.rails]):
            if net.prefixlen > need_prefix:
                out.append(
                    Problem(
                        f"site.networks.rails[{i}]",
                        f"{net} is too small: {layout.scalable_units} scalable unit(s) of /{block} need a "
                        f"/{need_prefix} or larger; it holds {1 << max(0, block - net.prefixlen)}",
                    )
                )


def _check_notebooks(site: Site, out: list[Problem]) -> None:
    """The jupyterhub addon logs users in through the site's provider (JupyterHub's default admits anyone) and
    starts their servers in tenants' namespaces (without a tenant no one could start one)."""
    k = site.kubernetes
    if "jupyterhub" not in k.addons:
        return
    if k.notebooks.login is None:
        out.append(
            Problem(
                "site.kubernetes.notebooks.login",
                "the jupyterhub addon needs the site's login provider (client_id and its URLs): without one "
                "JupyterHub's default authenticator admits anyone",
            )
        )
    if not k.tenants:
        out.append(
            Problem("site.kubernetes.addons", "jupyterhub: notebooks run in tenants' namespaces: declare tenants")
        )
    elif not any(t.groups for t in k.tenants):
        out.append(
            Problem("site.kubernetes.tenants", "jupyterhub: no tenant names groups, so no user could start a notebook")
        )


def _check_kubernetes(site: Site, out: list[Problem]) -> None:
    """The version against what the pinned components support, and a CNI the cluster layer can install.
    (The VIP and the pod and service networks are held by the address and network checks.)"""
    k = site.kubernetes
    low, high = SUPPORTED_MINORS
    if not low <= minor(k.version) <= high:
        out.append(
            Problem(
                "site.kubernetes.version",
                f"{k.version} is not supported by the pinned components ({PINNED}): use 1.{low} to 1.{high}",
            )
        )
    if k.cni not in CNI_MANIFESTS and not k.cni_manifest:
        out.append(
            Problem(
                "site.kubernetes.cni",
                f"no pinned manifest for {k.cni} (pinned: {', '.join(CNI_MANIFESTS)}): "
                "set site.kubernetes.cni_manifest",
            )
        )
    if "network-operator" in k.addons:
        _check_pod_rails(site, out)
    _check_dra(site, out)
    _check_notebooks(site, out)
    for i, r in enumerate(k.containerd.registries):
        if not r.mirrors and not r.ca:
            out.append(Problem(f"site.kubernetes.containerd.registries[{i}]", f"{r.host}: give mirrors, a ca, or both"))


def _check_dra(site: Site, out: list[Problem]) -> None:
    """GPU allocation through DRA needs NVIDIA's DRA driver, which aisite installs beside the GPU Operator (its Node
    Feature Discovery labels the nodes the driver's kubelet plugin runs on); racks get it there too, for their
    ComputeDomains. Without the GPU Operator a rack gets no ComputeDomains: the hosts keep the IMEX peers
    (nodes_config.cfg) and the package, its service masked, for a site that runs IMEX itself. The driver needs a
    Kubernetes that serves resource.k8s.io/v1."""
    k = site.kubernetes
    dra = k.gpu_allocation == "dra"
    racks = [f"site.gpu_nodes[{i}]" for i, g in enumerate(site.gpu_nodes) if group_racks(g)]
    operator = "gpu-operator" in k.addons
    if dra and not operator:
        out.append(
            Problem(
                "site.kubernetes.gpu_allocation",
                "dra needs NVIDIA's DRA driver, which aisite installs beside the gpu-operator addon (its Node "
                "Feature Discovery labels the GPU nodes the driver runs on): add gpu-operator to the addons",
            )
        )
    why = "gpu_allocation: dra" if dra else f"the racks of {racks[0]} (their ComputeDomains)" if racks else ""
    if why and (dra or operator) and version_tuple(k.version) < DRA_MIN_VERSION:
        floor = ".".join(map(str, DRA_MIN_VERSION))
        out.append(
            Problem(
                "site.kubernetes.version",
                f"{k.version}: {why} needs Dynamic Resource Allocation's resource.k8s.io/v1, which aisite's version "
                f"set asks of Kubernetes {floor} or later",
            )
        )
    if k.gpu_allocation == "dra" and k.mig_strategy == "mixed":
        out.append(
            Problem(
                "site.kubernetes.mig_strategy",
                "mixed names a resource per MIG profile for the device plugin; with gpu_allocation: dra, jobs claim "
                "whole GPUs (gpu.nvidia.com): use single or none",
            )
        )


def _check_quotas(site: Site, out: list[Problem]) -> None:
    """Each tenant's GPUs per type against what the site has of that type, and all tenants' together unless the
    site allows overcommit: Kueue would admit nothing beyond the GPUs that exist."""
    have = gpu_inventory(site)
    promised: dict[str, list[tuple[str, int]]] = {}
    for i, t in enumerate(site.kubernetes.tenants):
        path = f"site.kubernetes.tenants[{i}]"
        if isinstance(t.gpu_quota, int):
            if len(have) > 1:
                out.append(
                    Problem(
                        f"{path}.gpu_quota",
                        f"the site has GPU types {', '.join(have)}: give the quota per type, e.g. "
                        f"{{{next(iter(have))}: {t.gpu_quota}}}",
                    )
                )
                continue
            quotas = dict.fromkeys(have, t.gpu_quota)
        else:
            quotas = t.gpu_quota
        for gtype, n in quotas.items():
            where = f"{path}.gpu_quota" + ("" if isinstance(t.gpu_quota, int) else f".{gtype}")
            if gtype not in have:
                known = ", ".join(have) or "none"
                out.append(Problem(where, f"the site has no {gtype} GPUs (it has: {known})"))
                continue
            if n > have[gtype]:
                out.append(Problem(where, f"{n} {gtype} GPUs but the site has {have[gtype]}"))
            if t.lending_limit is not None and t.lending_limit > n:
                out.append(Problem(f"{path}.lending_limit", f"{t.lending_limit} is more than its {gtype} quota of {n}"))
            promised.setdefault(gtype, []).append((t.name, n))
    if site.kubernetes.gpu_overcommit:
        return
    for gtype, shares in promised.items():
        total = sum(n for _, n in shares)
        if total > have[gtype]:
            who = ", ".join(f"{name} {n}" for name, n in shares)
            out.append(
                Problem(
                    "site.kubernetes.tenants",
                    f"quotas add up to {total} {gtype} GPUs ({who}) but the site has {have[gtype]}; "
                    "set site.kubernetes.gpu_overcommit: true to allow it",
                )
            )


def _check_pod_rails(site: Site, out: list[Problem]) -> None:
    """Pods get an interface on every rail (a macvlan network per rail): their addresses need room in the leaf
    blocks, and a rail's interface must have one name on every GPU node (a network has one master interface)."""
    if not site.fabric.rail_pod_addresses:
        out.append(
            Problem(
                "site.fabric.rail_pod_addresses",
                "the network-operator addon gives pods an interface per rail: set how many addresses each GPU node "
                "needs for them in each rail block (e.g. 2)",
            )
        )
    names: dict[int, tuple[str, str]] = {}
    for gi, g in enumerate(site.gpu_nodes):
        given = g.interfaces.rails or []
        for r in range(group_rails(g)):
            name = given[r] if r < len(given) else f"rail{r}"
            first = names.setdefault(r, (name, f"site.gpu_nodes[{gi}]"))
            if first[0] != name:
                out.append(
                    Problem(
                        f"site.gpu_nodes[{gi}].interfaces.rails[{r}]",
                        f"{name!r} but {first[1]} calls rail {r} {first[0]!r}: a pod network per rail needs one name",
                    )
                )


def _check_exports(site: Site, out: list[Problem]) -> None:
    # An export's name is its StorageClass's and its PersistentVolume's: two of one name would replace each other.
    seen: dict[str, int] = {}
    for i, e in enumerate(site.storage_nodes.exports if site.storage_nodes else []):
        if e.name in seen:
            out.append(
                Problem(f"site.storage_nodes.exports[{i}].name", f"{e.name!r} is already exports[{seen[e.name]}]")
            )
        seen.setdefault(e.name, i)


def _check_tenants(site: Site, out: list[Problem]) -> None:
    tenants: dict[str, int] = {}
    for i, t in enumerate(site.kubernetes.tenants):
        if t.name in tenants:
            out.append(Problem(f"site.kubernetes.tenants[{i}].name", f"tenant {t.name!r} is declared twice"))
        tenants.setdefault(t.name, t.gpu_quota if isinstance(t.gpu_quota, int) else sum(t.gpu_quota.values()))
    _check_quotas(site, out)
    _check_workloads(site, out, {t.name for t in site.kubernetes.tenants})


def _check_workloads(site: Site, out: list[Problem], tenants: set[str]) -> None:
    """Each workload against its tenant's quota for its GPU type, the nodes of that type (how many, GPUs on each),
    and the operator its job object needs."""
    nodes = node_gpus(site)
    types = list(nodes)
    quota = {t.name: dict(tenant_flavors(t, types)) for t in site.kubernetes.tenants}
    levels: dict[str, tuple[int, str]] = {t.name: (i, t.pod_security) for i, t in enumerate(site.kubernetes.tenants)}
    addons = set(site.kubernetes.addons)
    names: set[str] = set()
    for i, w in enumerate(site.workloads):
        path = f"site.workloads[{i}]"
        if w.name in names:
            out.append(Problem(f"{path}.name", f"workload {w.name!r} is declared twice"))
        names.add(w.name)
        gtype = w.gpu_type or (types[0] if types else "")
        if w.gpu_type and w.gpu_type not in nodes:
            out.append(
                Problem(
                    f"{path}.gpu_type", f"the site has no {w.gpu_type} nodes (it has: {', '.join(types) or 'none'})"
                )
            )
            continue
        if w.gpu_type is None and len(types) > 1:
            out.append(
                Problem(f"{path}.gpu_type", f"the site has GPU types {', '.join(types)}: name the one it runs on")
            )
            continue
        need = w.nodes * w.gpus_per_node
        if w.tenant not in tenants:
            out.append(Problem(f"{path}.tenant", f"tenant {w.tenant!r} is not declared under site.kubernetes.tenants"))
        elif need > quota[w.tenant].get(gtype, 0):
            out.append(
                Problem(
                    path,
                    f"needs {need} {gtype} GPUs ({w.nodes} nodes x {w.gpus_per_node}) but tenant {w.tenant!r} has a "
                    f"{gtype} quota of {quota[w.tenant].get(gtype, 0)}",
                )
            )
        fits = sorted((n for n in nodes.get(gtype, []) if n >= w.gpus_per_node), reverse=True)
        largest = max(nodes.get(gtype) or [0])  # a group of count 0 has no nodes
        if w.gpus_per_node > largest:
            out.append(
                Problem(
                    f"{path}.gpus_per_node",
                    f"{w.gpus_per_node} but the largest {gtype} node has {largest}",
                )
            )
        elif w.nodes > len(fits):
            out.append(
                Problem(
                    f"{path}.nodes",
                    f"{w.nodes} nodes but the site has {len(fits)} {gtype} nodes with {w.gpus_per_node} GPUs or more",
                )
            )
        if w.kind in ("ib-write-bw", "iperf3") and w.nodes < 2:
            out.append(Problem(f"{path}.nodes", f"{w.kind} measures between nodes: give 2 or more"))
        if w.kind == "ib-write-bw":
            for j, g in enumerate(site.gpu_nodes):
                ports = compute_ports(g)[: group_rails(g)]
                if g.ports is not None and len(g.ports) != group_hardware(g)[2]:
                    continue  # the port list itself is refused above
                if g.size and group_rails(g) and (len(ports) < group_rails(g) or not all(p.rdma for p in ports)):
                    out.append(
                        Problem(
                            f"{path}.kind",
                            f"ib-write-bw runs on each rail's RDMA device and no document or port list names "
                            f"those of site.gpu_nodes[{j}] ({g.name}, {g.model}): declare its ports with each rdma",
                        )
                    )
        if w.kind in ("fio", "iperf3") and not w.image:
            out.append(
                Problem(
                    f"{path}.image", f"{w.kind} has no pinned upstream image: name the site's image that has {w.kind}"
                )
            )
        wanted = job_operator(w.kind, tuple(addons))
        if wanted == "mpi-operator" and levels.get(w.tenant, (0, ""))[1] == "restricted":
            j = levels[w.tenant][0]
            out.append(
                Problem(
                    f"{path}.tenant",
                    f"{w.kind} runs as an MPIJob, whose workers start sshd as root, and tenant {w.tenant!r} enforces "
                    f"Pod Security restricted (non-root only): set site.kubernetes.tenants[{j}].pod_security: "
                    "baseline, or run the PyTorch payload with the training-operator addon",
                )
            )
        if wanted and wanted not in addons:
            out.append(
                Problem(
                    f"{path}.kind", f"{w.kind} runs as a job of the {wanted} addon: add it to site.kubernetes.addons"
                )
            )
        racks = any(group_racks(g) and group_hardware(g)[0] == gtype for g in site.gpu_nodes)
        claims = w.gpus_per_node and (site.kubernetes.gpu_allocation == "dra" or (racks and w.nodes > 1))
        if wanted == "training-operator" and claims:
            out.append(
                Problem(
                    f"{path}.kind",
                    f"{w.kind} runs as a TrainJob, whose pods cannot carry resource claims (the trainer 2.3.0's "
                    "runtimePatches have no resourceClaims), and here they claim "
                    + ("GPUs through DRA" if site.kubernetes.gpu_allocation == "dra" else "a ComputeDomain's channel")
                    + ": leave training-operator out of the addons to run it as an MPIJob",
                )
            )
