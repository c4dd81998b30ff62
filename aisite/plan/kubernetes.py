"""The Kubernetes part of the plan: what kubeadm, kube-vip, containerd and the CNI are given, and the versions
of the pinned components with the Kubernetes releases they support."""

from __future__ import annotations

from aisite.model import Site, Tenant, group_hardware
from aisite.plan.types import (
    EtcdBackupPlan,
    KubernetesPlan,
    MonitoringPlan,
    Node,
    NotebookLoginPlan,
    NotebooksPlan,
    RegistryPlan,
    TenantPlan,
    WorkloadPlan,
    WorkloadThresholds,
)

API_PORT = 6443
DNS_DOMAIN = "cluster.local"
KUBE_VIP_IMAGE = "ghcr.io/kube-vip/kube-vip:v1.0.0"
CALICO_VERSION = "v3.31.3"
CNI_MANIFESTS = {
    "calico": f"https://raw.githubusercontent.com/projectcalico/calico/{CALICO_VERSION}/manifests/calico.yaml"
}
# Minor releases of Kubernetes the pinned components are tested with: kubeadm's v1beta4 configuration (1.31+),
# Calico v3.31 (1.33-1.35), kube-vip v1.0 (1.29+). The project's own support window ends at 1.33 (2026-06-28).
SUPPORTED_MINORS = (33, 35)
PINNED = f"kubeadm v1beta4, Calico {CALICO_VERSION}, kube-vip {KUBE_VIP_IMAGE.rsplit(':', 1)[1]}"


# Dynamic Resource Allocation: resource.k8s.io/v1 (DeviceClass, ResourceClaim, ResourceClaimTemplate) is served
# from Kubernetes 1.34, where DRA went GA; the site's version set asks 1.34.2 or later (issue 39's matrix), above
# the DRA driver chart's own floor (nvidia-dra-driver-gpu 25.12.0, Chart.yaml kubeVersion ">=1.32.0-0", which
# falls back to v1beta1/2 there). The driver branch: Blackwell's floor (aisite.catalog) covers the racks.
DRA_MIN_VERSION = (1, 34, 2)


def minor(version: str) -> int:
    return int(version.split(".")[1])


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def package_repository(version: str) -> str:
    """pkgs.k8s.io's repository of one minor release: it holds that minor's patches only."""
    return f"https://pkgs.k8s.io/core:/stable:/v1.{minor(version)}/deb/"


def kubernetes_plan(site: Site, nodes: tuple[Node, ...]) -> KubernetesPlan:
    k = site.kubernetes
    vip = str(site.control_plane.vip)
    control_plane = tuple(n for n in nodes if n.role == "control-plane")
    # The VIP, every control-plane node by name, FQDN and address: the API certificate holds whichever a client uses.
    sans = [vip, *(n.name for n in control_plane), *(n.fqdn for n in control_plane)]
    sans += [n.management.address for n in control_plane]
    return KubernetesPlan(
        version=k.version,
        cni=k.cni,
        api_vip=vip,
        api_port=API_PORT,
        pod_cidr=str(site.networks.pods),
        service_cidr=str(site.networks.services),
        addons=tuple(k.addons),
        endpoint=f"{vip}:{API_PORT}",
        dns_domain=DNS_DOMAIN,
        control_plane=tuple(n.name for n in control_plane),
        cert_sans=tuple(dict.fromkeys(sans)),
        vip_interface=site.control_plane.interfaces.management,
        package_repository=k.package_repository or package_repository(k.version),
        cni_manifest=k.cni_manifest or CNI_MANIFESTS.get(k.cni, ""),
        pod_security=k.pod_security,
        kube_vip_image=KUBE_VIP_IMAGE,
        sandbox_image=k.containerd.sandbox_image,
        containerd_apt_repository=k.containerd.apt_repository,
        registries=registries(site),
        nvidia_default_runtime=k.containerd.nvidia_default_runtime,
        mig_strategy=k.mig_strategy,
        gpu_allocation=k.gpu_allocation,
        rail_pod_addresses=site.fabric.rail_pod_addresses,
        gpu_types=tuple(gpu_inventory(site)),
        scalable_unit=site.fabric.scalable_unit,
        chart_repositories=dict(k.chart_repositories),
        job_registry=k.job_registry,
        monitoring=MonitoringPlan(
            k.monitoring.retention,
            k.monitoring.prometheus_storage_gi,
            k.monitoring.alertmanager_storage_gi,
            k.monitoring.storage_class,
        ),
        etcd_backup=EtcdBackupPlan(**k.etcd_backup.model_dump()),
        certificate_renew_days=k.certificate_renew_days,
        notebooks=NotebooksPlan(
            **k.notebooks.model_dump(exclude={"login"}),
            login=NotebookLoginPlan(**k.notebooks.login.model_dump()) if k.notebooks.login else None,
        ),
    )


