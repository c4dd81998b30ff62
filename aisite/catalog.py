"""Known hardware: GPU types, GPU server models and the driver branches each generation supports.

These are facts about hardware, not site choices, so they live in code; a site picks a model by name and may
override counts only through the `generic` model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

KernelModules = Literal["open", "proprietary"]
# The driver's two flavours of kernel modules. NVIDIA's driver README ("NVIDIA Open GPU Kernel Modules"): the open
# modules support Turing and later only, as they depend on the GPU System Processor first introduced in Turing; the
# proprietary ones support Maxwell, Pascal and Volta too. NVIDIA's technical blog "NVIDIA Transitions Fully Towards
# Open-Source GPU Kernel Modules" (2024): Grace Hopper and Blackwell must use the open modules (the proprietary are
# unsupported there), Turing to Hopper are recommended them, Maxwell, Pascal and Volta keep the proprietary driver;
# from R560 the open flavour is the default installation (the driver installation guide, Kernel Modules).
PROPRIETARY_ONLY = frozenset({"maxwell", "pascal", "volta"})


@dataclass(frozen=True, slots=True)
class GpuType:
    name: str
    product: str
    arch: str
    memory_gib: int  # 0 where no vendor document found here gives it
    # Highest driver branch that still supports the architecture (None: no known ceiling).
    max_driver_branch: int | None
    max_cuda_major: int | None
    default_driver_branch: int
    # Lowest driver branch that supports it (None: every branch the catalog's drivers carry).
    min_driver_branch: int | None = None

    @property
    def kernel_modules(self) -> KernelModules:
        """The driver flavour a node of this GPU runs: the open modules from Turing on, the proprietary before."""
        return "proprietary" if self.arch in PROPRIETARY_ONLY else "open"


# Volta (V100) is supported only up to the R580 branch and CUDA 12 (DESIGN.md: GPU generations).
GPU_TYPES: dict[str, GpuType] = {
    t.name: t
    for t in (
        GpuType("v100", "Tesla V100-SXM3-32GB", "volta", 32, 580, 12, 580),
        GpuType("t4", "Tesla T4", "turing", 16, None, None, 590),
        GpuType("a10", "A10", "ampere", 24, None, None, 590),
        GpuType("a30", "A30", "ampere", 24, None, None, 590),
        GpuType("a100", "A100-SXM4-80GB", "ampere", 80, None, None, 590),
        GpuType("l40s", "L40S", "ada", 48, None, None, 590),
        GpuType("h100", "H100-SXM5-80GB", "hopper", 80, None, None, 590),
        GpuType("h200", "H200-SXM5-141GB", "hopper", 141, None, None, 590),
        # Blackwell. DGX B200 User Guide, Introduction (Component Descriptions): "8 x NVIDIA B200 GPUs that provide
        # 1,440 GB total GPU memory". The lowest branch: CUDA 12.8 is the first with Blackwell (sm_100) and needs
        # driver >= 570.26 (CUDA 12.8 release notes, Table 3). DGX GB300 Release 1.0.6 (release notes, Host
        # Software Components) is tested with GPU driver and IMEX 580.126.20: the default branch for all four. No
        # vendor figure of B300's, GB200's or GB300's memory per GPU was found in the documents read (only totals
        # per rack in third-party articles, which disagree): 0.
        GpuType("b200", "NVIDIA B200", "blackwell", 180, None, None, 580, 570),
        GpuType("b300", "NVIDIA B300", "blackwell", 0, None, None, 580, 570),
        GpuType("gb200", "NVIDIA GB200", "blackwell", 0, None, None, 580, 570),
        GpuType("gb300", "NVIDIA GB300", "blackwell", 0, None, None, 580, 570),
    )
}


@dataclass(frozen=True, slots=True)
class NicPort:
    """One network port of a server as its vendor documents it; "" where the document does not say."""

    label: str  # the label on the chassis a technician cables to (OSFP1P1)
    netdev: str = ""  # the network interface's default name
    rdma: str = ""  # the RDMA device (mlx5_11)
    pci: str = ""  # the PCI function (0000:dc:00.0): what a .link file matches, whatever the netdev is called
    gpu: int | None = None  # the GPU on the same PCIe switch: rail-optimised cabling puts rail N on GPU N's NIC


# ConnectX non-volatile configuration, as mstflint's mstconfig (NVIDIA's mlxconfig) names it. "By default,
# ConnectX-6/ConnectX-7/BlueField-2/BlueField-3 ports are initialized as InfiniBand ports" (NVIDIA XLIO
# documentation, Type Management / VPI Cards Configuration): a RoCE rail needs LINK_TYPE_P<port> = ETH(2) (IB is 1;
# NVIDIA Firmware Tools (MFT) documentation, Using mlxconfig), set on the device (its function 0) for each port,
# port N being function N-1 (the same MFT page queries both ports of a dual-port ConnectX-5 at 0000:86:00.0).
# SR-IOV: SRIOV_EN and NUM_OF_VFS (mstconfig -h: "set SRIOV_EN=1 NUM_OF_VFS=16"). All take effect at the next boot
# ("-I- Please reboot machine to load new configurations.").
NIC_LINK_TYPE = "LINK_TYPE_P{port}"
NIC_ETH = 2
NIC_SRIOV_EN = "SRIOV_EN"
NIC_NUM_OF_VFS = "NUM_OF_VFS"
NIC_VENDOR_ID = 0x15B3  # Mellanox Technologies (PCI ID repository)


@dataclass(frozen=True, slots=True)
class ServerModel:
    name: str
    gpu_type: str
    gpus: int
    nvswitch: bool
    compute_nics: int
    nic_speed_gbps: int
    nic_model: str
    # The compute ports in rail order (rail N is the port nearest GPU N); empty where no document found here
    # gives them, and the site declares them (gpu_nodes[].ports).
    compute_ports: tuple[NicPort, ...] = ()
    # The storage and in-band management ports, by label (their names are not in the documents cited).
    other_ports: tuple[NicPort, ...] = ()
    source: str = ""
    # Rack-scale systems (NVL72): compute trays and NVLink switch trays in one rack, whose GPUs share one NVLink
    # domain; 0 for a server whose NVLink domain is its own GPUs.
    rack_trays: int = 0
    rack_switch_trays: int = 0
    # The host CPUs' architecture as Debian names it: Grace (Arm Neoverse V2) trays are arm64.
    cpu_arch: str = "amd64"

    @property
    def nvlink_domain(self) -> int:
        """GPUs that reach each other over NVLink: the rack's for a rack-scale system, else the server's."""
        return self.gpus * self.rack_trays if self.rack_trays else self.gpus


# DGX H100/H200 User Guide (NVIDIA, Nov 2024), 1.2.3 Network Modules, Table 6: port, ConnectX, network module/CPU,
# nearest GPU, default netdev, RDMA device. PCI functions: bus = the netdev's pNNN in hex, the same list the DGX
# BasePOD Deployment Guide's SR-IOV section passes to mlxconfig (dc 9a ce c0 4f 40 5e 18, Table 6's order).
# Storage/in-band: two dual-port QSFP112 ConnectX-7 in slots 1 and 2; port 2 of each bonded for in-band management
# and Ethernet storage, port 1 of each for InfiniBand storage (DGX BasePOD Deployment Guide, Networking).
_DGX_H100_SOURCE = (
    "NVIDIA DGX H100/H200 User Guide, Network Modules (Table 6); DGX BasePOD Deployment Guide, Networking and "
    "Compute network/IB Interfaces Configuration"
)
_DGX_H100_PORTS = tuple(
    sorted(
        (
            NicPort(label, f"ibp{bus}s0", rdma, f"0000:{bus:02x}:00.0", gpu)
            for label, bus, rdma, gpu in (
                ("OSFP1P1", 220, "mlx5_11", 7),
                ("OSFP1P2", 154, "mlx5_6", 4),
                ("OSFP2P1", 206, "mlx5_10", 6),
                ("OSFP2P2", 192, "mlx5_9", 5),
                ("OSFP3P1", 79, "mlx5_4", 2),
                ("OSFP3P2", 64, "mlx5_3", 1),
                ("OSFP4P1", 94, "mlx5_5", 3),
                ("OSFP4P2", 24, "mlx5_0", 0),
            )
        ),
        key=lambda p: p.gpu or 0,
    )
)
_DGX_H100_OTHER = tuple(NicPort(f"slot{s}-port{p}") for s in (1, 2) for p in (1, 2))

# DGX B200: "4 x OSFP ports for 8 x NVIDIA ConnectX-7 Single Port Cards", InfiniBand (default) up to 400Gbps or
# 400GbE; storage and in-band management on "2 x NVIDIA BlueField-3 DPU Dual Port Cards"; "2 x 5th generation NVLink
# switches" (DGX B200 User Guide, Introduction, Component Descriptions). The guide pages read here give no port map
# (labels, netdevs, RDMA devices): a site declares gpu_nodes[].ports from `ibdev2netdev` on one system.
_DGX_B200_SOURCE = "NVIDIA DGX B200 User Guide, Introduction to NVIDIA DGX B200 Systems (Component Descriptions)"
# DGX B300: eight ConnectX-8 SuperNICs at 800GbE. The DGX B300 User Guide's front-panel figure (eight 800GbE ports,
# the ConnectX-8s on the GPU tray) was read only as vengineer.hatenablog.com (2025-12-06) describes it; ConnectX-8's
# 800Gb/s line rate: NVIDIA DOCA 2.9.0 for ConnectX-8, Changes and New Features. No port map was found.
_DGX_B300_SOURCE = (
    "NVIDIA DGX B300 User Guide (front panel, as vengineer.hatenablog.com 2025-12-06 reads it); NVIDIA DOCA "
    "2.9.0_CX8 Changes and New Features (ConnectX-8 at 800Gb/s)"
)
# GB200 NVL72 (the 72x1 configuration): "18x 1RU Compute trays (4 GPUs per compute tray)" and "9x 1RU NVL72 NVLink
# Switch trays" in one rack, one NVLink domain of 72 GPUs (NVIDIA Multi-Node NVLink Systems tuning guide,
# Understanding Your Grace-Blackwell Systems). Its compute tray's ports (NVIDIA Mission Control North-South
# Networking GB200 Deployment Guide 2.3.0, Compute Tray Network Ports, GB200 Compute Tray): the four ConnectX-7
# OSFP compute ports Left Bay P3 mlx5_0, Left Bay P4 mlx5_1, Right Bay P3 mlx5_4, Right Bay P4 mlx5_5, and the
# BlueField-3 ports Left Bay BF3 P1 mlx5_2, P2 mlx5_3, Right Bay BF3 P1 mlx5_6 (the table's last row, Right Bay
# BF3 P2, was not legible in the copy read). Its "PCIe Bus" column prints 00:03:00.0, 02:03:00.0, 10:03:00.0,
# 12:03:00.0 (BlueField-3: 06:03:00.0/.1, 16:03:00.0): a Grace tray's PCI domains, written with two digits, which is
# not a whole PCI address; aisite leaves `pci` to the site (lspci -D on a tray) rather than widen what it read.
# Nor does the table say which GPU is nearest to which port. ConnectX-7: up to 400GbE (ConnectX-7 user manual).
_GB200_SOURCE = (
    "NVIDIA Multi-Node NVLink Systems tuning guide (72x1 configuration); NVIDIA Mission Control North-South "
    "Networking GB200 Deployment Guide 2.3.0, Compute Tray Network Ports"
)
_GB200_PORTS = tuple(
    NicPort(label, "", rdma)
    for label, rdma in (
        ("LeftBay-OSFP-P3", "mlx5_0"),
        ("LeftBay-OSFP-P4", "mlx5_1"),
        ("RightBay-OSFP-P3", "mlx5_4"),
        ("RightBay-OSFP-P4", "mlx5_5"),
    )
)
_GB200_OTHER = (
    NicPort("LeftBay-BF3-P1", "", "mlx5_2"),
    NicPort("LeftBay-BF3-P2", "", "mlx5_3"),
    NicPort("RightBay-BF3-P1", "", "mlx5_6"),
    NicPort("RightBay-BF3-P2"),
)
# GB300 NVL72: "9 NVSwitch trays for full non-blocking P2P connectivity of all 72 Blackwell Ultra GPUs"; a compute
# tray has "4 Blackwell Ultra GPUs and 2 Grace CPUs" and "2 Mezzanine Network Boards with 2 ConnectX-8 silicon chips
# in each, for a total of 4 ConnectX-8" (NVIDIA Enterprise Reference Architecture, NVL72 AI Factory, System Hardware
# & Components); 18 trays fill the 72 GPUs. No port map of the GB300 tray was found.
_GB300_SOURCE = (
    "NVIDIA Enterprise Reference Architecture NVL72 AI Factory, System Hardware & Components; NVIDIA DOCA 2.9.0_CX8 "
    "(ConnectX-8 at 800Gb/s)"
)

SERVER_MODELS: dict[str, ServerModel] = {
    m.name: m
    for m in (
        ServerModel("dgx-2", "v100", 16, True, 8, 100, "ConnectX-5"),
        ServerModel("dgx-a100", "a100", 8, True, 8, 200, "ConnectX-6"),
        ServerModel(
            "dgx-h100", "h100", 8, True, 8, 400, "ConnectX-7", _DGX_H100_PORTS, _DGX_H100_OTHER, _DGX_H100_SOURCE
        ),
        ServerModel(
            "dgx-h200", "h200", 8, True, 8, 400, "ConnectX-7", _DGX_H100_PORTS, _DGX_H100_OTHER, _DGX_H100_SOURCE
        ),
        ServerModel("dgx-b200", "b200", 8, True, 8, 400, "ConnectX-7", source=_DGX_B200_SOURCE),
        ServerModel("dgx-b300", "b300", 8, True, 8, 800, "ConnectX-8", source=_DGX_B300_SOURCE),
        ServerModel(
            "gb200-nvl72",
            "gb200",
            4,
            True,
            4,
            400,
            "ConnectX-7",
            _GB200_PORTS,
            _GB200_OTHER,
            _GB200_SOURCE,
            rack_trays=18,
            rack_switch_trays=9,
            cpu_arch="arm64",
        ),
        ServerModel(
            "gb300-nvl72",
            "gb300",
            4,
            True,
            4,
            800,
            "ConnectX-8",
            source=_GB300_SOURCE,
            rack_trays=18,
            rack_switch_trays=9,
            cpu_arch="arm64",
        ),
    )
}

# Systems whose NVSwitches are fourth-generation: their fabric manager works with the NVLink Subnet Manager (NVLSM),
# which programs the NVSwitches' routing tables ("DGX B200/B300, NVIDIA HGX B200/B300 8-GPU, and NVIDIA HGX B100
# 8-GPU systems use fourth generation NVSwitches": NVIDIA Fabric Manager User Guide, NVSwitch Core Software Stack).
# A rack-scale tray's NVLink switches run their own NVLSM in the switch trays' NVOS: none on the tray.
NVLSM_MODELS = frozenset({"dgx-b200", "dgx-b300"})

# GPU types whose memory is coherent with the Grace CPUs' (NVLink-C2C): without CDMM the OS onlines the GPU's memory
# as NUMA nodes and counts it as the node's memory (the kubelet's allocatable with it). Coherent Driver-based
# Memory Management, from R580 for GB200 platforms, keeps it with the driver instead (NVIDIA Data Center GPU Driver
# 580.65.06 release notes, Hardware and Software Support); it is the nvidia module's NVreg_CoherentGPUMemoryMode=
# driver (the open kernel modules' parameter, the default when unset only from later branches). GB300 is not named
# in the notes read: not listed.
CDMM_GPU_TYPES = frozenset({"gb200"})
CDMM_BRANCH = 580

Cooling = Literal["air", "liquid"]


@dataclass(frozen=True, slots=True)
class NodePower:
    """What one system draws at most and how it is cooled, from its vendor's document."""

    max_w: int  # 0: no document aisite cites gives it (the site declares gpu_nodes[].power_kw)
    cooling: Cooling
    source: str


