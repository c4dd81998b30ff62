"""The plan's types: frozen dataclasses every layer reads; built by `aisite.plan.build`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from ipaddress import IPv4Network
from typing import Any

import orjson

from aisite.model import Taint
from aisite.plan.ceph_types import CephPlan


@dataclass(frozen=True, slots=True)
class NodeTaint:
    key: str
    value: str
    effect: str

    @classmethod
    def of(cls, t: Taint) -> NodeTaint:
        return cls(t.key, t.value, t.effect)


GPU_TAINT = NodeTaint(key="nvidia.com/gpu", value="present", effect="NoSchedule")
LABEL_PREFIX = "aisite.io"
# The taint health quarantine puts on a node; no tenant pod may tolerate it (platform/admission.py).
UNHEALTHY_TAINT = f"{LABEL_PREFIX}/unhealthy"
RAIL_TABLE_BASE = 100  # routing table of rail N is 100 + N
# The switches of the compute fabric, bottom tier first: BGP routers with a loopback and an ASN.
FABRIC_ROLES = ("leaf", "spine", "super-spine")


# ---------------------------------------------------------------------------------------------- plan types
@dataclass(frozen=True, slots=True)
class Bmc:
    protocol: str
    address: str
    mac: str | None
    port: int
    credentials: str
    switch: str | None
    switch_port: str | None
    power: str  # on | off: the state the BMC role holds the node in
    tls_verify: bool


@dataclass(frozen=True, slots=True)
class FirmwareBaseline:
    """What a node's BMC should report: BIOS attributes (name, value) in name order, and the system firmware's
    release with the image its BMC installs it from and that image's SHA-256."""

    bios: tuple[tuple[str, bool | int | str], ...]
    bios_version: str | None
    bios_image: str | None
    bios_sha256: str | None = None  # the image's digest, checked before the BMC is told of it


@dataclass(frozen=True, slots=True)
class Interface:
    name: str
    address: str
    prefix: int
    gateway: str | None
    mac: str | None
    mtu: int


@dataclass(frozen=True, slots=True)
class Rail:
    index: int
    interface: str
    address: str
    prefix: int
    gateway: str
    subnet: str
    leaf: str
    leaf_port: str
    table: int
    mtu: int
    speed_gbps: int = 0  # the NIC's speed on the leaf's port (the slower of the two)
    # The NIC as the vendor names it (aisite.catalog, or the site's gpu_nodes[].ports); "" where unknown.
    port: str = ""  # the chassis label a technician cables (OSFP4P2)
    netdev: str = ""  # its default netdev name; the host renames it to `interface` by its PCI function
    rdma: str = ""  # its RDMA device: NCCL_IB_HCA, the health check and acceptance's ib_write_bw use it
    pci: str = ""
    gpu: int | None = None  # the GPU nearest to it
    # Pods' rail network (network-operator): one name per rail on every node, its NV-IPAM pool this node's unit's
    # (Multus reads the node's own CNI file of that name, so a job spanning units gets every rail); "" none.
    pod_network: str = ""
    pod_pool: str = ""


@dataclass(frozen=True, slots=True)
class NicConfig:
    """A rail NIC's firmware settings as its host sets them (mstconfig, at the device's first PCI function) and the
    rails it carries: LINK_TYPE_Pn ETH(2) for each rail port (ConnectX-6/7 and BlueField ports start as
    InfiniBand), and the model's `firmware.nic`. A change takes effect at the next boot."""

    pci: str  # 0000:18:00.0, the device's function 0
    settings: tuple[tuple[str, int], ...]  # (mstconfig parameter, value) in name order
    rails: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Gpu:
    type: str
    product: str
    arch: str
    count: int
    nvswitch: bool
    driver_branch: int
    # The driver's kernel modules (aisite.catalog: open from Turing on, proprietary for Volta): the nvidia role
    # installs that flavour's packages.
    kernel_modules: str = "open"
    # NVIDIA's repository for the node's OS and CPUs (site.nvidia.repository's <distro>/<arch>/ directory).
    repository: str = ""
    # Fourth-generation NVSwitches (aisite.catalog.NVLSM_MODELS): the fabric manager needs the NVLink Subnet Manager.
    nvlsm: bool = False
    # Grace-coherent GPU memory kept by the driver, not onlined as NUMA nodes (aisite.catalog.CDMM_GPU_TYPES).
    cdmm: bool = False


