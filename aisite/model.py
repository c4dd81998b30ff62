"""The site model: the typed form of a stack file's `aisite:site` config.

Pydantic checks shapes, types and ranges here (an unknown key is an error, so typos never pass); rules that
span several fields or blocks live in `aisite.checks`, which reports them with the same `path: message` form.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictInt, model_validator

from aisite.catalog import GENERIC_MODEL, GPU_TYPES, KNOWN_MODELS, SERVER_MODELS, NicPort
from aisite.drivers.bmcs import BMC_PROTOCOLS
from aisite.drivers.switches import CONFIGURED, SWITCH_OS
from aisite.fields import (
    AbsPath,
    Account,
    AptSource,
    DebPackage,
    DiskPath,
    DnsLabel,
    DnsSubdomain,
    EnvName,
    GitBranch,
    Group,
    Hostname,
    IfName,
    Image,
    KernelArg,
    LabelKey,
    LabelValue,
    Mac,
    MountPoint,
    NamePattern,
    NtpServer,
    PemCerts,
    PulumiKey,
    RegistryHost,
    RegistryRef,
    RelPath,
    SecretName,
    SwitchModel,
    Text,
    UnixUser,
    Url,
)

_SSH_KEY = r"^(ssh-(ed25519|rsa)|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+( .*)?$"
SshKey = Annotated[str, Field(pattern=_SSH_KEY)]


def _model(value: str) -> str:
    if value not in KNOWN_MODELS:
        raise ValueError(f"unknown GPU server model {value!r}; known: {', '.join(KNOWN_MODELS)}")
    return value


def _gpu_type(value: str) -> str:
    if value not in GPU_TYPES:
        raise ValueError(f"unknown GPU type {value!r}; known: {', '.join(GPU_TYPES)}")
    return value


Name = DnsLabel
Count = Annotated[int, Field(ge=0, le=100_000)]
Percent = Annotated[int, Field(ge=0, le=100)]


class Strict(BaseModel):
    # Numbers are finite: `.inf` or `.nan` would reach plan JSON as Infinity/NaN.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, allow_inf_nan=False)


class PasswordSource(Strict):
    """Where a secret's password comes from; the value itself is never in the stack file."""

    env: EnvName | None = None
    pulumi_config: PulumiKey | None = None
    vault_file: AbsPath | None = None


class Secret(Strict):
    username: Account
    password_from: PasswordSource


def _bmc_protocol(value: str) -> str:
    if value not in BMC_PROTOCOLS:
        raise ValueError(f"{value!r} is not a BMC protocol aisite drives; known: {', '.join(_BMC_NAMES)}")
    return value


# The BMC protocols, from their drivers (aisite/drivers/bmcs), in the order discovery asks them.
_BMC_NAMES = [d.name for d in sorted(BMC_PROTOCOLS.values(), key=lambda d: d.rank)]
BmcProtocolName = Annotated[str, AfterValidator(_bmc_protocol), Field(json_schema_extra={"enum": _BMC_NAMES})]


class BmcSpec(Strict):
    protocol: BmcProtocolName | None = None
    address: IPv4Address | None = None
    mac: Mac | None = None
    credentials: SecretName | None = None
    port: Annotated[int, Field(ge=1, le=65535)] | None = None
    power: Literal["on", "off"] | None = None


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

    # Debian 12 from an image aisite builds with debootstrap (the site's provisioning.mirror). Ubuntu 24.04's
    # autoinstall is not supported yet.
    os: Literal["debian-12"] = "debian-12"
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
        names = [self.name_pattern.format(n=i + 1) for i in range(self.size)]
        for i, spec in enumerate(self.nodes[: self.size]):
            if spec.name:
                names[i] = spec.name
        return names


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
    model: Annotated[str, AfterValidator(_model), Field(json_schema_extra={"enum": list(KNOWN_MODELS)})]
    ports: list[PortSpec] | None = None
    # Only for the generic model: the catalog knows these for named models.
    gpu_type: Annotated[str, AfterValidator(_gpu_type)] | None = None
    gpus: Annotated[int, Field(ge=1, le=64)] | None = None
    nics: Annotated[int, Field(ge=0, le=32)] | None = None
    nic_speed_gbps: Annotated[int, Field(ge=1, le=3200)] | None = None
    nvswitch: bool | None = None
    rails: Annotated[int, Field(ge=0, le=32)] | None = None
    driver_branch: Annotated[int, Field(ge=400, le=999)] | None = None
    # Rack-scale models only: the racks its nodes fill, in order; None: whole racks named <group>-rack<NN>.
    racks: Annotated[list[Rack], Field(max_length=10_000)] | None = None


class Disk(Strict):
    tier: Literal["nvme", "ssd", "hdd"]  # a Ceph OSD's device class
    size_gb: Annotated[int, Field(ge=1, le=10_000_000)]
    count: Annotated[int, Field(ge=1, le=1024)] = 1


class Export(Strict):
    name: Name
    path: AbsPath
    tier: Literal["nvme", "ssd", "hdd"] = "nvme"


DeviceClass = Literal["nvme", "ssd", "hdd"]
# Ceph names a pool with letters, digits, '.', '_' and '-'; aisite keeps to lower case and a leading letter.
CephPoolName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_.-]{0,62}$")]
# An S3 storage class as RGW's placement targets name them (STANDARD, STANDARD_IA, ...).
S3StorageClass = Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]{0,31}$")]