# Each figure from the model's user guide (Introduction, hardware specifications: "System power usage"). GB200/GB300
# NVL72 are liquid-cooled rack-scale systems (NVIDIA's GB200 NVL72 and GB300 NVL72 product pages); no per-tray
# figure was found in the documents read (the GB200 reference architecture gives about 1.2 MW for a scalable unit
# of 8 racks, their networking included), nor a DGX B300 one.
NODE_POWER: dict[str, NodePower] = {
    "dgx-2": NodePower(10_000, "air", "NVIDIA DGX-2 System User Guide, Introduction: System Power Usage 10 kW"),
    "dgx-a100": NodePower(6_500, "air", "NVIDIA DGX A100 User Guide, Introduction: System Power Usage 6.5 kW max"),
    "dgx-h100": NodePower(10_200, "air", "NVIDIA DGX H100/H200 User Guide, Introduction: ~10.2 kW max"),
    "dgx-h200": NodePower(10_200, "air", "NVIDIA DGX H100/H200 User Guide, Introduction: ~10.2 kW max"),
    "dgx-b200": NodePower(14_300, "air", "NVIDIA DGX B200 User Guide, Introduction: ~14.3 kW max"),
    "dgx-b300": NodePower(0, "air", "NVIDIA DGX B300 User Guide (no power figure read)"),
    "gb200-nvl72": NodePower(0, "liquid", "NVIDIA GB200 NVL72 product page: a liquid-cooled, rack-scale system"),
    "gb300-nvl72": NodePower(0, "liquid", "NVIDIA GB300 NVL72 product page: a fully liquid-cooled, rack-scale system"),
}
# The vScaler AI reference architecture plans racks of up to 30 kW (a 40U rack at 24 kW): a site's default budget.
RACK_POWER_KW = 30


