"""Node groups: sizes, the control plane, GPU groups against the catalog (racks, ports, driver, CPU), names, MACs,
firmware images and provisioning."""

from __future__ import annotations

from aisite.catalog import (
    CDMM_BRANCH,
    CDMM_GPU_TYPES,
    CUDA_REPO_ARCH,
    GENERIC_MODEL,
    GPU_TYPES,
    NODE_POWER,
    OS_RELEASES,
    SERVER_MODELS,
)
from aisite.checks.common import switch_groups
from aisite.errors import Problem
from aisite.fields import DNS_LABEL
from aisite.model import (
    GpuGroup,
    Install,
    NodeGroup,
    Site,
    compute_ports,
    group_hardware,
    group_os,
    group_racks,
)
from aisite.plan import budget_w, group_power_racks, group_rails, node_power_w


def check_firmware_images(site: Site, groups: list[tuple[str, NodeGroup]], out: list[Problem]) -> None:
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


# Fields that say how a network install lays out the disk: an adopted node keeps the disk it was installed on.
NETWORK_ONLY = ("boot_mode", "disk", "partitions", "kernel_args")


def check_provisioning(site: Site, groups: list[tuple[str, NodeGroup]], out: list[Problem]) -> None:
    for path, g in groups:
        if g.install is None:
            continue
        release = OS_RELEASES[g.install.os]
        if g.install.method == "adopt":
            out.extend(
                Problem(f"{path}.install.{key}", "a network install's setting: an adopted node is never reinstalled")
                for key in NETWORK_ONLY
                if key in g.install.model_fields_set
            )
        elif release.network_install is None:
            out.append(
                Problem(
                    f"{path}.install.os",
                    f"{release.name} is installed from NVIDIA's own image, not by aisite: adopt nodes that run it "
                    "(method: adopt)",
                )
            )
        elif release.network_install == "autoinstall":
            out.append(
                Problem(
                    f"{path}.install.os",
                    f"{release.name}: aisite's network install builds Debian 12 only; install Ubuntu with its own "
                    "installer and adopt the nodes (method: adopt)",
                )
            )
    installing = [(path, g) for path, g in groups if g.install and g.install.method == "network"]
    if installing and site.provisioning is None:
        out.extend(
            Problem(f"{path}.install", "needs site.provisioning: the boot server that installs the nodes")
            for path, _ in installing
        )
    for path, group in installing:
        assert group.install is not None
        check_partitions(f"{path}.install", group.install, out)


def check_partitions(path: str, install: Install, out: list[Problem]) -> None:
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


def check_group_sizes(groups: list[tuple[str, NodeGroup]], out: list[Problem]) -> None:
    for path, group in groups:
        if group.count is not None and len(group.nodes) > group.count:
            out.append(Problem(f"{path}.nodes", f"{len(group.nodes)} node entries but count is {group.count}"))


def check_control_plane(site: Site, out: list[Problem]) -> None:
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


GENERIC_ONLY = ("gpu_type", "gpus", "nics", "nic_speed_gbps", "nvswitch")


def check_gpu_groups(site: Site, out: list[Problem]) -> None:
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
            for key in GENERIC_ONLY:
                if getattr(group, key) is not None:
                    out.append(Problem(f"{path}.{key}", f"set only with model 'generic'; {group.model} defines it"))
        gpu_type, _, nics, _, _ = group_hardware(group)
        if group.rails is not None and group.rails > nics:
            out.append(Problem(f"{path}.rails", f"{group.rails} rails but {group.model} has {nics} compute NICs"))
        rails = group_rails(group)
        check_ports(path, group, nics, out)
        if group.interfaces.rails is not None and len(group.interfaces.rails) < rails:
            out.append(Problem(f"{path}.interfaces.rails", f"{len(group.interfaces.rails)} names for {rails} rails"))
        if gpu_type:
            check_driver(site, path, group, gpu_type, out)
        check_racks(path, group, out)
        check_power(site, path, group, out)
        check_cpu_arch(path, group, out)
        for name, _, _ in group_racks(group):
            if racks.setdefault(name, path) != path:
                out.append(Problem(f"{path}.racks", f"rack {name!r} is already a rack of {racks[name]}"))


