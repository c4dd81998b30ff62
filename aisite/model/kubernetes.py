"""Kubernetes and the platform on it: tenants, addons, registries, monitoring, notebooks and workloads."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from aisite.fields import (
    AptSource,
    DnsLabel,
    DnsSubdomain,
    Group,
    Image,
    PemCerts,
    RegistryHost,
    RegistryRef,
    Url,
)
from aisite.model.base import GpuCount, Name, Strict, known_gpu_type


class Tenant(Strict):
    name: Name
    # GPUs the tenant is guaranteed (Kueue's nominal quota): a number on a site with one GPU type, else per type.
    gpu_quota: GpuCount | dict[Annotated[str, AfterValidator(known_gpu_type)], GpuCount]
    groups: list[Group] = []
    # GPUs of each type the tenant may borrow from the cohort beyond its quota / lend from it (None: no limit).
    borrowing_limit: GpuCount | None = None
    lending_limit: GpuCount | None = None
    # The Pod Security level its namespace enforces. restricted: pods run as non-root with no capabilities (the
    # PyTorch TrainJobs and the two-pod and fio Jobs do). baseline admits root, which the MPI Operator's workers
    # need to start sshd in the pinned images; neither admits privileged pods or host paths.
    pod_security: Literal["restricted", "baseline"] = "restricted"


Addon = Literal[
    "gpu-operator",
    "jupyterhub",
    "kserve",
    "network-operator",
    "kueue",
    "mpi-operator",
    "training-operator",
    "volcano",
    "flux",
    "pulumi-operator",
    "prometheus",
]


class Registry(Strict):
    """A registry the nodes pull from: mirrors tried in order before it, and its CA when it is private."""

    host: RegistryHost
    mirrors: list[Url] = []
    ca: PemCerts | None = None


class Containerd(Strict):
    # An APT source line for an air-gapped mirror; None: the distribution's own package.
    apt_repository: AptSource | None = None
    sandbox_image: Image = "registry.k8s.io/pause:3.10.1"
    registries: list[Registry] = []
    # On GPU nodes: make the nvidia runtime containerd's default (else pods ask for it by RuntimeClass).
    nvidia_default_runtime: bool = True


class Monitoring(Strict):
    """Prometheus and Alertmanager (the prometheus addon): kept on persistent volumes, not in the pod."""

    # How long Prometheus keeps samples (its duration syntax); it also stops at 85 % of its volume.
    retention: Annotated[str, Field(pattern=r"^[1-9][0-9]{0,5}(h|d|w|y)$")] = "15d"
    prometheus_storage_gi: Annotated[int, Field(ge=1, le=1_000_000)] = 100
    alertmanager_storage_gi: Annotated[int, Field(ge=1, le=10_000)] = 2
    # The StorageClass of both volumes; None: the cluster's default class. Prometheus's TSDB wants a POSIX file
    # system: block or local storage rather than NFS.
    storage_class: DnsSubdomain | None = None


class EtcdBackup(Strict):
    """etcd snapshots on the control-plane nodes (role etcd_backup: a systemd timer), the newest `keep` kept."""

    schedule: Literal["hourly", "daily", "weekly"] = "hourly"
    keep: Annotated[int, Field(ge=1, le=10_000)] = 48
    # Where each snapshot is copied off the node (rsync): an absolute path (a mounted share) or host:/path over SSH
    # with root's key, which the site provides; None keeps them on the node only. A snapshot holds every Secret of
    # the cluster: the destination must be as private as the node.
    copy_to: (
        Annotated[
            str, Field(pattern=r"^([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?:)?/[A-Za-z0-9._/-]{0,1000}$", max_length=1200)
        ]
        | None
    ) = None


# What a login provider's claim is named (OAuthenticator reads it from the user's data).
Claim = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")]


class NotebookLogin(Strict):
    """The site's OAuth 2 / OpenID Connect provider, through OAuthenticator's GenericOAuthenticator. Its client
    secret is the key `client-secret` of the Secret `jupyterhub-oauth` the site creates in the jupyterhub namespace,
    never a value here. A user's groups (the `groups_claim`) are the tenants' `groups` that user may spawn in."""

    client_id: Annotated[str, Field(pattern=r"^[A-Za-z0-9._:@-]{1,200}$")]
    authorize_url: Url
    token_url: Url
    userdata_url: Url
    # The hub's own address as the provider calls it back: https://<hub>/hub/oauth_callback.
    callback_url: Url
    username_claim: Claim = "preferred_username"
    groups_claim: Claim = "groups"


class Notebooks(Strict):
    """Notebooks for every tenant (the jupyterhub addon): its profiles are sized from here and each tenant's quota."""

    # Without a login provider JupyterHub's default authenticator admits anyone: the addon needs one (checked).
    login: NotebookLogin | None = None
    # Jupyter Docker Stacks' PyTorch notebooks, the CUDA 12 build for GPU profiles (docs/using/selecting.md: a
    # `cuda12-` prefix to the tag; the 2026-08-24 build in the project's wiki, 2026-08).
    image: Image = "quay.io/jupyter/pytorch-notebook:2026-08-24"
    gpu_image: Image = "quay.io/jupyter/pytorch-notebook:cuda12-2026-08-24"
    # Each user's home: a volume of its own in the tenant's namespace (None: the cluster's default class).
    home_gi: Annotated[int, Field(ge=1, le=10_000)] = 10
    storage_class: DnsSubdomain | None = None
    # The CPU profile, and what a GPU profile gets with each GPU.
    cpus: Annotated[int, Field(ge=1, le=512)] = 2
    memory_gi: Annotated[int, Field(ge=1, le=8192)] = 8
    cpus_per_gpu: Annotated[int, Field(ge=1, le=512)] = 8
    memory_gi_per_gpu: Annotated[int, Field(ge=1, le=8192)] = 64
    # A server idle this long is stopped (JupyterHub's idle culler), its GPUs back in the tenant's quota.
    idle_minutes: Annotated[int, Field(ge=10, le=10_080)] = 60


