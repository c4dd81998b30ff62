"""Known hardware: GPU types, GPU server models and the driver branches each generation supports.

These are facts about hardware, not site choices, so they live in code; a site picks a model by name and may
override counts only through the `generic` model.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuType:
    name: str
    product: str
    arch: str
    memory_gib: int
    # Highest driver branch that still supports the architecture (None: no known ceiling).
    max_driver_branch: int | None
    max_cuda_major: int | None
    default_driver_branch: int


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
    )
}


@dataclass(frozen=True, slots=True)
class ServerModel:
    name: str
    gpu_type: str
    gpus: int
    nvswitch: bool
    compute_nics: int
    nic_speed_gbps: int
    nic_model: str


SERVER_MODELS: dict[str, ServerModel] = {
    m.name: m
    for m in (
        ServerModel("dgx-2", "v100", 16, True, 8, 100, "ConnectX-5"),
        ServerModel("dgx-a100", "a100", 8, True, 8, 200, "ConnectX-6"),
        ServerModel("dgx-h100", "h100", 8, True, 8, 400, "ConnectX-7"),
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

    def ports_at(self, gbps: int) -> int:
        """The most ports at `gbps`: each cage split into native/gbps ports, up to the ASIC's port count."""
        return min(self.max_ports, self.cages * max(1, self.cage_gbps // gbps))


# NVIDIA Spectrum fabric switches (datasheets): Spectrum-4 SN5600, 64 x 800G OSFP, 51.2 Tb/s, up to 256 ports
# (128 x 400G, 256 x 200G and below); Spectrum-3 SN4700, 32 x 400G QSFP-DD, up to 128 ports; Spectrum SN2700,
# 32 x 100G QSFP28, up to 64 ports. A site naming one of these is held to it; other models are taken at their word.
SWITCH_MODELS: dict[str, SwitchHardware] = {
    m.name: m
    for m in (
        SwitchHardware("SN5600", 64, 800, 256),
        SwitchHardware("SN4700", 32, 400, 128),
        SwitchHardware("SN2700", 32, 100, 64),
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
}
# perftest ib_write_bw per port, by the port's speed in Gb/s.
IB_WRITE_BW_GBPS: dict[int, AcceptanceFigure] = {
    200: AcceptanceFigure(180.0, "Gb/s", f"{AZURE_NHC} README, check_ib_bw_gdr, ND96asr_v4 (HDR 200G)"),
    400: AcceptanceFigure(
        375.0, "Gb/s", f"{AZURE_NHC}, ND H100 v5 (NDR 400G), as issue 27 quotes it (the README's table: 380)"
    ),
}
# DCGM diagnostics run level per acceptance level (dcgmi diag -r): 1 takes seconds, 2 about 2 min, 3 about 15 min.
DCGM_LEVELS = {"quick": 1, "full": 3}
