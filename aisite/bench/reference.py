"""Published reference figures the report compares with (DESIGN.md's table, with its sources).

Per GPU (images/s) for the ResNet workloads, per NIC for the fabric ones. Only like is compared with like: a
figure measured on CPUs (the lab) is never judged against a GPU reference, and a figure with no reference here is
reported as such, not given one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Reference:
    kind: str
    device: str  # a GPU type of the catalog (v100, a100, h100, ...) or a NIC speed ("100g")
    per_unit: float  # per GPU, or per NIC
    unit: str
    source: str


REFERENCES: tuple[Reference, ...] = (
    # ResNet-50 v1.5, mixed precision, synthetic or ImageNet input, images/s per GPU.
    Reference("resnet50-train", "v100", 1300.0, "images/s", "NVIDIA NGC ResNet-50 v1.5 TensorFlow, V100 (~1,300/GPU)"),
    Reference(
        "resnet50-train",
        "a100",
        2470.0,
        "images/s",
        "NVIDIA DeepLearningExamples ResNet-50 v1.5 PyTorch, A100 80GB AMP",
    ),
    Reference(
        "tf-cnn-benchmarks",
        "v100",
        17250.0 / 16,
        "images/s",
        "vScaler AI reference architecture: tf_cnn_benchmarks ResNet-50 on a DGX-2 (16x V100), 17,250 images/s",
    ),
    Reference(
        "resnet50-infer",
        "v100",
        15000.0 / 16,
        "images/s",
        "vScaler AI reference architecture: >15k images/s ResNet-50 inference on one DGX-2 (16x V100)",
    ),
    # Fabric: per 100G RoCE NIC.
    Reference("nccl-allreduce", "100g", 11.5, "GB/s", "NCCL all_reduce_perf busbw over 100G RoCE, ~11-12 GB/s per NIC"),
    Reference("ib-write-bw", "100g", 92.0, "Gb/s", "perftest ib_write_bw on 100G RoCE, ~92 Gb/s"),
)

# Published for the newer GPUs as time to train, not throughput (MLPerf Training v3.0, closed, ResNet-50 v1.5 to
# 75.9 % top-1): listed beside a result for context; no images/s reference is invented from them.
CONTEXT: dict[str, str] = {
    "h100": "MLPerf Training v3.0 3.0-2053: 8x H100-SXM5-80GB, ResNet-50 v1.5 in 13.47 min (MXNet); "
    "3.0-2071: 64x H100 in 2.66 min",
    "h200": "no ResNet-50 throughput figure for H200 was found in the sources this project holds",
}


def reference_for(kind: str, device: str) -> Reference | None:
    return next((r for r in REFERENCES if r.kind == kind and r.device == device), None)
