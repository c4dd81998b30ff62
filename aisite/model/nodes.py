"""Nodes: their groups (control plane, GPU groups by model), interfaces, install, firmware and provisioning."""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StrictBool, StrictInt, field_validator, model_validator

from aisite.catalog import (
    CUDA_REPO_ARCH,
    GENERIC_MODEL,
    KNOWN_MODELS,
    OS_RELEASES,
    SERVER_MODELS,
    NicPort,
    NodeOs,
    OsRelease,
)
from aisite.fields import (
    DebPackage,
    DiskPath,
    IfName,
    KernelArg,
    LabelKey,
    LabelValue,
    Mac,
    MountPoint,
    NamePattern,
    Url,
)
from aisite.model.base import Count, Name, SshKey, Strict, known_gpu_type, known_server_model, member_names
from aisite.model.oob import BmcSpec


class InterfaceSpec(Strict):
    address: IPv4Address | None = None
    mac: Mac | None = None


class Taint(Strict):
    key: LabelKey
    value: LabelValue = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class NodeSpec(Strict):
    """Per-node overrides; entry i of a group's `nodes` applies to its node i."""

    name: Name | None = None
    bmc: BmcSpec | None = None
    management: InterfaceSpec | None = None
    storage: InterfaceSpec | None = None
    labels: dict[LabelKey, LabelValue] = {}
    taints: list[Taint] = []


class InterfaceNames(Strict):
    """Host interface names; systemd-networkd .link files give the real NICs these names."""

    management: IfName = "mgmt0"
    storage: IfName = "stor0"
    rails: list[IfName] | None = None


class Partition(Strict):
    """A partition of the install disk, after the firmware's own (BIOS boot or EFI system) that aisite adds."""

    mount: MountPoint | None = None  # None for swap
    fs: Literal["ext4", "xfs", "swap"] = "ext4"
    size_gb: Annotated[int, Field(ge=1, le=1_000_000)] | None = None  # None: the rest of the disk (last only)


class Install(Strict):
    """How `aisite provision` installs the group's nodes: network boot from the site's boot server, the OS image
    written to `disk` (wiped), booted from it in `boot_mode`."""

    # network: installed by `aisite provision` from the boot server (Debian 12: an image aisite builds with
    # debootstrap from provisioning.mirror). adopt: installed already (DGX OS from the factory): reached over SSH
    # with the site's key, its OS and architecture checked against the plan before anything is applied, never
    # reinstalled; the fields below are for network installs only.
    method: Literal["network", "adopt"] = "network"
    # The OS the nodes run (aisite.catalog.OS_RELEASES): it picks NVIDIA's repository for them and what the
    # preflight expects of them.
    os: NodeOs = "debian-12"
    boot_mode: Literal["uefi", "legacy"] = "uefi"
    disk: DiskPath = "/dev/nvme0n1"
    partitions: Annotated[list[Partition], Field(min_length=1, max_length=32)] = [Partition(mount="/")]
    # The installed system's kernel command line (a serial console for the BMC's serial-over-LAN by default).
    kernel_args: Annotated[list[KernelArg], Field(max_length=32)] = ["console=tty0", "console=ttyS0,115200n8"]


# A BIOS attribute by its name in the vendor's attribute registry (Redfish Bios.Attributes), and its value as that
# schema types one: a boolean, an integer, or an enumeration or string.
BiosAttribute = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_.]{0,63}$")]

BiosValue = (
    StrictBool
    | Annotated[StrictInt, Field(ge=-(2**31), le=2**32 - 1)]
    | Annotated[str, Field(pattern=r"^[A-Za-z0-9 ._:/+@-]{0,128}$")]
)

FirmwareVersion = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")]


class FirmwareImage(Strict):
    """A firmware release, where the BMC fetches it from (Redfish SimpleUpdate's ImageURI: the site's mirror) and
    the image's SHA-256. aisite fetches the image and checks its digest before the BMC is told of it; the image is
    an https URL (a lab stack may use http)."""

    version: FirmwareVersion
    image: Url
    # The image file's SHA-256 (64 lowercase hex digits), as `sha256sum` prints it.
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class NicFirmware(Strict):
    """Settings of the rail NICs' own firmware (ConnectX non-volatile configuration, set on the host with mstflint's
    mstconfig and taken at the next boot). The link type is not among them: rails are Ethernet on a RoCE fabric,
    which the plan sets on every rail NIC it knows by PCI function."""

    # SR-IOV for pods' rail networks; "up to 63/127 virtual instances ... ConnectX-4 onwards" (NVIDIA, Single Root
    # IO Virtualization (SR-IOV)); mstconfig's own example: `set SRIOV_EN=1 NUM_OF_VFS=16`.
    sriov: bool | None = None
    num_vfs: Annotated[StrictInt, Field(ge=0, le=127)] | None = None

    @model_validator(mode="after")
    def _vfs_need_sriov(self) -> NicFirmware:
        if self.num_vfs and self.sriov is not True:
            raise ValueError("num_vfs needs sriov: true (the NIC offers no virtual function without it)")
        return self