class Kubernetes(Strict):
    version: Annotated[str, Field(pattern=r"^1\.\d+\.\d+$")] = "1.35.6"
    cni: Literal["calico", "cilium", "flannel"] = "calico"
    # Package source of kubeadm, kubelet and kubectl; None: pkgs.k8s.io for the version's minor release.
    package_repository: Url | None = None
    # Manifest the CNI is applied from; None: the pinned upstream manifest of the CNI (Calico's).
    cni_manifest: Url | None = None
    # Pod Security admission level enforced in every namespace that does not set its own.
    pod_security: Literal["privileged", "baseline", "restricted"] = "baseline"
    containerd: Containerd = Containerd()
    # Tenants' quotas may add up to more GPUs of a type than the site has (Kueue then shares them by borrowing).
    gpu_overcommit: bool = False
    # The GPU Operator's MIG strategy (single: whole-GPU resource names even with MIG; mixed: one per profile).
    mig_strategy: Literal["none", "single", "mixed"] = "single"
    # How pods get GPUs: the GPU Operator's device plugin (the nvidia.com/gpu resource), or Dynamic Resource
    # Allocation through NVIDIA's DRA driver (a ResourceClaim of its gpu.nvidia.com DeviceClass per pod). Racks
    # (NVL72) get the DRA driver's ComputeDomains either way.
    gpu_allocation: Literal["device-plugin", "dra"] = "device-plugin"
    # Chart name -> Helm repository (a mirror for air-gapped sites); unnamed charts use their upstream repository.
    chart_repositories: dict[DnsLabel, Url] = {}
    # Registry the benchmark and training jobs' images are pulled from (a mirror for air-gapped sites); None: each
    # image's upstream registry (nvcr.io, ghcr.io).
    job_registry: RegistryRef | None = None
    # One mirror for every image (air gap): containerd on every node pulls each upstream registry's images from
    # <mirror>/v2/<registry>/... (e.g. https://mirror.site:5000 holding nvcr.io/nvidia/... as `crane copy` or a
    # proxy project lays them out). A registry the site lists under containerd.registries keeps its own entry.
    image_mirror: Url | None = None
    monitoring: Monitoring = Monitoring()
    etcd_backup: EtcdBackup = EtcdBackup()
    notebooks: Notebooks = Notebooks()
    # kubeadm's certificates last a year: each control-plane node renews them when one has fewer days left than
    # this (role kubernetes_certs, a monthly timer, the nodes in turn); health.min_certificate_days says when late.
    certificate_renew_days: Annotated[int, Field(ge=7, le=330)] = 90
    addons: list[Addon] = []
    tenants: list[Tenant] = []


WorkloadKind = Literal[
    "resnet50-train",
    "resnet50-infer",
    "resnet152-train",
    "resnet152-infer",
    "tf-cnn-benchmarks",
    "nccl-allreduce",
    "ib-write-bw",
    "fio",
    "iperf3",
]


class Thresholds(Strict):
    """What `aisite bench report` requires of a workload's result; unset ones are not judged."""

    # In the result's own unit (images/s, GB/s, Gb/s, MiB/s).
    min_value: Annotated[float, Field(ge=0, le=1e12)] | None = None
    # Of the published reference for the GPU type (aisite/bench/reference.py, each figure with its source), e.g. 0.9.
    min_fraction_of_reference: Annotated[float, Field(gt=0, le=2)] | None = None
    # Throughput at N processes / (N x the single-process run), e.g. 0.9 for "near-linear".
    min_scaling_efficiency: Annotated[float, Field(gt=0, le=1.5)] | None = None


class Workload(Strict):
    name: Name
    kind: WorkloadKind
    tenant: Name
    nodes: Annotated[int, Field(ge=1, le=100_000)] = 1
    gpus_per_node: Annotated[int, Field(ge=0, le=64)] = 1
    # The GPU type it runs on (a key of the catalog); default: the site's only or first GPU type.
    gpu_type: Annotated[str, AfterValidator(known_gpu_type)] | None = None
    # The job's image; default: the pinned one for its kind in the job registry (kubernetes.job_registry).
    image: Image | None = None
    # Per process (ResNet), or per message/transfer (fio: block size in KiB) where the kind has one.
    batch_size: Annotated[int, Field(ge=1, le=1_048_576)] | None = None
    thresholds: Thresholds = Thresholds()