class CephPool(Strict):
    """A pool: replicated (`size` copies) or erasure-coded (`k` data and `m` coding chunks), each copy or chunk in
    another failure domain (a storage node, or only another OSD), on the OSDs of one device class (or all)."""

    name: CephPoolName
    application: Literal["cephfs", "rgw", "rbd"]
    kind: Literal["replicated", "erasure"] = "replicated"
    size: Annotated[int, Field(ge=2, le=6)] | None = None  # replicated; 3 when not given
    k: Annotated[int, Field(ge=2, le=16)] | None = None
    m: Annotated[int, Field(ge=1, le=8)] | None = None
    failure_domain: Literal["host", "osd"] = "host"
    device_class: DeviceClass | None = None
    # The share of its device class's raw capacity the pool is expected to fill, in percent: its placement groups
    # are sized from it (Ceph's target_size_ratio) and the plan prints its usable capacity.
    share: Annotated[int, Field(ge=1, le=100)] = 10

    @model_validator(mode="after")
    def _shape(self) -> CephPool:
        if self.kind == "erasure" and (self.k is None or self.m is None):
            raise ValueError("an erasure-coded pool needs k and m")
        if self.kind == "replicated" and (self.k is not None or self.m is not None):
            raise ValueError("k and m are for erasure-coded pools; a replicated pool has size")
        if self.kind == "erasure" and self.size is not None:
            raise ValueError("size is for replicated pools; an erasure-coded pool's is k+m")
        return self


class CephFilesystem(Strict):
    """CephFS: its metadata pool, its first data pool (replicated: Ceph keeps every file's backtrace there, and
    refuses an erasure-coded one without --force) and directory layouts placing a tree's files in other pools."""

    name: Name = "data"
    metadata_pool: CephPoolName
    data_pool: CephPoolName
    layouts: Annotated[dict[AbsPath, CephPoolName], Field(max_length=64)] = {}


class S3Transition(Strict):
    """A lifecycle rule: objects under `prefix` move to `storage_class` `days` after they were written."""

    prefix: Annotated[str, Field(pattern=r"^[A-Za-z0-9!_.*'()/-]{0,256}$")] = ""
    days: Annotated[int, Field(ge=1, le=36500)]
    storage_class: S3StorageClass


class CephS3(Strict):
    """S3 through RGW: each storage class a placement target's pool (STANDARD is where objects land)."""

    storage_classes: Annotated[dict[S3StorageClass, CephPoolName], Field(min_length=1, max_length=16)]
    lifecycle: Annotated[list[S3Transition], Field(max_length=64)] = []


class CephTenant(Strict):
    """What a tenant (of site.kubernetes.tenants) asks of Ceph: a CephFS directory of its own with a quota, and an S3
    user with a quota, in GB as the disks are counted. Their keys are made by Ceph at install, never written here."""

    cephfs_gb: Annotated[int, Field(ge=0, le=10**9)] = 0
    s3_gb: Annotated[int, Field(ge=0, le=10**9)] = 0


class Ceph(Strict):
    """A Ceph cluster on the storage nodes: an OSD per disk (its device class the disk's tier), monitors on three
    nodes (the storage nodes, or the control plane's), managers beside them, MDS and RGW on the storage nodes."""

    # The release the nodes install: Debian 12's 16.2 (pacific) in the lab, upstream's repository on a site.
    release: Annotated[str, Field(pattern=r"^(1[6-9]|2[0-9])\.2$")] = "16.2"
    monitors: Literal["storage", "control-plane"] = "storage"
    # Ceph ignores a target at or below osd_memory_base + osd_memory_cache_min (768 + 128 MiB in 16.2.15's
    # defaults, `ceph-conf -D`): an OSD then grows as it likes.
    osd_memory_target_mib: Annotated[int, Field(gt=896, le=1_048_576)] = 4096
    pools: Annotated[list[CephPool], Field(min_length=1, max_length=64)]
    filesystem: CephFilesystem | None = None
    s3: CephS3 | None = None
    tenants: Annotated[dict[Name, CephTenant], Field(max_length=1024)] = {}


class StorageNodes(NodeGroup):
    name_pattern: NamePattern = "stor{n:02d}"
    disks: list[Disk] = []
    exports: list[Export] = []
    # The kernel NFS server on real sites; NFS-Ganesha (user space) where the kernel has none (the lab).
    nfs_server: Literal["kernel", "ganesha"] = "kernel"
    ceph: Ceph | None = None


def _switch_os(names: tuple[str, ...]) -> AfterValidator:
    def check(value: str) -> str:
        if value not in names:
            raise ValueError(f"{value!r} is not a switch OS aisite configures here; known: {', '.join(names)}")
        return value

    return AfterValidator(check)


# What an access switch may run: an OS aisite configures (any: the checks say which it configures access
# switches on), or `generic`.
ACCESS_CHOICES = (*CONFIGURED, *(n for n in SWITCH_OS if n not in CONFIGURED))

# The switch operating systems, from their drivers (aisite/drivers/switches): a fabric tier runs one aisite
# configures; an access switch may also be `generic` (the site's to configure).
SwitchOs = Annotated[str, _switch_os(CONFIGURED), Field(json_schema_extra={"enum": list(CONFIGURED)})]
AccessSwitchOs = Annotated[str, _switch_os((*ACCESS_CHOICES,)), Field(json_schema_extra={"enum": list(ACCESS_CHOICES)})]


