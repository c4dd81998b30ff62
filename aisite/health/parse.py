"""Reading the tools' own output into facts. Standard library only (this file runs on the nodes).

- the kernel log (dmesg, journalctl -k): NVIDIA XID events `NVRM: Xid (PCI:0000:3b:00): 79, ...`, and the
  multi-line "has fallen off the bus" report newer drivers print without an XID (taken as XID 79);
- `nvidia-smi -q` (whole, or sections such as `-d ECC,ROW_REMAPPER,PAGE_RETIREMENT`): the loaded driver's version;
  per GPU its ECC mode, uncorrectable counts, retired pages pending, row remapping state, memory repairs, the
  driver's recovery action and its NVLink fabric registration (NVSwitch systems);
- `nvidia-smi nvlink --status`: per GPU its links and their speed, or that all are inactive; `dcgmi nvlink
  --link-status`: per GPU each link up or down;
- `dcgmi diag -r N -j`: every test's result per GPU;
- `ip -j addr`: interfaces, their state, MTU and IPv4 addresses;
- /sys/class/infiniband: each RDMA port's state, rate and error counters;
- `nvidia-imex-ctl -N`: the IMEX domain's members (address, state, version), who is connected to whom, and the
  domain's state.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

_XID = re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F:.]+)\): (?P<xid>\d+)(?:, (?P<rest>.*))?")
_FELL_OFF = re.compile(r"NVRM: The NVIDIA GPU (?P<pci>[0-9a-fA-F:.]+)")
_GPU_HEADER = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_NVLINK_GPU = re.compile(r"^GPU (?P<index>\d+): (?P<name>.*?)(?: \(UUID: (?P<uuid>[^)]+)\))?\s*$")
_NVLINK_LINK = re.compile(r"^\s+Link (?P<link>\d+): (?P<state>.*?)\s*$")
_DRIVER = re.compile(r"^Driver Version\s*:\s*(?P<version>\d{1,4}(?:\.\d{1,4}){0,3})\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class XidEvent:
    pci: str  # the PCI address as the driver prints it (domain:bus:device)
    xid: int
    text: str  # what follows the number: process, channel, the driver's words


def xid_events(log: str) -> list[XidEvent]:
    """Every XID in a kernel log, in order; a 'fallen off the bus' report without an XID counts as XID 79."""
    out: list[XidEvent] = []
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if m := _XID.search(line):
            out.append(XidEvent(m["pci"].lower(), int(m["xid"]), (m["rest"] or "").strip()))
        elif (m := _FELL_OFF.search(line)) and "fallen off the bus" in " ".join(lines[i : i + 3]):
            pci = m["pci"].lower()
            # The driver's short form drops the function (0000:b3:00.0 -> 0000:b3:00), as in its Xid lines.
            short = pci.rsplit(".", 1)[0]
            if not any(e.xid == 79 and e.pci == short for e in out):
                out.append(XidEvent(short, 79, "GPU has fallen off the bus (reported without an XID)"))
    return out


@dataclass(slots=True)
class GpuMemoryState:
    bus_id: str
    product: str = ""
    uuid: str = ""
    ecc_mode: str = ""  # Enabled | Disabled | N/A
    volatile_dram_uncorrectable: int | None = None
    volatile_sram_uncorrectable: int | None = None
    aggregate_sram_uncorrectable: int | None = None
    retired_pending: bool | None = None  # Retired Pages / Pending Page Blacklist (pre-Ampere)
    remap_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    # R570+ drivers (seen on an H200, driver 580): SRAM uncorrectable split into parity and SEC-DED, the field
    # diagnostics threshold, memory repairs and the driver's own recovery action (NVML's nvmlEccSramErrorStatus_v1_t,
    # nvmlRepairStatus, nvmlUnrepairableMemoryStatus, nvmlDeviceGetGpuRecoveryAction).
    sram_threshold_exceeded: bool | None = None
    channel_repair_pending: bool | None = None
    tpc_repair_pending: bool | None = None
    unrepairable_memory: bool | None = None
    recovery_action: str | None = None  # None, Reset, Reboot, Drain P2P, Drain and Reset: as the driver prints it
    # "Clocks Event Reasons Counters": microseconds the clocks spent held back, per reason, since the driver loaded.
    clock_event_us: dict[str, int] = field(default_factory=dict)
    # "Fabric": the GPU's registration with the NVLink fabric (NVML's nvmlGpuFabricInfo_t: state Not Supported, Not
    # Started, In Progress, Completed; status, read only once Completed; Health's Summary where the driver has it).
    # None: N/A (no NVSwitch, or a driver or GPU before Hopper that does not report it).
    fabric_state: str | None = None
    fabric_status: str | None = None
    fabric_health: str | None = None
    # The NVLink domain it registered in (multi-node NVLink, NVL72): the cluster's UUID and the clique's ID, as
    # `nvidia-smi -q` prints them (kubernetes-sigs/dra-driver-nvidia-gpu#626, Azure/azhpc-images#506).
    fabric_cluster: str | None = None
    fabric_clique: int | None = None


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _value(text: str) -> int | bool | str | None:
    v = text.strip()
    if v in ("N/A", "[N/A]", "Not Supported", "[Not Supported]", ""):
        return None
    if v in ("Yes", "No"):
        return v == "Yes"
    return int(v) if v.isdigit() else v


def smi_query(text: str) -> list[GpuMemoryState]:
    """`nvidia-smi -q` as per-GPU memory health. Sections are nested by indentation; a section printed alone (the
    output of `-d ROW_REMAPPER`, pasted without its GPU line) is read as one GPU of unknown address."""
    gpus: list[GpuMemoryState] = []
    path: list[tuple[int, str]] = []
    current: GpuMemoryState | None = None
    for raw in text.splitlines():
        if not raw.strip() or raw.startswith("="):
            continue
        if m := _GPU_HEADER.match(raw):
            current = GpuMemoryState(m["bus"].lower())
            gpus.append(current)
            path = []
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        key, sep, rest = raw.strip().partition(":")
        key = key.strip()
        while path and path[-1][0] >= indent:
            path.pop()
        if not sep or (not rest.strip() and not raw.rstrip().endswith(":")):
            path.append((indent, key))
            continue
        if current is None:
            if indent == 0:
                continue  # the log's header (Timestamp, Driver Version, Attached GPUs)
            current = GpuMemoryState("unknown")
            gpus.append(current)
        where = tuple(p for _, p in path)
        value = _value(rest)
        _assign(current, where, key, value)
        if key in ("ECC Errors", "Remapped Rows", "Retired Pages"):
            path.append((indent, key))
    return gpus


def smi_driver(text: str) -> str | None:
    """The loaded driver's version from `nvidia-smi -q`'s header (`Driver Version : 580.159.04`); None: not printed."""
    m = _DRIVER.search(text)
    return m["version"] if m else None


_SRAM_UNCORRECTABLE = ("SRAM Uncorrectable", "SRAM Uncorrectable Parity", "SRAM Uncorrectable SEC-DED")


def _assign(g: GpuMemoryState, where: tuple[str, ...], key: str, value: int | bool | str | None) -> None:
    section = where[0] if where else ""
    sub = where[1] if len(where) > 1 else ""
    if not where and key == "Product Name":
        g.product = str(value or "")
    elif not where and key == "GPU UUID":
        g.uuid = str(value or "")
    elif not where and key == "GPU Recovery Action":
        g.recovery_action = str(value)[:40] if value is not None else None
    elif section == "ECC Mode" and key == "Current":
        g.ecc_mode = str(value if value is not None else "N/A")
    elif section in ("ECC Errors", "Ecc Errors") and isinstance(value, int) and not isinstance(value, bool):
        # Drivers before R510 name them Double Bit / Single Bit; since, DRAM and SRAM (Un)correctable.
        if sub == "Volatile" and key in ("DRAM Uncorrectable", "Double Bit ECC Total", "Total"):
            g.volatile_dram_uncorrectable = value
        # R570+ prints SRAM Uncorrectable as two counters, Parity and SEC-DED: their sum is the old one.
        elif sub == "Volatile" and key in _SRAM_UNCORRECTABLE:
            g.volatile_sram_uncorrectable = (g.volatile_sram_uncorrectable or 0) + value
        elif sub == "Aggregate" and key in _SRAM_UNCORRECTABLE:
            g.aggregate_sram_uncorrectable = (g.aggregate_sram_uncorrectable or 0) + value
    elif section in ("ECC Errors", "Ecc Errors") and isinstance(value, bool):
        if sub == "Aggregate" and key == "SRAM Threshold Exceeded":
            g.sram_threshold_exceeded = value
        elif not sub and key == "Channel Repair Pending":
            g.channel_repair_pending = value
        elif not sub and key == "TPC Repair Pending":
            g.tpc_repair_pending = value
        elif not sub and key == "Unrepairable Memory":
            g.unrepairable_memory = value
    elif section == "Clocks Event Reasons Counters" and isinstance(value, str) and value.endswith(" us"):
        count = value.removesuffix(" us").strip()
        if count.isdigit():
            g.clock_event_us[key] = int(count)
    elif section == "Fabric" and not sub and key == "ClusterUUID":
        uuid = str(value).lower() if value is not None else ""
        g.fabric_cluster = uuid if _UUID.fullmatch(uuid) else None
    elif section == "Fabric" and not sub and key == "CliqueId":
        g.fabric_clique = value if isinstance(value, int) and not isinstance(value, bool) and value < 2**32 else None
    elif section == "Fabric" and key in ("State", "Status", "Summary") and sub in ("", "Health"):
        text = str(value)[:40] if value is not None else None
        if sub == "Health":
            g.fabric_health = text if key == "Summary" else g.fabric_health
        elif key == "State":
            g.fabric_state = text
        elif key == "Status":
            g.fabric_status = text
    elif section == "Retired Pages" and key in ("Pending Page Blacklist", "Pending Page Retirement"):
        g.retired_pending = value if isinstance(value, bool) else None
    elif section == "Remapped Rows":
        if key == "Uncorrectable Error" and isinstance(value, int) and not isinstance(value, bool):
            g.remap_uncorrectable = value
        elif key == "Pending" and isinstance(value, bool):
            g.remap_pending = value
        elif key == "Remapping Failure Occurred" and isinstance(value, bool):
            g.remap_failed = value


@dataclass(slots=True)
class NvlinkState:
    index: int
    name: str
    links: dict[int, float | None] = field(default_factory=dict)  # link -> GB/s, None when inactive
    all_inactive: bool = False


def nvlink_status(text: str) -> list[NvlinkState]:
    """`nvidia-smi nvlink --status` per GPU: each link's speed, None for an inactive link ('<inactive>'), and
    the driver's 'all links are inActive' line."""
    gpus: list[NvlinkState] = []
    for line in text.splitlines():
        if m := _NVLINK_GPU.match(line):
            gpus.append(NvlinkState(int(m["index"]), m["name"]))
        elif gpus and (m := _NVLINK_LINK.match(line)):
            speed = re.match(r"([\d.]+) GB/s", m["state"])
            gpus[-1].links[int(m["link"])] = float(speed.group(1)) if speed else None
        elif gpus and "all links are inActive" in line.replace("inactive", "inActive"):
            gpus[-1].all_inactive = True
    return gpus