@dataclass(frozen=True, slots=True)
class NodeOsPlan:
    """The OS a node runs (its group's install.os, aisite.catalog.OS_RELEASES) and how it got it: what the
    preflight holds the node's own facts to before anything is applied."""

    name: str  # debian-12 | ubuntu-24.04 | dgx-os-7
    distribution: str  # ansible_distribution
    codename: str  # ansible_distribution_release
    arch: str  # amd64 | arm64: Debian's and the OCI image platform's name
    machine: str  # ansible_architecture: x86_64 | aarch64
    dgx: bool  # DGX OS: /etc/dgx-release present
    install: str  # network (aisite provision installs it) | adopt (installed, checked) | none (not declared)


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    fqdn: str
    role: str  # control-plane | gpu | storage
    group: str
    index: int  # position within its group
    path: str  # where it is declared in the stack file
    model: str
    gpu: Gpu | None
    scalable_unit: int | None
    bmc: Bmc
    management: Interface
    storage: Interface | None
    rails: tuple[Rail, ...]
    labels: dict[str, str]
    taints: tuple[NodeTaint, ...]
    firmware: FirmwareBaseline | None = None
    nics: tuple[NicConfig, ...] = ()
    rack: str | None = None  # a rack-scale system's rack (its NVLink and IMEX domain)
    os: NodeOsPlan = NodeOsPlan("debian-12", "Debian", "bookworm", "amd64", "x86_64", False, "none")


@dataclass(frozen=True, slots=True)
class RackPlan:
    """A rack of a rack-scale group (NVL72): its compute trays share one NVLink domain, and the driver's IMEX
    daemons on them one IMEX domain, each daemon reaching its peers at their management addresses (the list
    /etc/nvidia-imex/nodes_config.cfg holds, the same on every tray of the rack)."""

    name: str
    group: str
    model: str
    trays: tuple[str, ...]  # its compute trays' node names, in order
    full: bool  # every tray the model's rack has: a partial rack is a smaller NVLink domain
    gpus: int  # its NVLink domain: trays x GPUs a tray
    switch_trays: int  # the model's NVLink switch trays a rack (their NVOS and fabric manager are not aisite's)
    imex_peers: tuple[str, ...]  # the trays' management addresses, in the trays' order
    # Where its IMEX daemons run: "pods", the DRA driver's per ComputeDomain (the GPU Operator's site: the host's
    # service stays masked), or "host", the trays' own nvidia-imex service over the whole rack (a site without the
    # GPU Operator, its jobs outside Kubernetes or with the device plugin), checked by the node health check.
    imex: str = "pods"


@dataclass(frozen=True, slots=True)
class PowerRack:
    """A rack of the data hall (site.facility): the GPU nodes in it and the most they draw together."""

    name: str
    group: str
    model: str
    nodes: tuple[str, ...]
    max_w: int  # its nodes' maximum power together (their switch trays and the hall's switches not counted)
    budget_w: int  # site.facility.rack_power_kw
    cooling: str  # the model's (air | liquid), "" where the catalog does not say


@dataclass(frozen=True, slots=True)
class BgpNeighbor:
    interface: str
    peer: str
    peer_interface: str
    peer_asn: int
    # /31 addresses for operating systems configured numbered; unnumbered peers use the interface alone.
    local_address: str
    peer_address: str


@dataclass(frozen=True, slots=True)
class HostSubnet:
    rail: int
    subnet: str
    gateway: str
    ports: tuple[str, ...]
    # Who each port faces, in the ports' order: "node:interface (chassis label)", for port descriptions.
    peers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AccessPort:
    """A management or out-of-band switch's port: an access port of one network's VLAN (0 for an uplink, a trunk
    of the switch's every VLAN), and who it faces."""

    port: str
    vlan: int
    description: str