class SwitchSpec(Strict):
    name: Name | None = None
    management: InterfaceSpec | None = None


class SwitchGroupBase(Strict):
    count: Count
    name_pattern: NamePattern
    os: str
    model: SwitchModel | Literal[""] = ""
    # The OS release the switches run ("5.15"): NVUE's syntax changed in Cumulus Linux 5.15, so aisite renders
    # the release's own; required for Cumulus leaves and spines.
    os_version: Annotated[str, Field(pattern=r"^[0-9]{1,2}\.[0-9]{1,2}(\.[0-9]{1,3})?$")] | None = None
    ports: Annotated[int, Field(ge=1, le=1024)]
    speed_gbps: Annotated[int, Field(ge=1, le=3200)]
    nodes: list[SwitchSpec] = []

    def switch_names(self) -> list[str]:
        names = [self.name_pattern.format(n=i + 1) for i in range(self.count)]
        for i, spec in enumerate(self.nodes[: self.count]):
            if spec.name:
                names[i] = spec.name
        return names


class SwitchGroup(SwitchGroupBase):
    """Fabric leaves or spines."""

    os: SwitchOs


VlanId = Annotated[int, Field(ge=2, le=4094)]


class AccessVlans(Strict):
    """The VLAN of each network on the access switches: a node's or BMC's port is an access port of its network's
    VLAN; the uplinks carry them all, tagged. Site-local numbers: match the site's core."""

    management: VlanId = 10
    storage: VlanId = 20
    oob: VlanId = 30


class AccessSwitchGroup(SwitchGroupBase):
    """Management (in-band: management and storage ports) or out-of-band (BMC and switch management ports).
    `generic`: the site configures them itself (aisite plans and checks their cables only)."""

    os: AccessSwitchOs = "generic"
    vlans: AccessVlans = AccessVlans()
    # Ports to the site's network (its core or a border pair), trunks of every VLAN above. aisite replaces the
    # switch's whole configuration, so a port not planned here or by a cable is left unconfigured.
    uplinks: Annotated[list[IfName], Field(max_length=16)] = []


class Switches(Strict):
    leaves: SwitchGroup
    spines: SwitchGroup
    # The third tier: with fabric.pod_size, each pod's leaves cable to that pod's spines alone and every spine to
    # the super-spines (of its plane: fabric.super_spine_planes).
    super_spines: SwitchGroup | None = None
    management: AccessSwitchGroup | None = None
    oob: AccessSwitchGroup | None = None


class Networks(Strict):
    """The site's networks. In the pooled ones (oob, management, storage, loopbacks) the first host address is the
    gateway and is never handed out; nodes, BMCs and switches get the next free addresses in the file's order,
    skipping every address the stack names anywhere (DNS and NTP servers, the VIP, the boot server, registries,
    addresses given by hand): `aisite plan` lists what each network keeps back. Rails and p2p are laid out by
    position and may hold no named server."""

    oob: IPv4Network
    management: IPv4Network
    loopbacks: IPv4Network
    p2p: IPv4Network
    rails: list[IPv4Network]
    storage: IPv4Network
    pods: IPv4Network
    services: IPv4Network


class RoceProfile(Strict):
    """Lossless RoCE; defaults are NVIDIA's reference values: PFC on priority 3, trust DSCP, RoCE data DSCP 26
    (ToS 106) to traffic class 3, CNP DSCP 48 to priority 6, ECN on class 3 (Cumulus and Onyx defaults)."""

    pfc_priority: Annotated[int, Field(ge=0, le=7)] = 3
    trust: Literal["dscp"] = "dscp"
    roce_dscp: Annotated[int, Field(ge=0, le=63)] = 26
    cnp_dscp: Annotated[int, Field(ge=0, le=63)] = 48
    cnp_priority: Annotated[int, Field(ge=0, le=7)] = 6
    ecn_min_kb: Annotated[int, Field(ge=1, le=1_000_000)] = 150
    ecn_max_kb: Annotated[int, Field(ge=1, le=1_000_000)] = 1500
    ets_roce_percent: Percent = 50
    # ECN marking probability at the maximum threshold (marking rises to it linearly from the minimum).
    ecn_probability_percent: Annotated[int, Field(ge=1, le=100)] = 100
    pfc_watchdog: bool = True
    # The PFC watchdog polls every poll_ms; a queue paused for detection_ms (a whole number of polls) is stormed
    # and its packets dropped; restoration_ms after the storm ends, PFC is honoured again.
    pfc_watchdog_poll_ms: Annotated[int, Field(ge=10, le=1000)] = 100
    pfc_watchdog_detection_ms: Annotated[int, Field(ge=10, le=5000)] = 300
    pfc_watchdog_restoration_ms: Annotated[int, Field(ge=10, le=60000)] = 300
    gid_index: Annotated[int, Field(ge=0, le=255)] = 3


Ratio = Annotated[float, Field(ge=1, le=64)]


class Oversubscription(Strict):
    """The most a tier may be oversubscribed: bandwidth down to what it serves over bandwidth up, as N for N:1."""

    leaves: Ratio = 1
    spines: Ratio = 1  # three tiers only: a pod's spines, down to its leaves and up to the super-spines