def dcgmi_link_status(text: str) -> list[NvlinkState]:
    """`dcgmi nvlink --link-status`: per GPU a letter per link (U up, D down, X disabled, _ not supported); a
    down or disabled link reads as inactive, an up one at an unknown speed (0.0)."""
    gpus: list[NvlinkState] = []
    section = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped in ("GPUs:", "NvSwitches:"):
            section = stripped
        elif section == "GPUs:" and (m := re.match(r"gpuId (\d+):$", stripped)):
            gpus.append(NvlinkState(int(m.group(1)), f"gpuId {m.group(1)}"))
        elif section == "GPUs:" and gpus and not gpus[-1].links and re.fullmatch(r"[UDX_ ]+", stripped):
            letters = stripped.split()
            gpus[-1].links = {i: (0.0 if c == "U" else None) for i, c in enumerate(letters) if c != "_"}
            gpus[-1].all_inactive = all(c in "DX" for c in letters if c != "_")
    return gpus


# `nvidia-imex-ctl -N` (NVIDIA IMEX guide, IMEX Service Command Service): a line per member, its connections'
# table (a row per member: its status to each), and the domain's state. Members' states and the table's letters are
# the daemon's words, matched narrowly: anything else is not read.
_IMEX_NODE = re.compile(
    r"^Node #(?P<index>\d{1,4})\s+-\s+(?P<address>[0-9a-fA-F.:]{3,45})\s+-\s+(?P<state>[A-Z_]{1,32})"
    r"(?:\s+-\s+Version:\s*(?P<version>[0-9.]{0,32}))?\s*$"
)
_IMEX_ROW = re.compile(r"^\s*(?P<index>\d{1,4})\s+(?P<cells>(?:(?:C|I|N|R|D|A|!V!|!M!)\s*)+)$")
_IMEX_DOMAIN = re.compile(r"^Domain State:\s*(?P<state>[A-Z_]{1,32})\s*$")