@dataclass(frozen=True, slots=True)
class Switch:
    name: str
    role: str  # leaf | spine | super-spine | management | oob
    os: str
    model: str
    ports: int
    speed_gbps: int
    management_address: str
    management_prefix: int
    asn: int | None
    loopback: str | None
    scalable_unit: int | None
    neighbors: tuple[BgpNeighbor, ...]
    host_subnets: tuple[HostSubnet, ...]
    os_version: str = ""  # the release the switch runs, where the site says ("" otherwise)
    bfd: bool = False  # BFD on its BGP sessions (fabric.bfd, the fabric's switches)
    # Its front panel (aisite.catalog): ports a cage (2: every cage in use split 2x), lanes a cage, cages in use;
    # 1, 0 and `ports` where the model is unknown (one port a cage).
    breakout: int = 1
    cage_lanes: int = 0
    cages: int = 0
    # Where its OS's platform files name the modes (SONiC, aisite.drivers): the breakout mode of its cages and the
    # hardware SKU that boots in it ("" elsewhere).
    breakout_mode: str = ""
    hwsku: str = ""
    # A management or out-of-band switch aisite configures: its VLANs and ports (empty for the fabric's and for
    # `generic` ones).
    vlans: tuple[int, ...] = ()
    access_ports: tuple[AccessPort, ...] = ()


@dataclass(frozen=True, slots=True)
class Cable:
    kind: str  # rail | fabric | management | storage | bmc | switch-management
    a_device: str
    a_port: str
    b_device: str
    b_port: str
    speed_gbps: int
    a_label: str = ""  # the a side's chassis label where the catalog knows it (OSFP4P2), else its interface


@dataclass(frozen=True, slots=True)
class RoceQos:
    pfc_priority: int
    pfc_enable: str  # mlnx_qos --pfc vector, e.g. 0,0,0,1,0,0,0,0
    trust: str
    roce_dscp: int
    roce_tc: int
    traffic_class: int  # IP ToS byte: DSCP << 2 with ECT(0), the value of NCCL_IB_TC and default_roce_tos
    cnp_dscp: int
    cnp_priority: int
    ecn_min_bytes: int
    ecn_max_bytes: int
    ets_roce_percent: int
    ets_default_percent: int
    ecn_probability_percent: int
    pfc_watchdog: bool
    pfc_watchdog_poll_ms: int
    pfc_watchdog_detection_ms: int
    pfc_watchdog_restoration_ms: int
    switch_mtu: int
    host_mtu: int
    nccl_ib_tc: int
    nccl_ib_gid_index: int


@dataclass(frozen=True, slots=True)
class TenantPlan:
    name: str
    namespace: str
    gpu_quota: int  # in all
    groups: tuple[str, ...]
    flavors: tuple[tuple[str, int], ...] = ()  # (GPU type, quota) in the site's order of GPU types
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    pod_security: str = "restricted"


@dataclass(frozen=True, slots=True)
class MonitoringPlan:
    retention: str = "15d"
    prometheus_storage_gi: int = 100
    alertmanager_storage_gi: int = 2
    storage_class: str | None = None
    # Where programs on the nodes leave metrics for node exporter's textfile collector (aisite-pull's pass): the
    # pull role writes there, the chart's node exporter reads it through its mount of the host's root.
    node_textfile_dir: str = "/var/lib/node_exporter/textfile_collector"


@dataclass(frozen=True, slots=True)
class NotebookLoginPlan:
    client_id: str
    authorize_url: str
    token_url: str
    userdata_url: str
    callback_url: str
    username_claim: str
    groups_claim: str