# NVIDIA's CUDA repositories name a directory per distribution and architecture (…/repos/debian12/x86_64/, and
# sbsa for Arm servers: …/repos/ubuntu2404/sbsa/): the driver packages of one are not installable on another.
CUDA_REPO_ARCH = {"amd64": "x86_64", "arm64": "sbsa"}
# The kernel's name of each (uname -m, Ansible's ansible_architecture), what a node reports of itself.
MACHINE = {"amd64": "x86_64", "arm64": "aarch64"}

NodeOs = Literal["debian-12", "ubuntu-24.04", "dgx-os-7"]


@dataclass(frozen=True, slots=True)
class OsRelease:
    """An operating system a node runs: how it reports itself, NVIDIA's repository for it, how aisite installs it."""

    name: str
    distribution: str  # /etc/os-release's NAME as Ansible reports it (ansible_distribution)
    codename: str  # VERSION_CODENAME (ansible_distribution_release)
    cuda_distro: str  # its directory in NVIDIA's CUDA repository
    cuda_arches: frozenset[str]  # the CPU architectures NVIDIA's repository serves it for
    # How `aisite provision` installs it over the network (None: not at all: the vendor installs it, aisite adopts).
    network_install: Literal["debootstrap", "autoinstall"] | None
    dgx: bool  # NVIDIA's DGX OS: /etc/dgx-release names its release
    source: str