@dataclass(frozen=True, slots=True)
class ImexMember:
    index: int
    address: str
    state: str  # READY when the member's daemon is up and in the domain
    version: str


@dataclass(slots=True)
class ImexDomain:
    members: list[ImexMember] = field(default_factory=list)
    connections: dict[int, list[str]] = field(default_factory=dict)  # member -> its status to each member, in order
    state: str = ""  # UP, DEGRADED, DOWN; "" when not printed


def imex_domain(text: str) -> ImexDomain:
    """`nvidia-imex-ctl -N`'s members, connection table and domain state (the human-readable form)."""
    d = ImexDomain()
    table = False
    for line in text.splitlines():
        if m := _IMEX_NODE.match(line):
            d.members.append(ImexMember(int(m["index"]), m["address"], m["state"], m["version"] or ""))
        elif line.strip().startswith("Nodes From\\To"):
            table = True
        elif m := _IMEX_DOMAIN.match(line.strip()):
            d.state = m["state"]
            table = False
        elif table and (m := _IMEX_ROW.match(line)):
            d.connections[int(m["index"])] = m["cells"].split()
    return d


@dataclass(frozen=True, slots=True)
class DiagResult:
    test: str
    gpus: str  # as DCGM names them: "0,1,2" or one id
    status: str  # PASS | FAIL | WARN | SKIPPED (upper case)
    detail: str