@dataclass(frozen=True, slots=True)
class NotebooksPlan:
    """site.kubernetes.notebooks, for the jupyterhub addon (platform/notebooks.py)."""

    login: NotebookLoginPlan | None = None
    image: str = ""
    gpu_image: str = ""
    home_gi: int = 10
    storage_class: str | None = None
    cpus: int = 2
    memory_gi: int = 8
    cpus_per_gpu: int = 8
    memory_gi_per_gpu: int = 64
    idle_minutes: int = 60


@dataclass(frozen=True, slots=True)
class EtcdBackupPlan:
    """site.kubernetes.etcd_backup, for role etcd_backup."""

    schedule: str = "hourly"
    keep: int = 48
    copy_to: str | None = None


@dataclass(frozen=True, slots=True)
class WorkloadThresholds:
    min_value: float | None = None
    min_fraction_of_reference: float | None = None
    min_scaling_efficiency: float | None = None


@dataclass(frozen=True, slots=True)
class WorkloadPlan:
    name: str
    kind: str
    tenant: str
    namespace: str
    nodes: int
    gpus_per_node: int
    gpu_type: str  # the catalog's GPU type it runs on ("" on a site without GPUs)
    image: str | None
    batch_size: int | None
    thresholds: WorkloadThresholds
    operator: str | None  # the addon whose custom resource runs it (mpi-operator, training-operator); None: a Job


@dataclass(frozen=True, slots=True)
class ServedVersion:
    role: str  # champion or candidate: the stable part of its objects' names
    version: str
    artifact: str  # inside the tenant's datasets storage
    share: int  # percent of the requests the serving proxy sends it
    replicas: int


@dataclass(frozen=True, slots=True)
class CanaryPlan:
    share: int
    seconds: int
    min_requests: int
    max_error_rate: float
    max_p95_latency_ms: float
    min_mean_confidence: float | None


@dataclass(frozen=True, slots=True)
class PromotionPlan:
    training: str
    dataset: str
    metric: str
    margin: float
    canary: CanaryPlan
    signers: tuple[str, ...]
    automatic: bool


@dataclass(frozen=True, slots=True)
class ServingPlan:
    name: str
    tenant: str
    namespace: str
    model: str  # the network: resnet50, resnet152
    runtime: str
    image: str | None
    gpus: int  # per replica
    gpu_type: str  # "" when it serves on CPUs
    cpus: int
    memory_gi: int
    versions: tuple[ServedVersion, ...]  # the champion, then the candidate while its canary runs
    promotion: PromotionPlan | None


@dataclass(frozen=True, slots=True)
class GitopsPlan:
    repository: str
    branch: str
    interval_seconds: int
    full_pass_seconds: int
    reconciler_host: str
    allowed_signers: tuple[str, ...]
    pull_layers: tuple[str, ...]
    pull_interval_seconds: int
    pull_repository: str
    pulumi_stack: str
    pulumi_backend: str | None
    namespace: str
    git_secret: str | None
    signers_secret: str | None
    credentials_secret: str


@dataclass(frozen=True, slots=True)
class RegistryPlan:
    host: str
    mirrors: tuple[str, ...]
    ca: str | None
    # The mirror URLs hold the whole path (…/v2/<host>): containerd must not add /v2 itself.
    override_path: bool = False


@dataclass(frozen=True, slots=True)
class KubernetesPlan:
    version: str
    cni: str
    api_vip: str
    api_port: int
    pod_cidr: str
    service_cidr: str
    addons: tuple[str, ...]
    endpoint: str  # controlPlaneEndpoint: the VIP and port every node and kubeconfig uses
    dns_domain: str
    control_plane: tuple[str, ...]  # the first runs `kubeadm init`, the others join as control plane
    cert_sans: tuple[str, ...]
    vip_interface: str  # management interface of the control-plane nodes: kube-vip holds the VIP there
    package_repository: str
    cni_manifest: str
    pod_security: str
    kube_vip_image: str
    sandbox_image: str
    containerd_apt_repository: str | None
    registries: tuple[RegistryPlan, ...]
    nvidia_default_runtime: bool
    mig_strategy: str = "single"
    gpu_allocation: str = "device-plugin"  # device-plugin | dra
    # Pods' rail interfaces: addresses per GPU node in each leaf block, and GPU nodes per scalable unit.
    rail_pod_addresses: int = 0
    gpu_types: tuple[str, ...] = ()  # the site's GPU types, in the order its groups declare them
    scalable_unit: int = 32
    chart_repositories: dict[str, str] = field(default_factory=dict)
    job_registry: str | None = None  # replaces the upstream registry of the jobs' images
    monitoring: MonitoringPlan = field(default_factory=MonitoringPlan)
    etcd_backup: EtcdBackupPlan = field(default_factory=EtcdBackupPlan)
    certificate_renew_days: int = 90
    notebooks: NotebooksPlan = field(default_factory=NotebooksPlan)