# NVIDIA's CUDA Installation Guide for Linux (System Requirements) lists Debian 12 for amd64 systems only, and
# Ubuntu 24.04 for amd64, generic arm64 (sbsa) and "GRACE only arm64 systems (sbsa)". DGX OS 7 User Guide
# (Introduction): DGX OS 7 is based on Ubuntu 24.04, installed from NVIDIA's own image (Reimaging the System), which
# aisite does not build: DGX nodes arrive with it and are adopted; /etc/dgx-release holds its release.
_CUDA_SOURCE = "NVIDIA CUDA Installation Guide for Linux, System Requirements"
OS_RELEASES: dict[str, OsRelease] = {
    o.name: o
    for o in (
        OsRelease(
            "debian-12", "Debian", "bookworm", "debian12", frozenset({"amd64"}), "debootstrap", False, _CUDA_SOURCE
        ),
        OsRelease(
            "ubuntu-24.04",
            "Ubuntu",
            "noble",
            "ubuntu2404",
            frozenset({"amd64", "arm64"}),
            "autoinstall",
            False,
            _CUDA_SOURCE,
        ),
        OsRelease(
            "dgx-os-7",
            "Ubuntu",
            "noble",
            "ubuntu2404",
            frozenset({"amd64", "arm64"}),
            None,
            True,
            f"NVIDIA DGX OS 7 User Guide, Introduction and Reimaging the System; {_CUDA_SOURCE}",
        ),
    )
}