def check_cpu_arch(path: str, group: GpuGroup, out: list[Problem]) -> None:
    """NVIDIA's repository serves the group's OS for its CPUs (it has no Debian for Arm servers), and aisite's
    network install builds amd64 images only."""
    model = SERVER_MODELS.get(group.model)
    if model is None:
        return
    release = group_os(group)
    if model.cpu_arch not in release.cuda_arches:
        out.append(
            Problem(
                f"{path}.install" + (".os" if group.install else ""),
                f"{release.name}: NVIDIA's CUDA repository has no {release.cuda_distro} packages for "
                f"{CUDA_REPO_ARCH[model.cpu_arch]} ({group.model} trays are {model.cpu_arch}); run "
                + " or ".join(sorted(o.name for o in OS_RELEASES.values() if model.cpu_arch in o.cuda_arches))
                + " (install: {method: adopt, os: ...} for trays that arrive installed)",
            )
        )
    elif model.cpu_arch != "amd64" and group.install is not None and group.install.method == "network":
        out.append(
            Problem(
                f"{path}.install.method",
                f"network: aisite builds amd64 install images only; {group.model} trays are {model.cpu_arch}: "
                "install them with the vendor's image and adopt them (method: adopt)",
            )
        )


def check_power(site: Site, path: str, group: GpuGroup, out: list[Problem]) -> None:
    """With site.facility, every rack the group's nodes fill stays within the rack's power, and a liquid-cooled
    model goes only where the racks are; a node's power is the catalog's figure, else the site's."""
    facility, known = site.facility, NODE_POWER.get(group.model)
    rack_scale = bool(group_racks(group))
    if group.per_rack is not None and (facility is None or rack_scale):
        why = "a rack-scale system fills its own racks" if rack_scale else "it needs site.facility (the racks' budget)"
        out.append(Problem(f"{path}.per_rack", f"nodes a rack, but {why}"))
    if known and known.max_w and group.power_kw is not None:
        out.append(
            Problem(
                f"{path}.power_kw",
                f"the catalog holds {group.model}'s ({known.max_w / 1000:g} kW max, {known.source}): leave it out",
            )
        )
    if facility is None:
        return
    watts, budget = node_power_w(group), budget_w(site)
    if not watts:
        out.append(
            Problem(
                f"{path}.power_kw",
                f"no document aisite cites gives {group.model}'s power"
                + (f" ({known.source})" if known else "")
                + ": declare the most one node draws, in kW, to hold its racks to site.facility.rack_power_kw",
            )
        )
        return
    if known and known.cooling == "liquid" and facility.rack_cooling != "liquid":
        out.append(
            Problem(
                f"{path}.model",
                f"{group.model} is liquid-cooled ({known.source}) but site.facility.rack_cooling is "
                f"{facility.rack_cooling}",
            )
        )
    kw = f"{watts / 1000:g} kW"
    for name, _, count in group_power_racks(site, group):
        if count * watts > budget:
            where = f"{path}.racks" if rack_scale else (f"{path}.per_rack" if group.per_rack else f"{path}.model")
            fit = budget // watts
            out.append(
                Problem(
                    where,
                    f"rack {name}: {count} {group.model} at {kw} max each draw {count * watts / 1000:g} kW, over "
                    f"site.facility.rack_power_kw ({budget / 1000:g} kW)"
                    + (f": at most {fit} a rack" if fit and not rack_scale else ""),
                )
            )
            break  # the group's racks are alike: said once


def check_racks(path: str, group: GpuGroup, out: list[Problem]) -> None:
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


def check_ports(path: str, group: GpuGroup, nics: int, out: list[Problem]) -> None:
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


def check_driver(site: Site, path: str, group: GpuGroup, gpu_type: str, out: list[Problem]) -> None:
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
    if gpu_type in CDMM_GPU_TYPES and branch < CDMM_BRANCH:
        out.append(
            Problem(
                where,
                f"R{branch}: {gpu_type}'s memory is kept by the driver (CDMM) from R{CDMM_BRANCH} on; before it the "
                "OS onlines the GPUs' memory as NUMA nodes and the kubelet counts it as the node's",
            )
        )


def check_names(site: Site, groups: list[tuple[str, NodeGroup]], out: list[Problem]) -> None:
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
    for path, sgroup in switch_groups(site):
        names = sgroup.switch_names()
        generated(path, sgroup.name_pattern, names)
        for i, name in enumerate(names):
            claim(name, f"{path}.nodes[{i}]", f"{path}.nodes[{i}]")


def check_macs(groups: list[tuple[str, NodeGroup]], out: list[Problem]) -> None:
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