class Fabric(Strict):
    topology: Literal["rail-optimised"] = "rail-optimised"
    asn_base: Annotated[int, Field(ge=64512, le=4294967294)] = 4200000000
    switch_mtu: Annotated[int, Field(ge=1500, le=9216)] = 9216
    host_mtu: Annotated[int, Field(ge=1500, le=9216)] = 9000
    # GPU nodes per scalable unit: NIC position N of each node in one unit cables to the unit's leaf for rail N.
    scalable_unit: Annotated[int, Field(ge=1, le=100_000)] = 32
    # Leaves per scalable unit; rails are spread evenly over them (one leaf per rail by default).
    leaves_per_su: Annotated[int, Field(ge=1, le=1024)] | None = None
    uplinks_per_spine: Annotated[int, Field(ge=1, le=16)] = 1
    # Three tiers: scalable units per pod (with switches.super_spines); spines.count is split evenly over the pods.
    pod_size: Annotated[int, Field(ge=1, le=100_000)] | None = None
    uplinks_per_super_spine: Annotated[int, Field(ge=1, le=16)] = 1
    # Super-spines in planes: spine i of every pod cables to each super-spine of plane i mod planes (1: every
    # spine to every super-spine). A fat tree of fixed-radix switches has one plane per spine of a pod.
    super_spine_planes: Annotated[int, Field(ge=1, le=1024)] = 1
    oversubscription: Oversubscription = Oversubscription()
    # Refuse a fabric whose bisection bandwidth per GPU (as `aisite plan` prints it) is below this.
    min_bisection_gbps_per_gpu: Annotated[float, Field(gt=0, le=3200)] | None = None
    # Addresses per GPU node, in each leaf's block of each rail, for pods' rail interfaces (macvlan pods are the
    # leaf's neighbours, so they must be in its block). 0: no pod rail networks; the block holds the hosts alone.
    rail_pod_addresses: Annotated[int, Field(ge=0, le=64)] = 0
    # BFD on the fabric's BGP sessions; None: on, except on SONiC (whose BGP_NEIGHBOR table has no BFD field).
    bfd: bool | None = None
    roce: RoceProfile = RoceProfile()


class BmcAccount(Strict):
    """A local account the BMC role keeps on every Redfish BMC: user name and password from the named secret."""

    secret: SecretName
    role: Literal["Administrator", "Operator", "ReadOnly"] = "Operator"


class OobDefaults(Strict):
    protocol: BmcProtocolName = "redfish"
    credentials: SecretName | None = None
    # The power state the BMC role holds every node in (a node's or group's bmc.power overrides it).
    power: Literal["on", "off"] = "on"
    # Check the BMCs' Redfish TLS certificates; many ship self-signed ones, so a site may turn this off.
    tls_verify: bool = True
    # Accounts kept on every Redfish BMC (besides the one in credentials); NTP comes from site.ntp_servers.
    accounts: list[BmcAccount] = []


GpuCount = Annotated[int, Field(ge=0, le=10_000_000)]


class Tenant(Strict):
    name: Name
    # GPUs the tenant is guaranteed (Kueue's nominal quota): a number on a site with one GPU type, else per type.
    gpu_quota: GpuCount | dict[Annotated[str, AfterValidator(_gpu_type)], GpuCount]
    groups: list[Group] = []
    # GPUs of each type the tenant may borrow from the cohort beyond its quota / lend from it (None: no limit).
    borrowing_limit: GpuCount | None = None
    lending_limit: GpuCount | None = None
    # The Pod Security level its namespace enforces. restricted: pods run as non-root with no capabilities (the
    # PyTorch TrainJobs and the two-pod and fio Jobs do). baseline admits root, which the MPI Operator's workers
    # need to start sshd in the pinned images; neither admits privileged pods or host paths.
    pod_security: Literal["restricted", "baseline"] = "restricted"


Addon = Literal[
    "gpu-operator",
    "jupyterhub",
    "kserve",
    "network-operator",
    "kueue",
    "mpi-operator",
    "training-operator",
    "volcano",
    "flux",
    "pulumi-operator",
    "prometheus",
]


class Registry(Strict):
    """A registry the nodes pull from: mirrors tried in order before it, and its CA when it is private."""

    host: RegistryHost
    mirrors: list[Url] = []
    ca: PemCerts | None = None


class Containerd(Strict):
    # An APT source line for an air-gapped mirror; None: the distribution's own package.
    apt_repository: AptSource | None = None
    sandbox_image: Image = "registry.k8s.io/pause:3.10.1"
    registries: list[Registry] = []
    # On GPU nodes: make the nvidia runtime containerd's default (else pods ask for it by RuntimeClass).
    nvidia_default_runtime: bool = True


class Monitoring(Strict):
    """Prometheus and Alertmanager (the prometheus addon): kept on persistent volumes, not in the pod."""

    # How long Prometheus keeps samples (its duration syntax); it also stops at 85 % of its volume.
    retention: Annotated[str, Field(pattern=r"^[1-9][0-9]{0,5}(h|d|w|y)$")] = "15d"
    prometheus_storage_gi: Annotated[int, Field(ge=1, le=1_000_000)] = 100
    alertmanager_storage_gi: Annotated[int, Field(ge=1, le=10_000)] = 2
    # The StorageClass of both volumes; None: the cluster's default class. Prometheus's TSDB wants a POSIX file
    # system: block or local storage rather than NFS.
    storage_class: DnsSubdomain | None = None