class Firmware(Strict):
    """A node model's firmware baseline, read and set through its BMC (Redfish: IPMI has neither), applied in a
    rollout's waves: BIOS settings wait as pending settings for the node's reset. `nic` is set on the host instead
    (mstconfig), and a change of it rolls like a driver branch: out of service, set, rebooted."""

    bios: Annotated[dict[BiosAttribute, BiosValue], Field(max_length=256)] = {}
    # The system firmware (BIOS/UEFI) release, as ComputerSystem.BiosVersion reports it.
    bios_firmware: FirmwareImage | None = None
    nic: NicFirmware | None = None


class NodeGroup(Strict):
    count: Count | None = None
    name_pattern: NamePattern
    interfaces: InterfaceNames = InterfaceNames()
    nodes: list[NodeSpec] = []
    bmc: BmcSpec | None = None
    # Installed by `aisite provision` (nodes boot from their management NIC: management.mac is the boot MAC).
    install: Install | None = None
    firmware: Firmware | None = None
    labels: dict[LabelKey, LabelValue] = {}
    taints: list[Taint] = []

    @property
    def size(self) -> int:
        return self.count if self.count is not None else len(self.nodes)

    def node_names(self) -> list[str]:
        return member_names(self.name_pattern, self.size, [spec.name for spec in self.nodes])


class ControlPlane(NodeGroup):
    name_pattern: NamePattern = "cp{n:02d}"
    vip: IPv4Address


