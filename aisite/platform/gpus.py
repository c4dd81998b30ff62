"""How a pod gets its GPUs, and a ComputeDomain's IMEX channel, on the site: one place for the jobs and acceptance.

- The device plugin (gpu_allocation: device-plugin): a limit on nvidia.com/gpu.
- Dynamic Resource Allocation (gpu_allocation: dra): a claim from a ResourceClaimTemplate (resource.k8s.io/v1) of
  the DRA driver's gpu.nvidia.com DeviceClass, made in the pod's namespace before the pod.
- Pods of several rack-scale trays that share NVLink memory: a ComputeDomain (NVIDIA's DRA driver runs the IMEX
  daemons for it) and a claim on its channel, whose template the driver makes from the ComputeDomain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aisite.plan import Plan
from aisite.platform.common import GPU_RESOURCE, obj
from aisite.platform.dra import GPU_DEVICE_CLASS, dra_gpus

GPU_CLAIM, CHANNEL_CLAIM = "gpus", "imex-channel"  # the pods' claim names


@dataclass(frozen=True)
class GpuRequest:
    """What a pod that wants GPUs (and a channel) carries, and what must exist before it."""

    limits: dict[str, str] = field(default_factory=dict)  # the container's (device plugin)
    claims: list[dict[str, str]] = field(default_factory=list)  # the pod's spec.resourceClaims
    objects: list[dict[str, Any]] = field(default_factory=list)  # made first, in the pod's namespace

    @property
    def container_claims(self) -> list[dict[str, str]]:
        """The container's resources.claims: every claim of the pod."""
        return [{"name": c["name"]} for c in self.claims]


def gpu_request(
    plan: Plan, count: int, name: str, namespace: str, labels: dict[str, str], *, domain: str | None = None
) -> GpuRequest:
    """`count` GPUs a pod (none: nothing), under the names `name`-gpus (the template) and `domain` (a ComputeDomain,
    where the pods share one)."""
    limits: dict[str, str] = {}
    claims: list[dict[str, str]] = []
    objects: list[dict[str, Any]] = []
    if count and dra_gpus(plan):
        request = {"deviceClassName": GPU_DEVICE_CLASS, "allocationMode": "ExactCount", "count": count}
        spec: dict[str, Any] = {"spec": {"devices": {"requests": [{"name": GPU_CLAIM, "exactly": request}]}}}
        objects.append(obj("resource.k8s.io/v1", "ResourceClaimTemplate", f"{name}-gpus", labels, namespace, spec=spec))
        claims.append({"name": GPU_CLAIM, "resourceClaimTemplateName": f"{name}-gpus"})
    elif count:
        limits[GPU_RESOURCE] = str(count)
    if domain:
        # numNodes 0: the CRD's advice with IMEX daemons by DNS name (the driver's default); each pod is released as
        # soon as its own node's daemon runs.
        cd: dict[str, Any] = {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{domain}-channel"}}}
        objects.append(obj("resource.nvidia.com/v1beta1", "ComputeDomain", domain, labels, namespace, spec=cd))
        claims.append({"name": CHANNEL_CLAIM, "resourceClaimTemplateName": f"{domain}-channel"})
    return GpuRequest(limits, claims, objects)
