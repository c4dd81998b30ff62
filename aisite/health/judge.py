"""A node's facts against what the plan says it is: one verdict, with every problem and what was not checked.
Standard library only (runs on the nodes)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

try:  # inside the package, or beside parse.py on a node
    from aisite.health.parse import (
        DiagResult,
        GpuMemoryState,
        ImexDomain,
        LinkState,
        NvlinkState,
        RdmaPort,
        XidEvent,
    )
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from parse import (  # type: ignore[import-not-found,no-redef]
        DiagResult,
        GpuMemoryState,
        ImexDomain,
        LinkState,
        NvlinkState,
        RdmaPort,
        XidEvent,
    )

# XIDs a user's program causes (illegal address, MMU fault from the program, ...) rather than the hardware: the
# NVIDIA device plugin's default skip list (k8s-device-plugin internal/rm/health.go: 13, 31, 43, 45, 68, 109).
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
# RDMA counters that count a link's or a lossless fabric's faults (a flapping or noisy link, packets lost where PFC
# should have held them): any increase between two checks is a problem. Congestion (ECN marks, CNPs) is the fabric
# working as designed and is exported, not judged.
RDMA_ERROR_COUNTERS = (
    "link_downed",
    "link_error_recovery",
    "symbol_error",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_rcv_errors",
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
)


@dataclass(frozen=True, slots=True)
class Expected:
    """What the plan says of the node."""

    node: str
    gpus: int
    nvlink: bool  # NVSwitch/NVLink systems: every GPU's links active
    rails: tuple[tuple[str, int, str], ...]  # (interface, MTU, address/prefix)
    rail_gbps: int = 0  # each rail NIC's speed: its RDMA port's rate must reach it (0: not judged)
    # Each rail's RDMA device as the plan names it (aisite.catalog or the site's ports), rail order; "" unknown.
    rdma: tuple[str, ...] = ()
    max_fs_used: float = 0.95
    max_clock_offset_s: float = 0.5
    min_certificate_days: int = 30
    driver_branch: int = 0  # the NVIDIA driver branch the plan installs (580: 580.x is loaded); 0: not judged
    rack: str = ""  # a rack-scale tray's rack (NVL72): its GPUs must be in one NVLink clique; "" none
    # Where the host's IMEX daemon runs (a rack without the GPU Operator): this tray's address in the rack's IMEX
    # domain (nodes_config.cfg); "" where IMEX is not the host's (the DRA driver runs it per job, or no rack).
    imex_address: str = ""


@dataclass(frozen=True, slots=True)
class FileSystem:
    mount: str
    read_only: bool
    used: float  # share of its blocks in use


@dataclass(frozen=True, slots=True)
class Clock:
    synchronised: bool
    offset_s: float


@dataclass(slots=True)
class Facts:
    """What the node's tools said; None: the tool was not there (no GPU driver, no chrony)."""

    xids: list[XidEvent] | None = None
    memory: list[GpuMemoryState] | None = None
    driver: str | None = None  # the loaded driver's version, as nvidia-smi prints it
    # nvidia-smi there but failing (no driver loaded, or a library newer than the loaded module): its own words.
    smi_error: str | None = None
    nvlink: list[NvlinkState] | None = None
    links: dict[str, LinkState] | None = None
    filesystems: list[FileSystem] | None = None
    clock: Clock | None = None
    diag: list[DiagResult] | None = None  # DCGM diagnostics, where run (acceptance)
    rdma: list[RdmaPort] | None = None  # None: the node has no RDMA device
    previous_counters: dict[str, dict[str, int]] | None = None  # "device/port" -> counters at the last check
    # rail interface -> the RDMA device the kernel put behind it (/sys/class/net/IF/device/infiniband)
    rail_rdma: dict[str, str] | None = None
    # Kubernetes certificate (a file under /etc/kubernetes, or a kubeconfig's client certificate) -> days until
    # it expires (negative: expired; None: unreadable); None: the node has no kubeadm certificates.
    certificates: dict[str, float | None] | None = None
    imex: ImexDomain | None = None  # `nvidia-imex-ctl -N`, where the host runs IMEX
    imex_error: str | None = None  # nvidia-imex-ctl missing, failing or silent: its own words


# Every check a node reports, by severity for the quarantine (0 first): the GPU itself failing, then a rail or
# its RDMA port gone, then what degrades without losing hardware (error counters, disk, clock). `status`: the
# controller could not read the node's report at all.
CHECKS = {
    "xid": 0,
    "ecc": 0,
    "nvlink": 0,
    "gpu-count": 0,
    "gpu-recovery": 0,
    "gpu-driver": 0,
    "gpu-fabric": 0,
    "imex": 0,
    "dcgm-diag": 0,
    "rail": 1,
    "rdma": 1,
    "status": 1,
    "rdma-counters": 2,
    "gpu-clocks": 2,
    "filesystem": 2,
    "clock": 2,
    "certificate": 2,
}