GENERIC_MODEL = "generic"
KNOWN_MODELS = (*SERVER_MODELS, GENERIC_MODEL)


@dataclass(frozen=True, slots=True)
class SwitchHardware:
    """A fabric switch's front panel: cages at their native speed, and the most ports its ASIC splits them into."""

    name: str
    cages: int
    cage_gbps: int
    max_ports: int
    lanes: int  # electrical lanes a cage: SONiC numbers ports by their first lane

    def ports_at(self, gbps: int) -> int:
        """The most ports at `gbps`: each cage split into native/gbps ports, up to the ASIC's port count."""
        return min(self.max_ports, self.cages * max(1, self.cage_gbps // gbps))

    def split(self, ports: int) -> int:
        """Ports a cage must be split into (1, 2, 4 or 8) to offer `ports`: the breakout of every cage."""
        need = -(-ports // self.cages)
        return next((n for n in (1, 2, 4, 8) if n >= need and n <= self.lanes), 0)


# NVIDIA Spectrum fabric switches (datasheets): Spectrum-4 SN5600, 64 x 800G OSFP, 51.2 Tb/s, up to 256 ports
# (128 x 400G, 256 x 200G and below); Spectrum-3 SN4700, 32 x 400G QSFP-DD, up to 128 ports; Spectrum SN2700,
# 32 x 100G QSFP28, up to 64 ports. A site naming one of these is held to it; other models are taken at their word.
# Lanes a cage: 8 for OSFP and QSFP-DD, 4 for QSFP28; SONiC's port_config.ini of the SN5600 (ACS-SN5600) and SN2700
# (ACS-MSN2700) give each port 8 and 4 lanes. More ports than cages is a breakout: Cumulus Linux's user guide
# (Switch Port Attributes, Breakout Ports) lists the SN5600's 400G as "128x 400G - 64x OSFP break out into 2x",
# a 2x split of an 8-lane port taking 4 lanes a port, the split ports named swp1s0, swp1s1.
# NVIDIA's Spectrum-4 SN5000 Switch Systems Hardware User Manual (models SN5400, SN5600, SN5600D, SN5610), Data
# Interfaces: the SN5600 family 64 ports at 800GbE (100 Gb/s a lane), 128 at 400GbE, 256 at 200GbE and below; the
# SN5400 64 at 400GbE (50 Gb/s a lane), 128 at 200GbE, 256 at 100GbE and below. The SN5610 is taken as of the SN5600
# family (the manual's table names families, not each model).
SWITCH_MODELS: dict[str, SwitchHardware] = {
    m.name: m
    for m in (
        SwitchHardware("SN5600", 64, 800, 256, 8),
        SwitchHardware("SN5610", 64, 800, 256, 8),
        SwitchHardware("SN5400", 64, 400, 256, 8),
        SwitchHardware("SN4700", 32, 400, 128, 8),
        SwitchHardware("SN2700", 32, 100, 64, 4),
    )
}


@dataclass(frozen=True, slots=True)
class AccessSwitchHardware:
    """A management or out-of-band switch's front panel: its node-facing ports and their top speed, and the ports
    left for uplinks (as Cumulus Linux names them)."""

    name: str
    ports: int
    port_gbps: int
    uplinks: tuple[str, ...]
    source: str


# Mellanox's mlxsw 5.13 release notes (its supported systems): SN2010, "25GbE/100GbE 1U Open Ethernet Switch, 18 SFP28
# ports, 4 QSFP28 ports". NVIDIA's SN2000 series brochure as netbox-community/devicetype-library's SN2201 cites it:
# swp1-swp48 1000BASE-T, swp49-swp52 100G QSFP28 (the DGX BasePOD and SuperPOD guides put BMCs on SN2201s).
ACCESS_SWITCH_MODELS: dict[str, AccessSwitchHardware] = {
    m.name: m
    for m in (
        AccessSwitchHardware(
            "SN2010", 18, 25, tuple(f"swp{n}" for n in range(19, 23)), "mlxsw 5.13 release notes (Mellanox)"
        ),
        AccessSwitchHardware(
            "SN2201", 48, 1, tuple(f"swp{n}" for n in range(49, 53)), "NVIDIA SN2000 series brochure, via netbox"
        ),
    )
}


@dataclass(frozen=True, slots=True)
class AcceptanceFigure:
    """What acceptance requires of one measurement on one kind of hardware, and where the figure comes from."""

    value: float
    unit: str
    source: str


AZURE_NHC = "Azure HPC node health checks (github.com/Azure/azurehpc-health-checks)"
# NCCL all_reduce_perf bus bandwidth within one 8-GPU node (NVLink/NVSwitch), at a large message size.
NCCL_BUSBW_GBPS: dict[str, AcceptanceFigure] = {
    "a100": AcceptanceFigure(228.0, "GB/s", f"{AZURE_NHC} README, check_nccl_allreduce, ND96asr_v4 (8x A100)"),
    "h100": AcceptanceFigure(460.0, "GB/s", f"{AZURE_NHC} README, check_nccl_allreduce, ND96isr_H100_v5 (8x H100)"),
    "h200": AcceptanceFigure(431.0, "GB/s", f"{AZURE_NHC}, ND H200 v5 (8x H200), as issue 27 quotes it"),
    # No all_reduce figure for B200, B300, GB200 or GB300 (one server, or an NVL72 rack's 72 GPUs) was found in a
    # vendor or health-check document read here: none is derived; a site sets acceptance.nccl_busbw_gbps.
}
# perftest ib_write_bw per port, by the port's speed in Gb/s.
IB_WRITE_BW_GBPS: dict[int, AcceptanceFigure] = {
    200: AcceptanceFigure(180.0, "Gb/s", f"{AZURE_NHC} README, check_ib_bw_gdr, ND96asr_v4 (HDR 200G)"),
    400: AcceptanceFigure(
        375.0, "Gb/s", f"{AZURE_NHC}, ND H100 v5 (NDR 400G), as issue 27 quotes it (the README's table: 380)"
    ),
    # 800G (ConnectX-8): no published ib_write_bw figure was found; none is derived (acceptance.ib_write_bw_gbps).
}
# DCGM diagnostics run level per acceptance level (dcgmi diag -r): 1 takes seconds, 2 about 2 min, 3 about 15 min.
DCGM_LEVELS = {"quick": 1, "full": 3}
