"""Every container image a site pulls, for building an air-gapped site's mirror (`aisite images`).

Four sources: the pinned charts (CHART_IMAGES: what each pinned release references, the operators' runtime images
in its ClusterPolicy included; tests/test_helm.py holds it to Helm's render), the project's own objects and jobs
(read from them, `image_refs`), the hosts' (kube-vip, the sandbox image, kubeadm's control plane at the site's
version) and what aisite cannot enumerate (NOT_ENUMERATED, said in the output). `kubernetes.image_mirror` sends
every pull from the registries these live in to one mirror (containerd's hosts.toml on every node).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aisite.plan import Node, Plan
from aisite.plan.kubernetes import registry_host
from aisite.platform import jobs, objects
from aisite.platform.charts import charts, remote_manifests
from aisite.platform.notebooks import notebook_images, uses_notebooks

# Per chart (at its pin in charts.VERSIONS): every image its release references, the ClusterPolicy's operands
# included (the GPU Operator starts them; disabled ones are listed too, as a mirror should hold what a values
# change can turn on).
CHART_IMAGES: dict[str, tuple[str, ...]] = {
    "gpu-operator": (
        "nvcr.io/nvidia/cloud-native/dcgm:4.5.2-1-ubuntu22.04",
        "nvcr.io/nvidia/cloud-native/gdrdrv:v2.5.2",
        "nvcr.io/nvidia/cloud-native/k8s-cc-manager:v0.4.0",
        "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.11.0",
        "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.14.2",
        "nvcr.io/nvidia/cloud-native/nvidia-fs:2.27.3",
        "nvcr.io/nvidia/cloud-native/nvidia-sandbox-device-plugin:v0.0.3",
        "nvcr.io/nvidia/cloud-native/vgpu-device-manager:v0.4.2",
        "nvcr.io/nvidia/driver:580.126.20",
        "nvcr.io/nvidia/gpu-operator:v26.3.3",
        "nvcr.io/nvidia/k8s-device-plugin:v0.19.3",
        "nvcr.io/nvidia/k8s/container-toolkit:v1.19.1",
        "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless",
        "nvcr.io/nvidia/kubevirt-gpu-device-plugin:v1.5.0",
        "registry.k8s.io/nfd/node-feature-discovery:v0.18.3",
    ),
    "network-operator": (
        "nvcr.io/nvidia/cloud-native/network-operator:v26.4.1",
        "nvcr.io/nvidia/mellanox/network-operator-init-container:network-operator-v26.4.1",
    ),
    "kueue": ("registry.k8s.io/kueue/kueue:v0.19.2",),
    "nvidia-dra-driver-gpu": ("nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0",),
    "kube-prometheus-stack": (
        "ghcr.io/jkroepke/kube-webhook-certgen:1.8.7",
        "quay.io/prometheus-operator/prometheus-config-reloader:v0.93.1",
        "quay.io/prometheus-operator/prometheus-operator:v0.93.1",
        "quay.io/prometheus/alertmanager:v0.34.0",
        "quay.io/prometheus/node-exporter:v1.12.1-distroless",  # subchart prometheus-node-exporter 4.56.1
        "quay.io/prometheus/prometheus:v3.14.0-distroless",
        "quay.io/thanos/thanos:v0.42.4",
        "registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.20.0",  # subchart kube-state-metrics 8.4.0
    ),
    "kubeflow-trainer": (
        "ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.3.0",
        "registry.k8s.io/jobset/jobset:v0.12.0",
    ),
    "ceph-csi-rbd": (
        "quay.io/cephcsi/cephcsi:v3.12.2",
        "registry.k8s.io/sig-storage/csi-attacher:v4.6.1",
        "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.11.1",
        "registry.k8s.io/sig-storage/csi-provisioner:v5.0.1",
        "registry.k8s.io/sig-storage/csi-resizer:v1.11.1",
        "registry.k8s.io/sig-storage/csi-snapshotter:v8.0.1",
    ),
    "ceph-csi-cephfs": (
        "quay.io/cephcsi/cephcsi:v3.12.2",
        "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.11.1",
        "registry.k8s.io/sig-storage/csi-provisioner:v5.0.1",
        "registry.k8s.io/sig-storage/csi-resizer:v1.11.1",
        "registry.k8s.io/sig-storage/csi-snapshotter:v8.0.1",
    ),
    # CRDs only.
    "kserve-crd": (),
    # The controller, and the agent, router and storage initializer its InferenceServices may use (the
    # inferenceservice-config ConfigMap names them).
    "kserve-resources": (
        "docker.io/kserve/agent:v0.20.0",
        "docker.io/kserve/kserve-controller:v0.20.0",
        "docker.io/kserve/router:v0.20.0",
        "docker.io/kserve/storage-initializer:v0.20.0",
        "quay.io/brancz/kube-rbac-proxy:v0.18.0",
    ),
    # The hub and its proxy (the user scheduler, placeholders and image pullers are off); the notebooks' images are
    # the site's (kubernetes.notebooks), listed from the plan.
    "jupyterhub": ("quay.io/jupyterhub/configurable-http-proxy:5.2.0", "quay.io/jupyterhub/k8s-hub:4.4.0"),
    "csi-driver-nfs": (
        "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.17.0",
        "registry.k8s.io/sig-storage/csi-provisioner:v6.3.0",
        "registry.k8s.io/sig-storage/csi-resizer:v2.2.0",
        "registry.k8s.io/sig-storage/csi-snapshotter:v8.6.0",
        "registry.k8s.io/sig-storage/livenessprobe:v2.19.0",
        "registry.k8s.io/sig-storage/nfsplugin:v4.13.4",
    ),
}
# Images aisite pulls but cannot name here, per source: said with the list rather than left out silently.
NOT_ENUMERATED = {
    "kube-prometheus-stack": "Grafana's (subchart grafana 12.11.1): its chart is not in this project's checks",
    "mpi-operator": "the MPI Operator's release manifest's image (fetched at install)",
    "kubeadm": "etcd, CoreDNS and pause as kubeadm {version} pins them (`kubeadm config images list "
    "--kubernetes-version v{version}`)",
    "cni": "the CNI manifest's images ({manifest})",
}
KUBEADM_IMAGES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")
CONTROL_PLANE_IMAGES = KUBEADM_IMAGES[:3]  # kube-proxy runs on every node
KUBEADM_REPOSITORY = "registry.k8s.io"  # the kubernetes role's kubernetes_image_repository
# An image reference as the manifests write one: a registry host with a dot, a path and a tag or digest.
_REF = re.compile(r"(?:[a-z0-9-]+\.)+[a-z0-9-]+(?::[0-9]+)?/[a-z0-9._/-]+(?::[A-Za-z0-9._-]+|@sha256:[0-9a-f]{64})")


def image_refs(node: Any) -> set[str]:
    """The image references in Kubernetes objects: `image:` strings, {repository, image, version} triples
    (the operators' custom resources) and references inside other strings (an operator's flags)."""
    out: set[str] = set()
    if isinstance(node, dict):
        repo, image, version = node.get("repository"), node.get("image"), node.get("version")
        if isinstance(repo, str) and isinstance(image, str) and isinstance(version, str):
            out.add(f"{repo}/{image}:{version}")
        for value in node.values():
            out |= image_refs(value)
    elif isinstance(node, list):
        for value in node:
            out |= image_refs(value)
    elif isinstance(node, str):
        out |= set(_REF.findall(node))
    return out


@dataclass
class SiteImages:
    images: dict[str, list[str]] = field(default_factory=dict)  # image -> what pulls it
    not_enumerated: list[str] = field(default_factory=list)
    # image -> the platforms (linux/amd64, linux/arm64) of the nodes that may pull it: a mirror holds each.
    platforms: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def add(self, image: str, source: str) -> None:
        self.images.setdefault(image, [])
        if source not in self.images[image]:
            self.images[image].append(source)

    def registries(self) -> list[str]:
        return sorted({registry_host(i) for i in self.images})


def site_images(plan: Plan) -> SiteImages:
    """Every image the site pulls, sorted, with its sources; and what could not be enumerated."""

    k = plan.kubernetes
    out = SiteImages()
    for c in charts(plan):
        for image in CHART_IMAGES[c.chart]:
            out.add(image, f"chart {c.chart} {c.version}")
        if c.chart in NOT_ENUMERATED:
            out.not_enumerated.append(f"{c.chart}: {NOT_ENUMERATED[c.chart]}")
    for name, objs in (objects(plan) | jobs(plan)).items():
        for image in image_refs(objs):
            out.add(image, f"manifests/{name}")
    if uses_notebooks(plan):
        for image in notebook_images(plan):
            out.add(image, "notebooks (kubernetes.notebooks)")
    for m in remote_manifests(plan):
        out.not_enumerated.append(f"{m.name}: {NOT_ENUMERATED[m.name]}")
    out.add(k.kube_vip_image, "kube-vip (control plane)")
    out.add(k.sandbox_image, "containerd sandbox")
    for name in KUBEADM_IMAGES:
        out.add(f"{KUBEADM_REPOSITORY}/{name}:v{k.version}", "kubeadm")
    out.not_enumerated.append("kubeadm: " + NOT_ENUMERATED["kubeadm"].format(version=k.version))
    if k.cni_manifest:
        out.not_enumerated.append("cni: " + NOT_ENUMERATED["cni"].format(manifest=k.cni_manifest))
    out.images = dict(sorted(out.images.items()))
    # The control plane's own images run there alone; every other one (DaemonSets, jobs and their launchers) may
    # land on any architecture the site has, so a mirror must carry each of them.
    every = _platforms(plan.nodes)
    control = _platforms(n for n in plan.nodes if n.role == "control-plane") or every
    only_control = {k.kube_vip_image} | {f"{KUBEADM_REPOSITORY}/{n}:v{k.version}" for n in CONTROL_PLANE_IMAGES}
    out.platforms = {i: control if i in only_control else every for i in out.images}
    return out


def _platforms(nodes: Iterable[Node]) -> tuple[str, ...]:
    return tuple(sorted({f"linux/{n.os.arch}" for n in nodes}))