# The registries the pinned images come from (aisite/platform/images.py; a test holds every image of every
# shipped stack to this list).
UPSTREAM_REGISTRIES = ("docker.io", "ghcr.io", "nvcr.io", "quay.io", "registry.k8s.io")


def registry_host(image: str) -> str:
    """The registry an image reference pulls from (Docker Hub when its first segment names no host)."""
    first = image.split("/", 1)[0]
    return first if "/" in image and ("." in first or ":" in first or first == "localhost") else "docker.io"


def registries(site: Site) -> tuple[RegistryPlan, ...]:
    """containerd's registries: the site's own entries, then, with an image mirror, every other registry the
    site's images come from, pulled through the mirror."""
    k = site.kubernetes
    out = [RegistryPlan(r.host, tuple(r.mirrors), r.ca) for r in k.containerd.registries]
    if k.image_mirror:
        hosts = set(UPSTREAM_REGISTRIES) | {registry_host(w.image) for w in site.workloads if w.image}
        if k.job_registry:
            hosts.add(registry_host(f"{k.job_registry}/image"))
        declared = {r.host for r in out}
        mirror = k.image_mirror.rstrip("/")
        out += [RegistryPlan(h, (f"{mirror}/v2/{h}",), None, True) for h in sorted(hosts - declared)]
    return tuple(out)


def gpu_inventory(site: Site) -> dict[str, int]:
    """GPUs of each type the site has, in the order the GPU groups declare the types."""
    out: dict[str, int] = {}
    for g in site.gpu_nodes:
        gtype, count, *_ = group_hardware(g)
        if g.size and count:
            out[gtype] = out.get(gtype, 0) + g.size * count
    return out


def node_gpus(site: Site) -> dict[str, list[int]]:
    """GPU type -> the GPUs of each node of that type (one entry per node), in the groups' order."""
    nodes: dict[str, list[int]] = {}
    for g in site.gpu_nodes:
        gtype, count, *_ = group_hardware(g)
        nodes.setdefault(gtype, []).extend([count] * g.size)
    return nodes


def tenant_flavors(t: Tenant, gpu_types: list[str]) -> tuple[tuple[str, int], ...]:
    """(GPU type, quota) of a tenant: a bare number applies to the site's one GPU type (checks refuse it otherwise)."""
    if isinstance(t.gpu_quota, int):
        return ((gpu_types[0], t.gpu_quota),) if gpu_types else ()
    return tuple((g, t.gpu_quota[g]) for g in gpu_types if g in t.gpu_quota)


def tenant_plans(site: Site) -> tuple[TenantPlan, ...]:
    types = list(gpu_inventory(site))
    out = []
    for t in site.kubernetes.tenants:
        total = t.gpu_quota if isinstance(t.gpu_quota, int) else sum(t.gpu_quota.values())
        out.append(
            TenantPlan(
                t.name,
                f"tenant-{t.name}",
                total,
                tuple(t.groups),
                tenant_flavors(t, types),
                t.borrowing_limit,
                t.lending_limit,
                t.pod_security,
            )
        )
    return tuple(out)


# The operator whose custom resource runs each workload kind (None: a batch Job, no operator needed).
MPI_KINDS = frozenset({"nccl-allreduce", "tf-cnn-benchmarks"})
TRAINER_KINDS = frozenset({"resnet50-train", "resnet50-infer", "resnet152-train", "resnet152-infer"})


def job_operator(kind: str, addons: set[str] | frozenset[str] | tuple[str, ...]) -> str | None:
    """mpi-operator for MPI jobs; training-operator (the Kubeflow trainer, TrainJob) for the PyTorch payload, or
    an MPIJob of the payload where only the MPI Operator is installed; None for batch Jobs (fio, ib_write_bw,
    iperf3)."""
    if kind in MPI_KINDS:
        return "mpi-operator"
    if kind in TRAINER_KINDS:
        return "mpi-operator" if "training-operator" not in addons and "mpi-operator" in addons else "training-operator"
    return None


def workload_plans(site: Site) -> tuple[WorkloadPlan, ...]:
    types = list(gpu_inventory(site))
    return tuple(
        WorkloadPlan(
            w.name,
            w.kind,
            w.tenant,
            f"tenant-{w.tenant}",
            w.nodes,
            w.gpus_per_node,
            w.gpu_type or (types[0] if types else ""),
            w.image,
            w.batch_size,
            WorkloadThresholds(**w.thresholds.model_dump()),
            job_operator(w.kind, tuple(site.kubernetes.addons)),
        )
        for w in site.workloads
    )