class EtcdBackup(Strict):
    """etcd snapshots on the control-plane nodes (role etcd_backup: a systemd timer), the newest `keep` kept."""

    schedule: Literal["hourly", "daily", "weekly"] = "hourly"
    keep: Annotated[int, Field(ge=1, le=10_000)] = 48
    # Where each snapshot is copied off the node (rsync): an absolute path (a mounted share) or host:/path over SSH
    # with root's key, which the site provides; None keeps them on the node only. A snapshot holds every Secret of
    # the cluster: the destination must be as private as the node.
    copy_to: (
        Annotated[
            str, Field(pattern=r"^([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?:)?/[A-Za-z0-9._/-]{0,1000}$", max_length=1200)
        ]
        | None
    ) = None


# What a login provider's claim is named (OAuthenticator reads it from the user's data).
Claim = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")]


class NotebookLogin(Strict):
    """The site's OAuth 2 / OpenID Connect provider, through OAuthenticator's GenericOAuthenticator. Its client
    secret is the key `client-secret` of the Secret `jupyterhub-oauth` the site creates in the jupyterhub namespace,
    never a value here. A user's groups (the `groups_claim`) are the tenants' `groups` that user may spawn in."""

    client_id: Annotated[str, Field(pattern=r"^[A-Za-z0-9._:@-]{1,200}$")]
    authorize_url: Url
    token_url: Url
    userdata_url: Url
    # The hub's own address as the provider calls it back: https://<hub>/hub/oauth_callback.
    callback_url: Url
    username_claim: Claim = "preferred_username"
    groups_claim: Claim = "groups"


class Notebooks(Strict):
    """Notebooks for every tenant (the jupyterhub addon): its profiles are sized from here and each tenant's quota."""

    # Without a login provider JupyterHub's default authenticator admits anyone: the addon needs one (checked).
    login: NotebookLogin | None = None
    # Jupyter Docker Stacks' PyTorch notebooks, the CUDA 12 build for GPU profiles (docs/using/selecting.md: a
    # `cuda12-` prefix to the tag; the 2026-08-24 build in the project's wiki, 2026-08).
    image: Image = "quay.io/jupyter/pytorch-notebook:2026-08-24"
    gpu_image: Image = "quay.io/jupyter/pytorch-notebook:cuda12-2026-08-24"
    # Each user's home: a volume of its own in the tenant's namespace (None: the cluster's default class).
    home_gi: Annotated[int, Field(ge=1, le=10_000)] = 10
    storage_class: DnsSubdomain | None = None
    # The CPU profile, and what a GPU profile gets with each GPU.
    cpus: Annotated[int, Field(ge=1, le=512)] = 2
    memory_gi: Annotated[int, Field(ge=1, le=8192)] = 8
    cpus_per_gpu: Annotated[int, Field(ge=1, le=512)] = 8
    memory_gi_per_gpu: Annotated[int, Field(ge=1, le=8192)] = 64
    # A server idle this long is stopped (JupyterHub's idle culler), its GPUs back in the tenant's quota.
    idle_minutes: Annotated[int, Field(ge=10, le=10_080)] = 60


class Kubernetes(Strict):
    version: Annotated[str, Field(pattern=r"^1\.\d+\.\d+$")] = "1.35.6"
    cni: Literal["calico", "cilium", "flannel"] = "calico"
    # Package source of kubeadm, kubelet and kubectl; None: pkgs.k8s.io for the version's minor release.
    package_repository: Url | None = None
    # Manifest the CNI is applied from; None: the pinned upstream manifest of the CNI (Calico's).
    cni_manifest: Url | None = None
    # Pod Security admission level enforced in every namespace that does not set its own.
    pod_security: Literal["privileged", "baseline", "restricted"] = "baseline"
    containerd: Containerd = Containerd()
    # Tenants' quotas may add up to more GPUs of a type than the site has (Kueue then shares them by borrowing).
    gpu_overcommit: bool = False
    # The GPU Operator's MIG strategy (single: whole-GPU resource names even with MIG; mixed: one per profile).
    mig_strategy: Literal["none", "single", "mixed"] = "single"
    # How pods get GPUs: the GPU Operator's device plugin (the nvidia.com/gpu resource), or Dynamic Resource
    # Allocation through NVIDIA's DRA driver (a ResourceClaim of its gpu.nvidia.com DeviceClass per pod). Racks
    # (NVL72) get the DRA driver's ComputeDomains either way.
    gpu_allocation: Literal["device-plugin", "dra"] = "device-plugin"
    # Chart name -> Helm repository (a mirror for air-gapped sites); unnamed charts use their upstream repository.
    chart_repositories: dict[DnsLabel, Url] = {}
    # Registry the benchmark and training jobs' images are pulled from (a mirror for air-gapped sites); None: each
    # image's upstream registry (nvcr.io, ghcr.io).
    job_registry: RegistryRef | None = None
    # One mirror for every image (air gap): containerd on every node pulls each upstream registry's images from
    # <mirror>/v2/<registry>/... (e.g. https://mirror.site:5000 holding nvcr.io/nvidia/... as `crane copy` or a
    # proxy project lays them out). A registry the site lists under containerd.registries keeps its own entry.
    image_mirror: Url | None = None
    monitoring: Monitoring = Monitoring()
    etcd_backup: EtcdBackup = EtcdBackup()
    notebooks: Notebooks = Notebooks()
    # kubeadm's certificates last a year: each control-plane node renews them when one has fewer days left than
    # this (role kubernetes_certs, a monthly timer, the nodes in turn); health.min_certificate_days says when late.
    certificate_renew_days: Annotated[int, Field(ge=7, le=330)] = 90
    addons: list[Addon] = []
    tenants: list[Tenant] = []


