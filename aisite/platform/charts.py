"""The Helm charts a site's platform needs, pinned, with values derived from the plan.

Every repository is a setting (`kubernetes.chart_repositories`, chart name -> URL) so an air-gapped site points
at its mirror; the versions are the project's pins, the ones its tests hold the values against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from aisite.plan import GPU_TAINT, Plan
from aisite.platform.admission import TENANT_NAMESPACES
from aisite.platform.common import GPU_RESOURCE, labels, obj, pod_security_labels
from aisite.platform.dra import (
    CHANNEL_DEVICE_CLASS,
    CHANNEL_RESOURCE,
    DRA_DRIVER,
    GPU_DEVICE_CLASS,
    compute_domains,
    dra_gpus,
    uses_dra_driver,
)
from aisite.platform.monitoring import dcgm_metrics_csv
from aisite.platform.notebooks import NAMESPACE as HUB_NAMESPACE
from aisite.platform.notebooks import RELEASE as HUB_RELEASE
from aisite.platform.notebooks import jupyterhub_values, uses_notebooks

# ceph-csi's charts (each released under its own name, in a namespace of that name): the CSI driver each installs and
# the Secret its values name (secret.name), which holds a key Ceph makes and is never rendered here.
CEPH_RBD, CEPH_CEPHFS = "ceph-csi-rbd", "ceph-csi-cephfs"
CEPH_CSI = {CEPH_RBD: ("rbd.csi.ceph.com", "csi-rbd-secret"), CEPH_CEPHFS: ("cephfs.csi.ceph.com", "csi-cephfs-secret")}
# Exempt from Pod Security by the API server's admission configuration (kubernetes_pod_security_exempt_namespaces).
EXEMPT_NAMESPACE = "kube-system"

UPSTREAM = {
    "gpu-operator": "https://helm.ngc.nvidia.com/nvidia",
    "network-operator": "https://helm.ngc.nvidia.com/nvidia",
    "kueue": "oci://registry.k8s.io/kueue/charts",
    "csi-driver-nfs": "https://raw.githubusercontent.com/kubernetes-csi/csi-driver-nfs/master/charts",
    "kube-prometheus-stack": "https://prometheus-community.github.io/helm-charts",
    "kubeflow-trainer": "oci://ghcr.io/kubeflow/charts",
    "ceph-csi-rbd": "https://ceph.github.io/csi-charts",
    "ceph-csi-cephfs": "https://ceph.github.io/csi-charts",
    "nvidia-dra-driver-gpu": "https://helm.ngc.nvidia.com/nvidia",
    "kserve-crd": "oci://ghcr.io/kserve/charts",
    "kserve-resources": "oci://ghcr.io/kserve/charts",
    "jupyterhub": "https://hub.jupyter.org/helm-chart/",
}
VERSIONS = {
    # One GPU Operator for every generation: the part that drops Volta is the driver, and the driver stays with the
    # host's nvidia role at the plan's branch (R580 for V100); toolkit, device plugin and DCGM exporter support it.
    "gpu-operator": "v26.3.3",
    "network-operator": "26.4.1",
    "kueue": "0.19.2",
    "csi-driver-nfs": "4.13.4",
    "kube-prometheus-stack": "88.5.3",
    "kubeflow-trainer": "2.3.0",
    "ceph-csi-rbd": "3.12.2",
    "ceph-csi-cephfs": "3.12.2",
    # NVIDIA's own release (nvcr.io image, NVIDIA's Helm repository), the one beside GPU Operator 26.3; the
    # project's later home (kubernetes-sigs, dra-driver-nvidia-gpu 0.4.0, registry.k8s.io) is a rename to follow.
    "nvidia-dra-driver-gpu": "25.12.0",
    # KServe's two charts (its README's install: the CRDs, then the controller), tagged with a leading v.
    "kserve-crd": "v0.20.0",
    "kserve-resources": "v0.20.0",
    # Zero to JupyterHub (JupyterHub 5.5.0, KubeSpawner 7.0.0 in its hub image).
    "jupyterhub": "4.4.0",
}
# KServe in its Standard mode (a Deployment and Service per InferenceService; the Knative mode needs Knative and
# Istio, which the site does not run), without its ingress: the serving proxy is each model's address. Its webhooks'
# certificate is a cert-manager Certificate the chart renders: cert-manager must be on the cluster (`aisite validate`
# says so; the project does not pin it).
# Its images named with their registry (the chart's are Docker Hub short names, which `aisite images` and a mirror's
# rewrite would not see as docker.io's).
KSERVE_VALUES: dict[str, Any] = {
    "kserve": {
        "controller": {
            "deploymentMode": "Standard",
            "gateway": {"disableIngressCreation": True},
            "image": "docker.io/kserve/kserve-controller",
        },
        "agent": {"image": "docker.io/kserve/agent"},
        "router": {"image": "docker.io/kserve/router"},
        "storage": {"image": "docker.io/kserve/storage-initializer"},
    }
}
KSERVE_KINDS = ("InferenceService", "ServingRuntime", "ClusterServingRuntime", "InferenceGraph", "TrainedModel")
# Job kinds Kueue manages: batch Jobs and bare pods always; MPI Operator v2's MPIJob and the Kubeflow trainer's
# TrainJob where the site installs their operator (an integration whose CRD is absent makes Kueue wait for it).
KUEUE_FRAMEWORKS = ("batch/job", "pod")
KUEUE_ADDON_FRAMEWORKS = {"mpi-operator": "kubeflow.org/mpijob", "training-operator": "trainer.kubeflow.org/trainjob"}
# The chart's own Configuration (kueue 0.19.2's values), kept where the site decides nothing: each controller's
# concurrency (without it every controller falls back to one reconcile at a time) and the API client's rate. A
# test holds these to the chart's.
KUEUE_CHART_DEFAULTS: dict[str, Any] = {
    "controller": {
        "groupKindConcurrency": {
            "Job.batch": 5,
            "Pod": 5,
            "Workload.kueue.x-k8s.io": 10,
            "LocalQueue.kueue.x-k8s.io": 5,
            "ClusterQueue.kueue.x-k8s.io": 5,
            "ResourceFlavor.kueue.x-k8s.io": 1,
        }
    },
    "clientConnection": {"qps": 300, "burst": 500},
}
# Kueue meters GPUs only (the tenants' namespaces cap CPU and memory): resources it would otherwise require every
# ClusterQueue to cover.
KUEUE_IGNORED = ("cpu", "memory", "ephemeral-storage", "hugepages-", "pods", "rdma/")


@dataclass(frozen=True)
class RemoteManifest:
    """An operator shipped as a release manifest rather than a chart (MPI Operator), applied as it is."""

    name: str
    version: str
    url: str
    provides: tuple[str, ...] = ()


# MPI Operator v2 owns mpijobs.kubeflow.org (MPIJob v2beta1); the Kubeflow trainer v2 (TrainJob) does not define it,
# so the two install side by side. The v1 training operator would claim the same CRD: it is not installed.
MPI_OPERATOR_VERSION = "v0.8.0"
MPI_OPERATOR_URL = (
    f"https://raw.githubusercontent.com/kubeflow/mpi-operator/{MPI_OPERATOR_VERSION}/deploy/v2beta1/mpi-operator.yaml"
)


def remote_manifests(plan: Plan) -> list[RemoteManifest]:
    """Operators applied from their release manifests (a mirror through `kubernetes.chart_repositories`, by name)."""
    out = []
    if "mpi-operator" in plan.kubernetes.addons:
        url = plan.kubernetes.chart_repositories.get("mpi-operator", MPI_OPERATOR_URL)
        out.append(RemoteManifest("mpi-operator", MPI_OPERATOR_VERSION, url, ("MPIJob",)))
    return out


@dataclass(frozen=True)
class Chart:
    chart: str  # the chart's name in its repository
    release: str
    namespace: str
    version: str
    repository: str
    values: dict[str, Any] = field(default_factory=dict)
    # Kinds whose CRDs the release installs: objects of these kinds wait for it.
    provides: tuple[str, ...] = ()
    # The Pod Security level its namespace enforces: the lowest that admits the pods it renders and those its
    # operator creates at runtime (tests/test_pod_security.py checks both).
    pod_security: str = "restricted"


def _gpu_operator(plan: Plan, monitoring: bool) -> dict[str, Any]:
    mig = plan.kubernetes.mig_strategy
    return {
        # The host roles own the driver (branch pinned per GPU generation) and the container toolkit with
        # containerd's nvidia runtime; the operator runs the rest on top of them.
        "driver": {"enabled": False},
        "toolkit": {"enabled": False},
        # Under DRA the DRA driver allocates the GPUs: the two on one node would hand out the same GPUs.
        "devicePlugin": {"enabled": plan.kubernetes.gpu_allocation != "dra"},
        "gfd": {"enabled": True},
        "mig": {"strategy": "single" if mig == "none" else mig},
        "migManager": {"enabled": mig != "none"},
        "dcgmExporter": {
            "enabled": True,
            "serviceMonitor": {"enabled": monitoring},
            # The metrics the dashboard and alerts use, ECC included (the exporter's defaults leave it out).
            "config": {"name": "aisite-dcgm-metrics", "create": True, "data": dcgm_metrics_csv()},
        },
    }


def _dra_driver(plan: Plan) -> dict[str, Any]:
    dra = dra_gpus(plan)
    # Its kubelet plugin runs on the GPU nodes, which carry the GPU taint.
    toleration = {"key": GPU_TAINT.key, "operator": "Exists", "effect": GPU_TAINT.effect}
    values: dict[str, Any] = {
        # The site's version set serves resource.k8s.io/v1 (checks: Kubernetes 1.34.2 or later).
        "resourceApiVersion": "resource.k8s.io/v1",
        # GPUs only under gpu_allocation: dra (the chart refuses them beside the device plugin unless overridden,
        # and the GPU Operator's is off then); ComputeDomains where the site has racks.
        "resources": {"gpus": {"enabled": dra}, "computeDomains": {"enabled": compute_domains(plan)}},
        "kubeletPlugin": {"tolerations": [toleration]},
    }
    if dra:
        values["gpuResourcesEnabledOverride"] = True
    return values


def _volume(size_gi: int, storage_class: str | None) -> dict[str, Any]:
    """A persistent volume claim template for the Prometheus operator (None: the cluster's default class)."""
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": f"{size_gi}Gi"}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"volumeClaimTemplate": {"spec": spec}}


def _device_class_mappings(plan: Plan) -> dict[str, Any]:
    """Kueue's DRA accounting (KueueDRAIntegration, beta and on since kueue 0.18): GPUs claimed under DRA count as
    nvidia.com/gpu, a ComputeDomain's channel as aisite.io/imex-channel."""
    if not uses_dra_driver(plan):
        return {}
    mappings = []
    if dra_gpus(plan):
        mappings.append({"name": GPU_RESOURCE, "deviceClassNames": [GPU_DEVICE_CLASS]})
    if compute_domains(plan):
        mappings.append({"name": CHANNEL_RESOURCE, "deviceClassNames": [CHANNEL_DEVICE_CLASS]})
    return {"deviceClassMappings": mappings}


def kueue_frameworks(addons: tuple[str, ...] | list[str], serving: bool = False) -> list[str]:
    """Kueue's integrations: the jobs', and Deployments where the site serves models (their pods count against the
    tenant's quota as its jobs' do)."""
    frameworks = [*KUEUE_FRAMEWORKS, *(f for addon, f in KUEUE_ADDON_FRAMEWORKS.items() if addon in addons)]
    return frameworks + (["deployment"] if serving else [])


def _kueue(plan: Plan, monitoring: bool) -> dict[str, Any]:
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        **KUEUE_CHART_DEFAULTS,
        # Only tenants' namespaces carry the tenant label: Kueue's pod webhook (failurePolicy Fail) and its management
        # of pods stay out of every other namespace (operators, monitoring, kube-system), as the placement policy does.
        "managedJobsNamespaceSelector": TENANT_NAMESPACES,
        # Every job in a tenant's namespace is Kueue's, queue name or not: one without waits, suspended, instead of
        # running past the tenant's quota and the flavors' placement.
        "manageJobsWithoutQueueName": True,
        "integrations": {"frameworks": kueue_frameworks(plan.kubernetes.addons, bool(plan.serving))},
        "resources": {"excludeResourcePrefixes": list(KUEUE_IGNORED)} | _device_class_mappings(plan),
    }
    return {
        "enablePrometheus": monitoring,
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(config, sort_keys=False)},
    }