class PortSpec(Strict):
    """One compute port of a GPU server, in rail order: for a catalogued model, the label picks the model's port
    (the list a permutation of the model's, for firmware that numbers differently) and any field given overrides
    the document's; for the generic model, what the site knows of its NICs."""

    label: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,31}$")]
    netdev: IfName | None = None
    rdma: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")] | None = None
    pci: Annotated[str, Field(pattern=r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")] | None = None
    gpu: Annotated[int, Field(ge=0, le=63)] | None = None


class Rack(Strict):
    """A rack of a rack-scale group (NVL72): its compute trays share one NVLink domain and one IMEX domain."""

    name: Name
    # Compute trays in it, the group's nodes in order; None: a whole rack (the model's trays). A partial rack is a
    # smaller NVLink domain of its own: a job asking for a whole rack's GPUs is never placed on it.
    trays: Annotated[int, Field(ge=1, le=72)] | None = None


class GpuGroup(NodeGroup):
    name: Name
    model: Annotated[str, AfterValidator(known_server_model), Field(json_schema_extra={"enum": list(KNOWN_MODELS)})]
    ports: list[PortSpec] | None = None
    # Only for the generic model: the catalog knows these for named models.
    gpu_type: Annotated[str, AfterValidator(known_gpu_type)] | None = None
    gpus: Annotated[int, Field(ge=1, le=64)] | None = None
    nics: Annotated[int, Field(ge=0, le=32)] | None = None
    nic_speed_gbps: Annotated[int, Field(ge=1, le=3200)] | None = None
    nvswitch: bool | None = None
    rails: Annotated[int, Field(ge=0, le=32)] | None = None
    driver_branch: Annotated[int, Field(ge=400, le=999)] | None = None
    # Rack-scale models only: the racks its nodes fill, in order; None: whole racks named <group>-rack<NN>.
    racks: Annotated[list[Rack], Field(max_length=10_000)] | None = None
    # Other models, with site.facility: nodes a rack holds (racks <group>-rNN, filled in order); None: as many as
    # a rack's power budget allows.
    per_rack: Annotated[int, Field(ge=1, le=64)] | None = None
    # The most one node draws, in kW, where the catalog cites no figure for the model (aisite.catalog.NODE_POWER).
    power_kw: Annotated[float, Field(gt=0, le=500)] | None = None


class Nvidia(Strict):
    # Site-wide driver branch; None picks the catalog's default per GPU generation.
    driver_branch: Annotated[int, Field(ge=400, le=999)] | None = None
    # NVIDIA's CUDA repository (or the site's mirror of it) at its root: each GPU group installs from its own
    # <distro>/<arch>/ directory below it (debian12/x86_64/, ubuntu2404/sbsa/), by its OS and CPUs.
    repository: Url = "https://developer.download.nvidia.com/compute/cuda/repos/"

    @field_validator("repository")
    @classmethod
    def _root(cls, url: str) -> str:
        last = url.rstrip("/").rsplit("/", 2)
        if last[-1] in CUDA_REPO_ARCH.values():
            raise ValueError(
                f"names one {last[-1]} directory ({last[-2]}/{last[-1]}/): give the repository's root "
                f"({url.rstrip('/').rsplit('/', 2)[0]}/); aisite adds each GPU group's <distro>/<arch>/"
            )
        return url if url.endswith("/") else url + "/"


class Provisioning(Strict):
    """The boot server `aisite provision` configures and installs nodes from: DHCP (static leases per boot MAC, or
    proxy-DHCP beside the site's own), TFTP for iPXE and HTTP for the boot files, on the management network."""

    # Its address on the management network; Ansible reaches it there (SSH), as it reaches the nodes.
    boot_server: IPv4Address
    dhcp: Literal["static", "proxy"] = "static"
    http_port: Annotated[int, Field(ge=1, le=65535)] = 8080
    # Nodes installed at once, and how often a node is retried (BMC power cycle and boot again) after a failure.
    wave_size: Annotated[int, Field(ge=1, le=1000)] = 8
    retries: Annotated[int, Field(ge=0, le=10)] = 2
    # From power-on to the install's report, and from the report to SSH on the installed system.
    install_timeout_s: Annotated[int, Field(ge=60, le=86400)] = 3600
    boot_timeout_s: Annotated[int, Field(ge=30, le=86400)] = 1200
    # The Debian mirror the image is built from and the installed nodes use.
    mirror: Url = "http://deb.debian.org/debian"
    # Public keys installed for the deploy user (ansible.user) at install: how Ansible logs in afterwards. The lab
    # adds its own key.
    deploy_keys: list[SshKey] = []
    # Debian packages baked into the image besides its base (kernel, GRUB, systemd, sshd, Python): what the hosts
    # layer would install on every node anyway, so a new node does not fetch and install them itself.
    image_packages: Annotated[list[DebPackage], Field(max_length=256)] = []


def compute_ports(group: GpuGroup) -> tuple[NicPort, ...]:
    """The group's compute ports in rail order: the site's list over the catalog's, else the catalog's (empty
    where neither says; checks hold a site's list to the model's labels)."""
    known = {p.label: p for p in SERVER_MODELS[group.model].compute_ports} if group.model in SERVER_MODELS else {}
    if group.ports is None:
        return tuple(known.values())
    out = []
    for spec in group.ports:
        base = known.get(spec.label, NicPort(spec.label))
        out.append(
            NicPort(
                spec.label,
                spec.netdev if spec.netdev is not None else base.netdev,
                spec.rdma if spec.rdma is not None else base.rdma,
                spec.pci if spec.pci is not None else base.pci,
                spec.gpu if spec.gpu is not None else base.gpu,
            )
        )
    return tuple(out)


def group_hardware(group: GpuGroup) -> tuple[str, int, int, int, bool]:
    """(gpu type, gpus, compute NICs, NIC speed, nvswitch) of a group, from the catalog or its explicit counts."""
    if group.model == GENERIC_MODEL:
        return (
            group.gpu_type or "",
            group.gpus or 0,
            group.nics or 0,
            group.nic_speed_gbps or 100,
            bool(group.nvswitch),
        )
    m = SERVER_MODELS[group.model]
    return m.gpu_type, m.gpus, m.compute_nics, m.nic_speed_gbps, m.nvswitch


def group_os(group: NodeGroup) -> OsRelease:
    """The OS a group's nodes run: its install's, else Debian 12 (installed by hand, as before install.os)."""
    return OS_RELEASES[group.install.os if group.install else "debian-12"]


def group_cpu_arch(group: NodeGroup) -> str:
    """The group's CPU architecture as Debian names it: the catalog's for a GPU model (Grace trays are arm64)."""
    model = SERVER_MODELS.get(group.model) if isinstance(group, GpuGroup) else None
    return model.cpu_arch if model else "amd64"


def group_racks(group: GpuGroup) -> list[tuple[str, int, int]]:
    """(rack name, its first node's index in the group, trays in it) for a rack-scale group, in order; [] for a
    model without racks. Without `racks`, whole racks of the model's trays (a last, partial one holds the rest:
    the checks refuse it unless declared)."""
    model = SERVER_MODELS.get(group.model)
    if model is None or not model.rack_trays:
        return []
    full = model.rack_trays
    if group.racks is None:
        count = -(-group.size // full)
        return [(f"{group.name}-rack{r + 1:02d}", r * full, min(full, group.size - r * full)) for r in range(count)]
    out, first = [], 0
    for rack in group.racks:
        trays = rack.trays if rack.trays is not None else full
        out.append((rack.name, first, trays))
        first += trays
    return out