@dataclass(frozen=True, slots=True)
class AdminUserPlan:
    name: str
    ssh_keys: tuple[str, ...]
    sudo: bool


@dataclass(frozen=True, slots=True)
class ExportPlan:
    """An NFS export: served by one storage node on the storage network, mounted by the GPU nodes."""

    name: str
    path: str
    tier: str
    server: str
    address: str  # the server's storage address
    clients: str  # the storage network: nothing else may mount it
    mount_point: str


@dataclass(frozen=True, slots=True)
class ReservedAddress:
    """An address of a pooled network that no node, BMC or switch is handed: its gateway, or one the stack file
    names for something else (a DNS or NTP server, the VIP, the boot server, a registry)."""

    network: str  # management | oob | storage | loopbacks
    address: str
    by: str  # "gateway", or the key path that names it


@dataclass(frozen=True, slots=True)
class NetworksPlan:
    oob: str
    management: str
    storage: str
    loopbacks: str
    p2p: str
    rails: tuple[str, ...]
    pods: str
    services: str

    def gateway(self, name: str) -> str:
        """First host of a network: the gateway (the pools never hand it out)."""
        return str(IPv4Network(getattr(self, name)).network_address + 1)


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    """One GPT partition of an install disk, in disk order (number = position + 1)."""

    number: int
    fs: str  # bios (BIOS boot: no file system) | vfat (EFI system) | ext4 | xfs | swap
    mount: str | None
    size_mib: int | None  # None: the rest of the disk
    type_guid: str


@dataclass(frozen=True, slots=True)
class InstallProfile:
    """How one node group is installed (its `install`): the same for every node of the group."""

    name: str  # the group's name
    os: str
    boot_mode: str  # uefi | legacy
    disk: str
    partitions: tuple[PartitionPlan, ...]
    kernel_args: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ProvisionTarget:
    """A node `aisite provision` installs: booted from its management NIC (the boot MAC) on the management
    network; the installed system names and addresses its management and storage NICs by their MACs."""

    node: str
    fqdn: str
    profile: str
    management: Interface
    storage: Interface | None

    @property
    def mac(self) -> str | None:
        """The boot MAC; None until declared (or proposed by `aisite oob discover`): the checks refuse that."""
        return self.management.mac

    @property
    def address(self) -> str:
        return self.management.address


@dataclass(frozen=True, slots=True)
class ProvisioningPlan:
    boot_server: str
    network: str  # the subnet the nodes boot on (the management network)
    gateway: str
    dhcp: str  # static | proxy
    http_port: int
    wave_size: int
    retries: int
    install_timeout_s: int
    boot_timeout_s: int
    mirror: str
    image_packages: tuple[str, ...]
    deploy_keys: tuple[str, ...]
    profiles: tuple[InstallProfile, ...]
    targets: tuple[ProvisionTarget, ...]

    @property
    def url(self) -> str:
        """The boot server's HTTP root, as iPXE and the installer reach it."""
        return f"http://{self.boot_server}:{self.http_port}"

    def profile(self, name: str) -> InstallProfile:
        return next(p for p in self.profiles if p.name == name)


@dataclass(frozen=True, slots=True)
class Threshold:
    """One figure acceptance holds a measurement to: the catalog's (with its source) or the site's."""

    key: str  # a GPU type, or a NIC speed in Gb/s
    value: float
    unit: str
    source: str


