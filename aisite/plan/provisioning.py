"""What `aisite provision` installs: the boot server, one install profile per node group with `install`, and the
nodes to boot (their boot MAC and management address). Pure, like the rest of the plan."""

from __future__ import annotations

from ipaddress import IPv4Network

from aisite.errors import Problem
from aisite.model import Install, NodeGroup, Site
from aisite.plan.types import InstallProfile, Node, PartitionPlan, Plan, ProvisioningPlan, ProvisionTarget

# GPT partition types (the Discoverable Partitions Specification and UEFI's own).
BIOS_BOOT = "21686148-6449-6E6F-744E-656564454649"
EFI_SYSTEM = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
LINUX_FS = "0FC63DAF-8483-4772-8E79-3D69D8477DE4"
LINUX_SWAP = "0657FD6D-A4AB-43C4-84E5-0933C84B4F4F"
ESP_MIB = 512  # room for several kernels' worth of EFI binaries, as distributions size it
BIOS_BOOT_MIB = 1  # GRUB's core image on a GPT disk booted by BIOS


def partitions(install: Install) -> tuple[PartitionPlan, ...]:
    """The firmware's partition first (EFI system for UEFI, BIOS boot for legacy), then the group's own."""
    firmware = (
        PartitionPlan(1, "vfat", "/boot/efi", ESP_MIB, EFI_SYSTEM)
        if install.boot_mode == "uefi"
        else PartitionPlan(1, "bios", None, BIOS_BOOT_MIB, BIOS_BOOT)
    )
    own = tuple(
        PartitionPlan(
            i + 2,
            p.fs,
            p.mount,
            p.size_gb * 1024 if p.size_gb is not None else None,
            LINUX_SWAP if p.fs == "swap" else LINUX_FS,
        )
        for i, p in enumerate(install.partitions)
    )
    return (firmware, *own)


def profile(name: str, install: Install) -> InstallProfile:
    return InstallProfile(
        name=name,
        os=install.os,
        boot_mode=install.boot_mode,
        disk=install.disk,
        partitions=partitions(install),
        kernel_args=tuple(install.kernel_args),
    )


def provisioning_plan(site: Site, nodes: tuple[Node, ...]) -> ProvisioningPlan | None:
    p = site.provisioning
    if p is None:
        return None
    installs: dict[str, Install] = {}
    groups: list[tuple[str, NodeGroup]] = [("control-plane", site.control_plane)]
    groups.extend((g.name, g) for g in site.gpu_nodes)
    if site.storage_nodes:
        groups.append(("storage", site.storage_nodes))
    for name, group in groups:
        if group.install and group.install.method == "network":  # an adopted node is never reinstalled
            installs[name] = group.install
    net = IPv4Network(site.networks.management)
    return ProvisioningPlan(
        boot_server=str(p.boot_server),
        network=str(net),
        gateway=str(net.network_address + 1),
        dhcp=p.dhcp,
        http_port=p.http_port,
        wave_size=p.wave_size,
        retries=p.retries,
        install_timeout_s=p.install_timeout_s,
        boot_timeout_s=p.boot_timeout_s,
        mirror=p.mirror,
        image_packages=tuple(sorted(set(p.image_packages))),
        deploy_keys=tuple(p.deploy_keys),
        profiles=tuple(profile(name, install) for name, install in installs.items()),
        targets=tuple(
            ProvisionTarget(n.name, n.fqdn, n.group, n.management, n.storage) for n in nodes if n.group in installs
        ),
    )


def missing_boot_macs(plan: Plan, nodes: set[str] | None = None) -> list[Problem]:
    """A problem per node to install (of `nodes`, or all) that has no boot MAC: `aisite provision` cannot tell the
    boot server which node is which without it."""
    if plan.provisioning is None:
        return []
    missing = {t.node for t in plan.provisioning.targets if t.mac is None and (nodes is None or t.node in nodes)}
    return [
        Problem(
            f"{n.path}.management.mac",
            f"{n.name} has no boot MAC: declare it, or run `aisite oob discover STACK`, which proposes it from the "
            "node's BMC",
        )
        for n in plan.nodes
        if n.name in missing
    ]