# The counters of `nvidia-smi -q`'s Clocks Event Reasons Counters that mean the hardware, not a setting or the
# software's power cap, held the clocks back.
HW_CLOCK_EVENTS = ("HW Thermal Slowdown", "HW Power Braking")


def gpu_counters_key(bus_id: str) -> str:
    """A GPU's entry in the counters kept between checks (beside the RDMA ports' "device/port")."""
    return f"gpu {bus_id}"


@dataclass(frozen=True, slots=True)
class Problem:
    check: str  # one of CHECKS
    subject: str  # the GPU, link or mount
    message: str


@dataclass(slots=True)
class NodeHealth:
    node: str
    problems: list[Problem] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    # A rack-scale tray's NVLink clique, "<ClusterUUID>.<CliqueId>", where all its GPUs agree: the site compares
    # the trays of a rack (health/site.py); "" otherwise.
    clique: str = ""

    @property
    def healthy(self) -> bool:
        return not self.problems

    @property
    def reason(self) -> str:
        """The first problem's check: the taint's value (a label value: one word)."""
        return self.problems[0].check if self.problems else ""


def judge(facts: Facts, expected: Expected) -> NodeHealth:
    h = NodeHealth(expected.node)
    gpu = expected.gpus > 0
    _xids(facts, h, gpu)
    _memory(facts, expected, h, gpu)
    _driver(facts, expected, h, gpu)
    _nvlink(facts, expected, h)
    _rails(facts, expected, h)
    _filesystems(facts, expected, h)
    _clock(facts, expected, h)
    _certificates(facts, expected, h)
    _diag(facts, h, gpu)
    _rdma(facts, expected, h)
    _imex(facts, expected, h)
    return h


def _imex(facts: Facts, expected: Expected, h: NodeHealth) -> None:
    """The host's IMEX daemon in its rack's domain: this tray READY, connected to every member, the domain UP. A
    multi-node NVLink job's memory export and import go through it (NVIDIA IMEX guide)."""
    if not expected.imex_address:
        return
    h.checked.append("imex")
    d = facts.imex
    if d is None or facts.imex_error is not None:
        h.problems.append(Problem("imex", "node", f"nvidia-imex-ctl -N: {facts.imex_error or 'no answer'}"))
        return
    me = next((m for m in d.members if m.address == expected.imex_address), None)
    if me is None:
        h.problems.append(Problem("imex", expected.imex_address, "not a member of the IMEX domain it reports"))
    elif me.state != "READY":
        h.problems.append(Problem("imex", expected.imex_address, f"this tray's IMEX daemon is {me.state}"))
    else:
        row = d.connections.get(me.index, [])
        by_index = {m.index: m.address for m in d.members}
        lost = [f"{by_index.get(i, f'#{i}')} ({c})" for i, c in enumerate(row) if c != "C" and i != me.index]
        if len(row) < len(d.members):
            h.problems.append(Problem("imex", expected.imex_address, "no connection status to every member"))
        elif lost:
            h.problems.append(Problem("imex", expected.imex_address, "not connected to " + ", ".join(lost[:6])))
    if d.state != "UP":
        h.problems.append(Problem("imex", "domain", f"IMEX domain {d.state or 'state not printed'}"))