def dcgm_diag(text: str) -> list[DiagResult] | None:
    """`dcgmi diag -r N -j`: every test result (DCGM 3.x nests them in "DCGM GPU Diagnostic" > test_categories,
    with nulls between tests; 4.x may put "tests" at the top). None when no JSON document is in the output."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        doc = json.loads(text[start:])
    except ValueError:
        return None
    root = doc.get("DCGM GPU Diagnostic", doc) if isinstance(doc, dict) else {}
    tests = [t for c in root.get("test_categories") or [] if isinstance(c, dict) for t in c.get("tests") or []]
    tests += list(root.get("tests") or [])
    out = []
    for t in tests:
        if not isinstance(t, dict):
            continue
        for r in t.get("results") or []:
            if isinstance(r, dict):
                words = [*r.get("warnings", []), *r.get("info", [])] if isinstance(r.get("warnings", []), list) else []
                detail = "; ".join(str(w.get("warning", w) if isinstance(w, dict) else w) for w in words)
                out.append(
                    DiagResult(
                        str(t.get("name", "?")), str(r.get("gpu_ids", "")), str(r.get("status", "")).upper(), detail
                    )
                )
    return out


@dataclass(frozen=True, slots=True)
class RdmaPort:
    device: str  # mlx5_0
    port: int
    state: str  # ACTIVE, DOWN, ... (the word after "4: ")
    phys_state: str  # LinkUp, Disabled, ...
    rate_gbps: float | None
    link_layer: str  # InfiniBand | Ethernet (RoCE)
    counters: dict[str, int]  # counters/ and hw_counters/ by file name


def rdma_ports(root: Path) -> list[RdmaPort]:
    """/sys/class/infiniband: each device's ports, their state and error counters (where the NIC offers them)."""
    out = []
    for dev in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        for port in sorted((dev / "ports").iterdir()) if (dev / "ports").is_dir() else []:

            def read(name: str, port: Path = port) -> str:
                try:
                    return (port / name).read_text().strip()
                except OSError:
                    return ""

            counters: dict[str, int] = {}
            for sub in ("counters", "hw_counters"):
                for f in sorted((port / sub).iterdir()) if (port / sub).is_dir() else []:
                    value = read(f"{sub}/{f.name}")
                    if value.isdigit():
                        counters[f.name] = int(value)
            rate = re.match(r"([\d.]+) Gb/sec", read("rate"))
            out.append(
                RdmaPort(
                    dev.name,
                    int(port.name),
                    read("state").split(":")[-1].strip(),
                    read("phys_state").split(":")[-1].strip(),
                    float(rate.group(1)) if rate else None,
                    read("link_layer"),
                    counters,
                )
            )
    return out


@dataclass(frozen=True, slots=True)
class LinkState:
    name: str
    up: bool  # administratively up with a carrier (operstate UP; UNKNOWN counts for virtual links)
    operstate: str
    mtu: int
    addresses: tuple[str, ...]  # IPv4 address/prefix


def ip_links(text: str) -> dict[str, LinkState]:
    """`ip -j addr` as interface -> state."""
    out = {}
    for link in json.loads(text or "[]"):
        flags = link.get("flags", [])
        state = link.get("operstate", "UNKNOWN")
        out[link["ifname"]] = LinkState(
            link["ifname"],
            "UP" in flags and "LOWER_UP" in flags and state in ("UP", "UNKNOWN"),
            state,
            int(link.get("mtu", 0)),
            tuple(f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", []) if a.get("family") == "inet"),
        )
    return out
