"""NVIDIA's DRA driver as the platform's other modules see it: whether it is installed, what it allocates, and the
DeviceClasses and Kueue resource names its claims carry. Below charts.py, which installs it, and the jobs, quotas and
tenants that claim through it."""

from __future__ import annotations

from aisite.plan import Plan

DRA_DRIVER = "nvidia-dra-driver-gpu"
# The DeviceClasses the DRA driver's chart makes (templates/deviceclass-*.yaml): whole GPUs, and a ComputeDomain's
# IMEX channel.
GPU_DEVICE_CLASS = "gpu.nvidia.com"
CHANNEL_DEVICE_CLASS = "compute-domain-default-channel.nvidia.com"
# What Kueue counts a claim of each as (its Configuration's resources.deviceClassMappings: every DeviceClass a job's
# ResourceClaimTemplates name must be mapped, or Kueue refuses the job, kueue 0.19.2 pkg/dra/claims.go): GPUs as the
# quota's own resource, so a tenant's quota reads the same under either allocation.
CHANNEL_RESOURCE = "aisite.io/imex-channel"


def uses_dra_driver(plan: Plan) -> bool:
    """NVIDIA's DRA driver is installed (beside the GPU Operator) for DRA's GPU allocation and racks' ComputeDomains."""
    k = plan.kubernetes
    return "gpu-operator" in k.addons and (k.gpu_allocation == "dra" or bool(plan.racks))


def dra_gpus(plan: Plan) -> bool:
    """Whether pods claim their GPUs through the DRA driver (gpu_allocation: dra) rather than the device plugin."""
    return plan.kubernetes.gpu_allocation == "dra" and uses_dra_driver(plan)


def compute_domains(plan: Plan) -> bool:
    """Whether the DRA driver serves ComputeDomains (the site has racks), whose channels jobs then claim."""
    return uses_dra_driver(plan) and bool(plan.racks)