def _rdma(facts: Facts, expected: Expected, h: NodeHealth) -> None:
    if not expected.rails:
        return
    if facts.rdma is None:
        h.skipped.append("rdma: no RDMA device on this node")
        return
    h.checked.append("rdma")
    # The rails' RDMA devices as the plan names them (what jobs' NCCL_IB_HCA and acceptance use); the device the
    # kernel put behind the rail's interface must be that one, or the plan disagrees with the machine.
    ports = {p.device: p for p in facts.rdma if p.port == 1}
    behind = facts.rail_rdma or {}
    for index, rail in enumerate(expected.rails):
        name = rail[0]
        planned = expected.rdma[index] if index < len(expected.rdma) else ""
        found = behind.get(name, "")
        if planned and found and found != planned:
            h.problems.append(Problem("rdma", name, f"RDMA device {found}, the plan's {planned} (ports map wrong)"))
        device = planned or found
        if not device:
            h.skipped.append(f"rdma: {name}'s RDMA device is neither in the plan nor behind the interface")
            continue
        p = ports.get(device)
        if p is None:
            h.problems.append(Problem("rdma", device, "missing"))
            continue
        if p.link_layer and p.link_layer != "Ethernet":
            # ConnectX-6/7 ports start as InfiniBand (aisite.catalog): the NIC's LINK_TYPE, set by the hosts layer
            # for its next boot, has not been booted into.
            why = f"link layer {p.link_layer[:32]}, the fabric's Ethernet (RoCE): the NIC's LINK_TYPE, not booted"
            h.problems.append(Problem("rdma", device, why))
        elif p.state != "ACTIVE":
            h.problems.append(Problem("rdma", device, f"port {p.state or 'unknown'} ({p.phys_state})"))
        elif expected.rail_gbps and p.rate_gbps is not None and p.rate_gbps < expected.rail_gbps:
            h.problems.append(Problem("rdma", device, f"{p.rate_gbps:g} Gb/s, the plan's {expected.rail_gbps}"))
        before = (facts.previous_counters or {}).get(f"{p.device}/{p.port}")
        if before:
            grew = {k: p.counters[k] - before[k] for k in RDMA_ERROR_COUNTERS if k in p.counters and k in before}
            grew = {k: v for k, v in grew.items() if v > 0}
            if grew:
                h.problems.append(
                    Problem(
                        "rdma-counters",
                        device,
                        "errors since the last check: " + ", ".join(f"{k} +{v}" for k, v in grew.items()),
                    )
                )


def _diag(facts: Facts, h: NodeHealth, gpu: bool) -> None:
    if facts.diag is None:
        return  # run by acceptance only, not by every health check
    h.checked.append("dcgm-diag")
    if not facts.diag:
        h.problems.append(Problem("dcgm-diag", "node", "the diagnostic reported no test"))
    for r in facts.diag:
        if r.status == "FAIL":
            h.problems.append(
                Problem("dcgm-diag", f"GPU {r.gpus}", f"{r.test} failed" + (f": {r.detail}" if r.detail else ""))
            )


def _xids(facts: Facts, h: NodeHealth, gpu: bool) -> None:
    if facts.xids is None:
        h.skipped.append("xid: no kernel log read")
        return
    h.checked.append("xid")
    for e in facts.xids:
        if e.xid not in APPLICATION_XIDS:
            h.problems.append(Problem("xid", e.pci, f"XID {e.xid}: {e.text}".rstrip(": ")))


def _memory(facts: Facts, expected: Expected, h: NodeHealth, gpu: bool) -> None:
    if not gpu:
        return
    if facts.smi_error is not None:
        # A GPU node whose nvidia-smi runs and fails has no usable driver: after a driver swap without its reboot
        # ("Driver/library version mismatch", exit 18) or a module that did not build or load (exit 9).
        h.checked.append("gpu-driver")
        h.problems.append(Problem("gpu-driver", "node", f"nvidia-smi failed: {facts.smi_error}"))
        return
    if facts.memory is None:
        h.skipped.append("ecc, gpu-count: nvidia-smi is not on this node")
        return
    h.checked += ["gpu-count", "ecc"]
    if any(g.recovery_action is not None for g in facts.memory):
        h.checked.append("gpu-recovery")
    elif facts.memory:
        h.skipped.append("gpu-recovery: the driver prints no GPU Recovery Action")
    if any(g.clock_event_us for g in facts.memory):
        h.checked.append("gpu-clocks")
    elif facts.memory:
        h.skipped.append("gpu-clocks: the driver prints no clock event counters")
    if len(facts.memory) != expected.gpus:
        h.problems.append(
            Problem("gpu-count", "node", f"{len(facts.memory)} GPUs answer, the plan has {expected.gpus}")
        )
    for g in facts.memory:
        subject = g.bus_id
        # NVIDIA's memory error management (A100/H100): a failed remap means the GPU cannot mask its bad memory any
        # more (replace it); a pending one needs a GPU reset; SRAM uncorrectable errors and a pending page
        # retirement (pre-Ampere) take the GPU out as well. DRAM uncorrectable errors the driver remapped are not a
        # fault by themselves.
        if g.remap_failed:
            h.problems.append(Problem("ecc", subject, "row remapping failed: the GPU needs replacing"))
        if g.remap_pending:
            h.problems.append(
                Problem(
                    "ecc", subject, f"row remapping pending ({g.remap_uncorrectable or 0} uncorrectable): reset the GPU"
                )
            )
        if g.volatile_sram_uncorrectable:
            h.problems.append(Problem("ecc", subject, f"{g.volatile_sram_uncorrectable} uncorrectable SRAM ECC errors"))
        if g.retired_pending:
            h.problems.append(Problem("ecc", subject, "a page retirement is pending: reset the GPU"))
        # R570+ drivers (NVML: nvmlEccSramErrorStatus_v1_t's bThresholdExceeded, "the error threshold of field diag";
        # nvmlRepairStatus; nvmlUnrepairableMemoryStatus).
        if g.sram_threshold_exceeded:
            h.problems.append(Problem("ecc", subject, "SRAM errors exceed the field diagnostics threshold: run them"))
        if g.channel_repair_pending:
            h.problems.append(Problem("ecc", subject, "a memory channel repair is pending: reset the GPU"))
        if g.tpc_repair_pending:
            h.problems.append(Problem("ecc", subject, "a TPC repair is pending: reset the GPU"))
        if g.unrepairable_memory:
            h.problems.append(Problem("ecc", subject, "memory the GPU cannot repair: the GPU needs replacing"))
        # Hardware holding the clocks back since the last check (NVML's clocks event reasons: HW Thermal Slowdown and
        # HW Power Brake, "reducing the core clocks by a factor of 2 or more"): cumulative counters, so a rise is
        # an event that happened, not a moment's PState change. The first check, and a driver reload that resets
        # them, judge nothing.
        before = (facts.previous_counters or {}).get(gpu_counters_key(g.bus_id))
        if before:
            now = g.clock_event_us
            grew = {k: now[k] - before[k] for k in HW_CLOCK_EVENTS if k in now and k in before}
            grew = {k: v for k, v in grew.items() if v > 0}
            if grew:
                what = ", ".join(f"{k} {v / 1e6:.1f} s" for k, v in grew.items())
                h.problems.append(Problem("gpu-clocks", subject, f"clocks held back since the last check: {what}"))
        # The driver's own verdict after an uncorrectable error (NVIDIA GPU Memory Error Management, Error Recovery
        # and Response Flags: None, Reset, Reboot, Drain P2P, Drain and Reset): anything but None takes it out.
        if g.recovery_action is not None and g.recovery_action != "None":
            h.problems.append(Problem("gpu-recovery", subject, f"the driver asks for recovery: {g.recovery_action}"))
        if g.ecc_mode == "Disabled" and expected.nvlink:
            h.problems.append(Problem("ecc", subject, "ECC is disabled on a data-centre GPU"))