# kube-prometheus-stack's own values for its node exporter's extraArgs (kept when the site adds one).
NODE_EXPORTER_DEFAULT_ARGS = (
    "--collector.filesystem.mount-points-exclude=^/(dev|proc|sys|run/containerd/.+|var/lib/docker/.+"
    "|var/lib/kubelet/.+)($|/)",
    "--collector.filesystem.fs-types-exclude=^(autofs|binfmt_misc|bpf|cgroup2?|configfs|debugfs|devpts|devtmpfs"
    "|fusectl|hugetlbfs|iso9660|mqueue|nsfs|overlay|proc|procfs|pstore|rpc_pipefs|securityfs|selinuxfs|squashfs"
    "|sysfs|tracefs|erofs)$",
)


def charts(plan: Plan) -> list[Chart]:
    """The releases of the site's platform, in install order (operators before what runs on them)."""
    addons = set(plan.kubernetes.addons)
    monitoring = "prometheus" in addons
    repos = UPSTREAM | plan.kubernetes.chart_repositories

    def chart(
        name: str, release: str, namespace: str, values: dict[str, Any], provides: tuple[str, ...], *, level: str
    ) -> Chart:
        return Chart(name, release, namespace, VERSIONS[name], repos[name], values, provides, level)

    out: list[Chart] = []
    if monitoring:
        # First: the other releases' ServiceMonitors need its CRDs.
        m = plan.kubernetes.monitoring
        values = {
            "prometheus": {
                "prometheusSpec": {
                    "serviceMonitorSelectorNilUsesHelmValues": False,
                    "ruleSelectorNilUsesHelmValues": False,
                    # The Ceph managers' ScrapeConfig (platform/ceph_monitoring.py): they run outside the cluster.
                    **({"scrapeConfigSelectorNilUsesHelmValues": False} if plan.ceph else {}),
                    "retention": m.retention,
                    # Prometheus's GB are GiB: it drops the oldest blocks before the volume fills.
                    "retentionSize": f"{max(1, m.prometheus_storage_gi * 85 // 100)}GB",
                    "storageSpec": _volume(m.prometheus_storage_gi, m.storage_class),
                }
            },
            "alertmanager": {
                "alertmanagerSpec": {"storage": _volume(m.alertmanager_storage_gi, m.storage_class)},
            },
            "grafana": {"sidecar": {"dashboards": {"enabled": True, "searchNamespace": "ALL"}}},
            # A list replaces the chart's whole list: its two defaults (a test holds them to the chart's), then
            # the textfile directory, read through the host root the chart mounts at /host/root (read-only).
            "prometheus-node-exporter": {
                "extraArgs": [
                    *NODE_EXPORTER_DEFAULT_ARGS,
                    f"--collector.textfile.directory=/host/root{m.node_textfile_dir}",
                ]
            },
        }
        out.append(
            # privileged: the node exporter reads the host's network, processes and file systems.
            chart(
                "kube-prometheus-stack",
                "monitoring",
                "monitoring",
                values,
                ("ServiceMonitor", "PrometheusRule"),
                level="privileged",
            )
        )
    if "gpu-operator" in addons:
        out.append(
            # privileged: NFD's worker mounts host paths; the device plugin, GFD, DCGM exporter, MIG manager and
            # validator the operator starts are privileged.
            chart(
                "gpu-operator",
                "gpu-operator",
                "gpu-operator",
                _gpu_operator(plan, monitoring),
                ("ClusterPolicy",),
                level="privileged",
            )
        )
    if uses_dra_driver(plan):
        # privileged: its kubelet plugin prepares devices on the host, and the ComputeDomains' IMEX daemons it starts.
        out.append(chart(DRA_DRIVER, DRA_DRIVER, DRA_DRIVER, _dra_driver(plan), ("ComputeDomain",), level="privileged"))
    if "network-operator" in addons:
        # One Node Feature Discovery per cluster: the GPU Operator's when both are installed.
        values = {"nfd": {"enabled": "gpu-operator" not in addons}, "sriovNetworkOperator": {"enabled": False}}
        provides: tuple[str, ...] = (
            "NicClusterPolicy",
            "IPPool",
            "MacvlanNetwork",
            "HostDeviceNetwork",
            "NetworkAttachmentDefinition",
        )
        # privileged: the RDMA device plugin, Multus and CNI plugins the NicClusterPolicy starts are.
        namespace = "nvidia-network-operator"
        out.append(chart("network-operator", "network-operator", namespace, values, provides, level="privileged"))
    if "kueue" in addons:
        provides = ("Topology", "ResourceFlavor", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass")
        out.append(chart("kueue", "kueue", "kueue-system", _kueue(plan, monitoring), provides, level="restricted"))
    if "kserve" in addons:
        out.append(chart("kserve-crd", "kserve-crd", "kserve", {}, KSERVE_KINDS, level="restricted"))
        out.append(chart("kserve-resources", "kserve", "kserve", KSERVE_VALUES, (), level="restricted"))
    if uses_notebooks(plan):
        out.append(chart("jupyterhub", HUB_RELEASE, HUB_NAMESPACE, jupyterhub_values(plan), (), level="restricted"))
    if "training-operator" in addons:
        trainer = ("TrainJob", "ClusterTrainingRuntime")
        out.append(chart("kubeflow-trainer", "kubeflow-trainer", "kubeflow-system", {}, trainer, level="restricted"))
    if plan.exports:
        # The site's StorageClasses are rendered from its exports, not by the chart.
        # kube-system: exempt from Pod Security (the API server's admission configuration), as its node plugin needs.
        values = {"storageClass": {"create": False}}
        out.append(chart("csi-driver-nfs", "csi-driver-nfs", EXEMPT_NAMESPACE, values, (), level="privileged"))
    if plan.ceph:
        # The site's Ceph cluster by its fsid and monitors; StorageClasses are rendered per pool (storage.py), the
        # Secrets are not (CEPH_CSI). privileged: their node plugins mount volumes on the host. Monitors on their v1
        # port, as ceph-csi's csiConfig examples list them ("<ip>:6789").
        c = plan.ceph
        cluster = [{"clusterID": c.fsid, "monitors": [f"{address}:{c.mon_v1_port}" for _, address in c.mon_addresses]}]
        values = {"csiConfig": cluster, "storageClass": {"create": False}, "secret": {"create": False}}
        wanted = {CEPH_RBD: any(p.application == "rbd" for p in c.pools), CEPH_CEPHFS: bool(c.filesystem)}
        out += [chart(n, n, n, values, (), level="privileged") for n in CEPH_CSI if wanted[n]]
    return out


def release_namespaces(plan: Plan) -> list[dict[str, Any]]:
    """The releases' namespaces, created by the project before them with their Pod Security labels (a release's
    own create_namespace would leave them unlabelled, at the site's default level, which refuses their pods)."""
    levels = {c.namespace: c.pod_security for c in charts(plan) if c.namespace != EXEMPT_NAMESPACE}
    return [obj("v1", "Namespace", ns, labels(plan) | pod_security_labels(level)) for ns, level in levels.items()]