WorkloadKind = Literal[
    "resnet50-train",
    "resnet50-infer",
    "resnet152-train",
    "resnet152-infer",
    "tf-cnn-benchmarks",
    "nccl-allreduce",
    "ib-write-bw",
    "fio",
    "iperf3",
]


class Thresholds(Strict):
    """What `aisite bench report` requires of a workload's result; unset ones are not judged."""

    # In the result's own unit (images/s, GB/s, Gb/s, MiB/s).
    min_value: Annotated[float, Field(ge=0, le=1e12)] | None = None
    # Of the published reference for the GPU type (aisite/bench/reference.py, each figure with its source), e.g. 0.9.
    min_fraction_of_reference: Annotated[float, Field(gt=0, le=2)] | None = None
    # Throughput at N processes / (N x the single-process run), e.g. 0.9 for "near-linear".
    min_scaling_efficiency: Annotated[float, Field(gt=0, le=1.5)] | None = None


class Workload(Strict):
    name: Name
    kind: WorkloadKind
    tenant: Name
    nodes: Annotated[int, Field(ge=1, le=100_000)] = 1
    gpus_per_node: Annotated[int, Field(ge=0, le=64)] = 1
    # The GPU type it runs on (a key of the catalog); default: the site's only or first GPU type.
    gpu_type: Annotated[str, AfterValidator(_gpu_type)] | None = None
    # The job's image; default: the pinned one for its kind in the job registry (kubernetes.job_registry).
    image: Image | None = None
    # Per process (ResNet), or per message/transfer (fio: block size in KiB) where the kind has one.
    batch_size: Annotated[int, Field(ge=1, le=1_048_576)] | None = None
    thresholds: Thresholds = Thresholds()


ServingModel = Literal["resnet50", "resnet152"]
Share = Annotated[float, Field(ge=0, le=1)]


class ModelVersion(Strict):
    """A trained model: its version (a label on its pods, in its metrics and in the promotion commits) and its
    checkpoint, a path inside its tenant's datasets storage (the model server loads tensors only, never code)."""

    version: DnsLabel
    artifact: RelPath


class Candidate(ModelVersion):
    # The share of requests (percent) the serving proxy sends it while its canary runs; `aisite promote` writes it.
    share: Annotated[int, Field(ge=1, le=99)]


class Evaluation(Strict):
    """The gate before a canary: champion and candidate are scored on the same held-out set."""

    # A directory of the tenant's datasets storage holding the held-out split (the payloads' file format).
    dataset: RelPath
    metric: Literal["top1_accuracy", "top5_accuracy"] = "top1_accuracy"
    # The candidate passes when its score exceeds the champion's by more than this (in the metric's units).
    margin: Annotated[float, Field(ge=0, le=1)] = 0.0


class CanaryLimits(Strict):
    """What the candidate's live traffic must stay within during its canary; crossing one rolls it back."""

    max_error_rate: Share = 0.01
    max_p95_latency_ms: Annotated[float, Field(gt=0, le=600_000)] = 500.0
    # The quality proxy: the mean top-1 probability of the candidate's answers (None: not judged).
    min_mean_confidence: Share | None = None


class Canary(Strict):
    share: Annotated[int, Field(ge=1, le=50)] = 10
    seconds: Annotated[int, Field(ge=10, le=7 * 86400)] = 600
    # Fewer requests than this to the candidate by the end of the canary decide nothing: it is rolled back.
    min_requests: Annotated[int, Field(ge=1, le=10_000_000)] = 100
    limits: CanaryLimits = CanaryLimits()


class Promotion(Strict):
    """How a new checkpoint of a training workload reaches a serving workload: the evaluation gate, the canary and
    who signs the promotion's commits (each change a commit to the site repository)."""

    # The training workload (site.workloads, a *-train kind of the same network) whose checkpoints it serves.
    training: Name
    evaluation: Evaluation
    canary: Canary = Canary()
    # Principals of gitops.allowed_signers whose keys may sign a promotion; empty: any allowed signer.
    signers: list[Account] = []
    # The reconciler runs the promotion of a new checkpoint itself; else only `aisite promote` does.
    automatic: bool = False


class Serving(Strict):
    """A model served over HTTP in a tenant: the champion, and a candidate while its canary runs, behind the
    serving proxy that splits the requests between them."""

    name: Name
    tenant: Name
    model: ServingModel = "resnet50"
    # The model server: the project's own (payloads/serve.py, KServe's v1 protocol) in the pinned PyTorch image.
    runtime: Literal["aisite-torch"] = "aisite-torch"
    # Replaces the runtime's pinned image.
    image: Image | None = None
    replicas: Annotated[int, Field(ge=1, le=10_000)] = 1
    # GPUs per replica; 0 serves on CPUs.
    gpus: Annotated[int, Field(ge=0, le=64)] = 0
    gpu_type: Annotated[str, AfterValidator(_gpu_type)] | None = None
    cpus: Annotated[int, Field(ge=1, le=1024)] = 2
    memory_gi: Annotated[int, Field(ge=1, le=16_384)] = 8
    champion: ModelVersion
    candidate: Candidate | None = None
    promotion: Promotion | None = None