def _driver(facts: Facts, expected: Expected, h: NodeHealth, gpu: bool) -> None:
    """The driver branch loaded is the plan's (a rollout's reboot that left the old module, or none, is caught
    here), and on NVSwitch systems every GPU registered with the NVLink fabric (nvidia-fabricmanager's work:
    until then CUDA cannot use the GPU; NVML's nvmlGpuFabricInfo_t, the status read only once Completed)."""
    if not gpu or facts.memory is None or facts.smi_error is not None:
        return
    if expected.driver_branch:
        if facts.driver is None:
            h.skipped.append("gpu-driver: nvidia-smi printed no driver version")
        else:
            h.checked.append("gpu-driver")
            if facts.driver.split(".")[0] != str(expected.driver_branch):
                h.problems.append(
                    Problem(
                        "gpu-driver", "node", f"driver {facts.driver} is loaded, the plan has R{expected.driver_branch}"
                    )
                )
    if not expected.nvlink or not facts.memory:
        return
    if all(g.fabric_state is None for g in facts.memory):
        h.skipped.append("gpu-fabric: the driver reports no fabric state (N/A: no NVSwitch, or a GPU before Hopper)")
        return
    h.checked.append("gpu-fabric")
    for g in facts.memory:
        if g.fabric_state is None:
            h.problems.append(Problem("gpu-fabric", g.bus_id, "no fabric state while its peers have one"))
        elif g.fabric_state != "Completed":
            h.problems.append(
                Problem("gpu-fabric", g.bus_id, f"fabric registration {g.fabric_state} (nvidia-fabricmanager)")
            )
        elif g.fabric_status not in (None, "Success"):
            h.problems.append(Problem("gpu-fabric", g.bus_id, f"fabric registration failed: {g.fabric_status}"))
        elif g.fabric_health not in (None, "Healthy"):
            h.problems.append(Problem("gpu-fabric", g.bus_id, f"fabric health {g.fabric_health}"))
    if expected.rack:
        _clique(facts.memory, h)


ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def _clique(gpus: list[GpuMemoryState], h: NodeHealth) -> None:
    """A rack-scale tray's GPUs registered in one NVLink domain: a cluster UUID that is not all zeros and a clique ID
    that is not 0 (a GPU "Completed" with status Insufficient Resources, CliqueId 0 and a zero ClusterUUID is out of
    the domain: Azure/azhpc-images#506), the same for every GPU of the tray."""
    seen = set()
    for g in gpus:
        if g.fabric_state != "Completed" or g.fabric_status not in (None, "Success"):
            continue  # said above
        if g.fabric_cluster in (None, ZERO_UUID) or not g.fabric_clique:
            h.problems.append(
                Problem(
                    "gpu-fabric",
                    g.bus_id,
                    f"in no NVLink domain (ClusterUUID {g.fabric_cluster or 'none'}, CliqueId {g.fabric_clique})",
                )
            )
            continue
        seen.add(f"{g.fabric_cluster}.{g.fabric_clique}")
    if len(seen) > 1:
        h.problems.append(Problem("gpu-fabric", "node", f"its GPUs are in {len(seen)} NVLink cliques: {sorted(seen)}"))
    elif seen and not any(p.check == "gpu-fabric" for p in h.problems):
        h.clique = seen.pop()