@dataclass(frozen=True, slots=True)
class AcceptancePlan:
    """`aisite accept`'s thresholds for this site's hardware (site.acceptance over the catalog's table)."""

    namespace: str
    dcgm_levels: dict[str, int]
    nccl_busbw: tuple[Threshold, ...]  # per GPU type of the site that has a figure
    ib_write_bw: tuple[Threshold, ...]  # per rail NIC speed of the site that has a figure
    fail_fraction: float
    degraded_fraction: float
    lab_min_gbps: float
    lab_min_busbw_gbps: float


@dataclass(frozen=True, slots=True)
class HealthPlan:
    """The nodes' health check and the quarantine (site.health)."""

    interval_s: int
    runner: str  # timer | daemonset
    recover_after: int
    max_quarantined_fraction: float
    max_quarantined: int | None
    max_fs_used: float
    max_clock_offset_s: float
    min_certificate_days: int = 30
    max_quarantined_racks: int = 1


@dataclass(frozen=True, slots=True)
class MaintenancePlan:
    """The site's disruption budget, resolved against its nodes (site.maintenance; aisite.maintenance reads it)."""

    max_unavailable_gpus: int  # the site's number, else its share of the GPUs (at least the largest node's)
    one_node_per_unit: bool
    canary_nodes: int
    drain_timeout_s: int


@dataclass(frozen=True, slots=True)
class Plan:
    site: str
    domain: str
    connection: str
    ansible_user: str
    ntp_servers: tuple[str, ...]
    dns_servers: tuple[str, ...]
    networks: NetworksPlan
    nodes: tuple[Node, ...]
    switches: tuple[Switch, ...]
    cables: tuple[Cable, ...]
    roce: RoceQos
    kubernetes: KubernetesPlan
    tenants: tuple[TenantPlan, ...]
    workloads: tuple[WorkloadPlan, ...]
    serving: tuple[ServingPlan, ...] = ()
    secrets: dict[str, dict[str, str | None]] = field(default_factory=dict)
    # Accounts the BMC role keeps on every Redfish BMC: ({secret, role}, ...).
    bmc_accounts: tuple[dict[str, str], ...] = ()
    admin_users: tuple[AdminUserPlan, ...] = ()
    nfs_server: str = "kernel"
    exports: tuple[ExportPlan, ...] = ()
    gitops: GitopsPlan | None = None
    power_racks: tuple[PowerRack, ...] = ()
    provisioning: ProvisioningPlan | None = None
    acceptance: AcceptancePlan | None = None
    health: HealthPlan | None = None
    maintenance: MaintenancePlan | None = None
    ceph: CephPlan | None = None  # the storage nodes' Ceph cluster, where the site has one
    racks: tuple[RackPlan, ...] = ()  # rack-scale systems' racks (NVL72), in the groups' order
    reserved: tuple[ReservedAddress, ...] = ()  # what the pools never hand out, per network

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        """The plan as JSON, indented by 2: as json.dumps(to_dict(), indent=2) writes it (but for non-ASCII text,
        written as UTF-8, and floats in their shortest form), ten times faster: orjson writes the dataclasses
        directly (a 32,768-GPU plan: 0.3 s against 3.2 s)."""
        return orjson.dumps(self, option=orjson.OPT_INDENT_2).decode()

    @property
    def pulled_layers(self) -> tuple[str, ...]:
        """The layers the nodes converge themselves (gitops.pull_layers); none without GitOps."""
        return self.gitops.pull_layers if self.gitops else ()

    def by_role(self, role: str) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.role == role)

    def switches_by_role(self, role: str) -> tuple[Switch, ...]:
        return tuple(s for s in self.switches if s.role == role)


def plain(obj: Any) -> Any:
    """A plan object as JSON data (dicts, lists, strings, numbers), what plan.json holds of it: dataclasses.asdict's
    result with lists for tuples, several times faster."""
    return orjson.loads(orjson.dumps(obj))