class Nvidia(Strict):
    # Site-wide driver branch; None picks the catalog's default per GPU generation.
    driver_branch: Annotated[int, Field(ge=400, le=999)] | None = None
    repository: Url = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"


class AdminUser(Strict):
    """A site administrator: a local account on every node, SSH keys only, sudo when asked."""

    name: UnixUser
    ssh_keys: list[SshKey]
    sudo: bool = True


class AnsibleSettings(Strict):
    # ssh: real hosts at their management addresses. lab: the containers `aisite lab up` makes for this stack,
    # reached the same way (SSH, pipelining, ControlPersist) with the key and host keys the lab generates.
    connection: Literal["ssh", "lab"] = "ssh"
    user: UnixUser = "root"


_BACKEND = r"^(https://|s3://|gs://|azblob://|file://)[A-Za-z0-9._~%+@:/=?&-]{1,2000}$"


class Gitops(Strict):
    """Where the site's repository is and how it is applied from it: by the reconciler (`aisite reconcile` on a
    management host, role `reconciler`) and by in-cluster GitOps (Flux + the Pulumi Kubernetes Operator, rendered
    into manifests/gitops/<site>/). Credentials are named Secrets, never values."""

    repository: Annotated[str, Field(pattern=r"^(ssh://|https://|git@)[A-Za-z0-9._~%+@:/=-]{1,2000}$")]
    branch: GitBranch = "main"
    interval_seconds: Annotated[int, Field(ge=30, le=86400)] = 300
    full_pass_seconds: Annotated[int, Field(ge=300)] = 3600  # reconciler: every layer on every host this often
    # The node that runs the reconciler (systemd timer); None: the first control-plane node.
    reconciler_host: Name | None = None
    # OpenSSH allowed-signers lines: when any, only commits signed by one of these keys are applied.
    allowed_signers: list[Annotated[str, Field(pattern=r"^\S+ " + _SSH_KEY[1:])]] = []
    # Layers the nodes converge themselves: ansible-pull of verified commits on a timer (role pull, installed by
    # `aisite deploy STACK --layer pull`); the reconciler keeps pushing the others.
    pull_layers: Annotated[list[Literal["hosts", "cluster"]], Field(max_length=2)] = []
    pull_interval_seconds: Annotated[int, Field(ge=60, le=86400)] = 900
    # Where the nodes fetch the repository from (a mirror inside the site); None: `repository`. git:// (no
    # transport authentication) is accepted: a node applies only commits its verifier accepts, whoever served them.
    pull_repository: (
        Annotated[str, Field(pattern=r"^(ssh://|https://|git://|git@|file:///)[A-Za-z0-9._~%+@:/=-]{1,2000}$")] | None
    ) = None
    pulumi_stack: Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+){0,2}$")] | None = None
    pulumi_backend: Annotated[str, Field(pattern=_BACKEND)] | None = None
    namespace: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")] = "aisite-gitops"
    # Secret with the repository's credentials (identity + known_hosts, or token).
    git_secret: DnsSubdomain | None = None
    # Secret with the signers' public keys (*.sshpub) for Flux to verify HEAD.
    signers_secret: DnsSubdomain | None = None
    # Secret whose keys are the environment variables the stack reads (its password_from.env names) and
    # PULUMI_ACCESS_TOKEN; None: aisite-<site>-credentials.
    credentials_secret: DnsSubdomain | None = None


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


GpuTypeKey = Annotated[str, AfterValidator(_gpu_type)]
Fraction = Annotated[float, Field(gt=0, le=1)]
Bandwidth = Annotated[float, Field(gt=0, le=1e6)]


class Acceptance(Strict):
    """`aisite accept`: what a measurement must reach, over the built-in table of aisite.accept.thresholds (GPU
    and NIC models, with sources), and where its jobs run on a site."""

    # NCCL all_reduce bus bandwidth (GB/s) of one full node, per GPU type: replaces the table's figure.
    nccl_busbw_gbps: dict[GpuTypeKey, Bandwidth] = {}
    # ib_write_bw (Gb/s) per NIC speed in Gb/s (e.g. {400: 380}): replaces the table's figure.
    ib_write_bw_gbps: dict[Annotated[int, Field(ge=1, le=3200)], Bandwidth] = {}
    # A link, pair or group below this share of the best of its kind (same stage, same group size) fails, below
    # degraded_fraction it is degraded: a figure alone does not tell a slow cable from a slow fabric.
    fail_fraction: Fraction = 0.5
    degraded_fraction: Fraction = 0.8
    # The lab's floors (CPUs and veths set its figures, not a NIC model): iperf3 Gb/s, gloo all_reduce GB/s.
    lab_min_gbps: Bandwidth = 0.5
    lab_min_busbw_gbps: Bandwidth = 0.02
    # The namespace a site's acceptance jobs run in (created by the platform, privileged: DCGM diagnostics and
    # perftest need the devices).
    namespace: DnsLabel = "aisite-acceptance"