def _nvlink(facts: Facts, expected: Expected, h: NodeHealth) -> None:
    if not expected.nvlink:
        return
    if facts.nvlink is None:
        h.skipped.append("nvlink: nvidia-smi is not on this node")
        return
    h.checked.append("nvlink")
    if len(facts.nvlink) != expected.gpus:
        h.problems.append(
            Problem("nvlink", "node", f"NVLink status for {len(facts.nvlink)} GPUs, the plan has {expected.gpus}")
        )
    for g in facts.nvlink:
        subject = f"GPU {g.index}"
        if g.all_inactive or not g.links:
            h.problems.append(Problem("nvlink", subject, "all NVLinks inactive"))
            continue
        down = sorted(link for link, speed in g.links.items() if speed is None)
        if down:
            h.problems.append(Problem("nvlink", subject, f"NVLink {', '.join(map(str, down))} inactive"))
        speeds = {s for s in g.links.values() if s is not None}
        if len(speeds) > 1:
            h.problems.append(Problem("nvlink", subject, f"NVLinks at unequal speeds: {sorted(speeds)} GB/s"))


def _rails(facts: Facts, expected: Expected, h: NodeHealth) -> None:
    if not expected.rails:
        return
    if facts.links is None:
        h.skipped.append("rail: interfaces not read")
        return
    h.checked.append("rail")
    for name, mtu, address in expected.rails:
        link = facts.links.get(name)
        if link is None:
            h.problems.append(Problem("rail", name, "missing"))
        elif not link.up:
            h.problems.append(Problem("rail", name, f"down (operstate {link.operstate})"))
        else:
            if link.mtu != mtu:
                h.problems.append(Problem("rail", name, f"MTU {link.mtu}, the plan's {mtu}"))
            if address not in link.addresses:
                h.problems.append(Problem("rail", name, f"address {address} missing"))


def _filesystems(facts: Facts, expected: Expected, h: NodeHealth) -> None:
    if facts.filesystems is None:
        h.skipped.append("filesystem: not read")
        return
    h.checked.append("filesystem")
    for fs in facts.filesystems:
        if fs.read_only:
            h.problems.append(Problem("filesystem", fs.mount, "mounted read-only"))
        if fs.used > expected.max_fs_used:
            h.problems.append(Problem("filesystem", fs.mount, f"{fs.used:.0%} full (limit {expected.max_fs_used:.0%})"))


def _clock(facts: Facts, expected: Expected, h: NodeHealth) -> None:
    if facts.clock is None:
        h.skipped.append("clock: no time service answered")
        return
    h.checked.append("clock")
    if not facts.clock.synchronised:
        h.problems.append(Problem("clock", "node", "not synchronised"))
    elif abs(facts.clock.offset_s) > expected.max_clock_offset_s:
        h.problems.append(
            Problem("clock", "node", f"offset {facts.clock.offset_s:+.3f} s (limit {expected.max_clock_offset_s} s)")
        )


def _certificates(facts: Facts, expected: Expected, h: NodeHealth) -> None:
    """kubeadm's certificates expire a year after `kubeadm init` (its upgrades renew them): near the end, a problem
    while there is time to renew; after it, the API server refuses the node's components."""
    if facts.certificates is None:
        return  # no kubeadm certificates on this node: nothing to check, nothing skipped
    h.checked.append("certificate")
    for name, days in sorted(facts.certificates.items()):
        if days is None:
            h.problems.append(Problem("certificate", name, "unreadable"))
        elif days < 0:
            h.problems.append(Problem("certificate", name, f"expired {-days:.0f} days ago"))
        elif days < expected.min_certificate_days:
            h.problems.append(
                Problem("certificate", name, f"expires in {days:.0f} days (limit {expected.min_certificate_days})")
            )