class Health(Strict):
    """The nodes' health check (roles/node_health: a systemd timer) and the quarantine `aisite health` runs."""

    interval_s: Annotated[int, Field(ge=30, le=86400)] = 300
    # What runs the check every interval: the node's systemd timer, or a DaemonSet on the cluster that starts the
    # same check on each node (for sites that want it scheduled and seen through Kubernetes).
    runner: Literal["timer", "daemonset"] = "timer"
    # A quarantined node is released after this many clean checks in a row.
    recover_after: Annotated[int, Field(ge=1, le=100)] = 3
    # Never more nodes quarantined at once than this share of the nodes checked (at least one) ...
    max_quarantined_fraction: Fraction = 0.1
    # ... or than this number, where set (0: never quarantine, only report and alert).
    max_quarantined: Annotated[int, Field(ge=0, le=100_000)] | None = None
    # An NVL72 rack whose NVLink fabric is at fault (a majority of its trays report a fabric problem of their own,
    # or a majority of them split evenly between NVLink cliques; never a minority's word) is quarantined whole: no
    # rack-scale job can use it. Its trays count under the node cap and the site's disruption budget like any
    # other nodes (a rack they cannot hold is held whole, and said); at most this many racks at once (0: never a
    # rack).
    max_quarantined_racks: Annotated[int, Field(ge=0, le=10_000)] = 1
    max_fs_used: Fraction = 0.95
    max_clock_offset_s: Annotated[float, Field(gt=0, le=3600)] = 0.5
    # A node's Kubernetes certificates (kubeadm's, /etc/kubernetes) closer than this to their expiry are a problem.
    min_certificate_days: Annotated[int, Field(ge=1, le=3650)] = 30


class Maintenance(Strict):
    """The site's one disruption budget: what maintenance, upgrades, firmware and the health quarantine together
    may take out of service at once (aisite.maintenance), and how a disruptive change rolls (`aisite diff` shows
    its waves)."""

    # At most this share of the site's GPUs out of service at once (never less than one node's, so a node can
    # always be taken out alone) ...
    max_unavailable_fraction: Fraction = 0.125
    # ... or this many GPUs, where set (0: no GPU node is ever taken out, nor quarantined).
    max_unavailable_gpus: Annotated[int, Field(ge=0, le=10_000_000)] | None = None
    # Never two nodes of one scalable unit out at once (a job placed in a unit loses one node at most).
    one_node_per_unit: bool = False
    # GPU nodes in the first wave; the rest wait until the canary is back in service and healthy.
    canary_nodes: Annotated[int, Field(ge=1, le=1000)] = 1
    # How long a cordoned node waits for its running Kueue jobs before they are preempted through Kueue (and the
    # rest of its pods evicted): aisite.maintenance.jobs.
    drain_timeout_s: Annotated[int, Field(ge=0, le=7 * 86400)] = 3600


class Site(Strict):
    """One site: a stack file's `config: aisite:site:`. Every other key is read from here, and only from here."""

    # The site's name: it names its lab containers, its state under .aisite/ and its Pulumi resources.
    name: Name
    description: Text = ""
    # The DNS domain its nodes are named under (<node>.<domain>).
    domain: Hostname
    # Time servers every node and switch follows (chrony).
    ntp_servers: list[NtpServer] = []
    dns_servers: list[IPv4Address] = []
    # How Ansible reaches the hosts.
    ansible: AnsibleSettings = AnsibleSettings()
    # The people who log in to the nodes: their accounts and SSH keys, exactly those declared.
    admin_users: list[AdminUser] = []
    # Named secrets, each from where its value comes (never the value itself).
    secrets: dict[SecretName, Secret] = {}
    # The management, out-of-band, storage and rail address ranges the plan allocates from.
    networks: Networks
    # The BMCs' defaults: protocol, credentials, power, TLS and the accounts aisite keeps on them.
    oob: OobDefaults = OobDefaults()
    # The three-node control plane (Kubernetes, etcd).
    control_plane: ControlPlane
    # Groups of GPU nodes, each of one server model (DGX H100 to GB200 NVL72 trays).
    gpu_nodes: list[GpuGroup] = []
    # The storage nodes: NFS exports, or a Ceph cluster.
    storage_nodes: StorageNodes | None = None
    # Leaf, spine, super-spine, management and out-of-band switches.
    switches: Switches
    # The RoCE fabric: topology, ASNs, MTUs, scalable units, oversubscription and the lossless profile.
    fabric: Fabric = Fabric()
    # The NVIDIA driver branch and repository of the GPU nodes.
    nvidia: Nvidia = Nvidia()
    # The cluster: version, CNI, add-ons, tenants and their quotas, monitoring, etcd backups.
    kubernetes: Kubernetes = Kubernetes()
    # Jobs and services the site runs, by kind, each in a tenant.
    workloads: list[Workload] = []
    # Models served over HTTP, each in a tenant, and how new checkpoints are promoted to them.
    serving: list[Serving] = []
    # The site's Git repository the reconciler (and pulling nodes) follow, and whose signatures they trust.
    gitops: Gitops | None = None
    # Network installs of nodes from the site's boot server.
    provisioning: Provisioning | None = None
    # What `aisite accept` holds the nodes, rails and NVLink domains to.
    acceptance: Acceptance = Acceptance()
    # The nodes' health check and the quarantine.
    health: Health = Health()
    # The site's one disruption budget for maintenance, upgrades, firmware and the quarantine.
    maintenance: Maintenance = Maintenance()


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
