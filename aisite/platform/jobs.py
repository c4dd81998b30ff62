"""The Workloads layer's objects: each site workload as its job, sized from the plan.

- nccl-allreduce, tf-cnn-benchmarks (and the ResNet payload where only the MPI Operator is installed): MPIJob
  v2beta1, a launcher plus one worker per node with `slotsPerWorker` GPUs.
- ResNet payload with the Kubeflow trainer (addon training-operator): TrainJob on the `torch-distributed` runtime.
- ib-write-bw, iperf3: an Indexed Job of two pods (index 0 serves, index 1 measures) behind a headless Service.
- fio: a Job with one pod per node against the datasets claim.

Every pod asks for its GPUs (the device plugin's nvidia.com/gpu, or under `gpu_allocation: dra` a ResourceClaim from
the workload's ResourceClaimTemplate of the DRA driver's gpu.nvidia.com class) and one RDMA device per rail; a
multi-node job on rack-scale trays (NVL72) gets a ComputeDomain of its own and each pod a claim on its IMEX channel,
and Kueue keeps it in one NVLink clique of a rack when it fits; joins the tenant's rail networks of its scalable unit,
carries the NCCL settings the fabric needs (the plan's traffic class and GID index: 106 and 3 by default), a sized
/dev/shm, the datasets claim and the payloads (a ConfigMap of aisite/payloads), and is queued in the tenant's
Kueue LocalQueue. Every payload prints one result line (aisite/payloads/result.py), which `aisite bench report`
reads.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from aisite.payloads import command_args
from aisite.plan import LABEL_PREFIX, Plan, TenantPlan, WorkloadPlan
from aisite.platform.common import GPU_RESOURCE, labels, obj
from aisite.platform.dra import compute_domains
from aisite.platform.gpus import GpuRequest, gpu_request
from aisite.platform.kueue import (
    CLIQUE_LEVEL,
    LOCAL_QUEUE,
    PREFERRED_TOPOLOGY,
    REQUIRED_TOPOLOGY,
    UNIT_LEVEL,
    rack_scale,
    topology_aware,
    topology_levels,
)
from aisite.platform.rails import pod_networks, rail_devices, rail_interfaces, rail_resource
from aisite.platform.trainer import TRAINER_RUNTIME

PAYLOADS = Path(__file__).resolve().parent.parent / "payloads"
# evaluate.py and checkpoints.py: a served model's promotion runs them as Jobs (aisite.serving.cluster).
PAYLOAD_FILES = ("result.py", "resnet.py", "tools.py", "serve.py", "evaluate.py", "checkpoints.py", "foreign_json.py")
PAYLOAD_DIR = "/opt/aisite/payloads"
DATASETS_MOUNT = "/datasets"
# Pinned images per kind, as <repository path>:<tag> under their upstream registry (kubernetes.job_registry
# replaces the registry). Seen published by their projects; not pulled here (no registry is reachable).
IMAGES: dict[str, tuple[str, str]] = {
    "pytorch": ("nvcr.io", "nvidia/pytorch:25.12-py3"),
    "tensorflow": ("nvcr.io", "nvidia/tensorflow:25.02-tf2-py3"),  # NGC's last TensorFlow release
    "nccl-tests": ("ghcr.io", "coreweave/nccl-tests:12.9.1-devel-ubuntu24.04-nccl2.29.2-1-d73ec07"),
    # The GPU Operator v26.3.3 chart's DCGM: acceptance's diagnostics, and the health DaemonSet's shell and nsenter.
    "dcgm": ("nvcr.io", "nvidia/cloud-native/dcgm:4.5.2-1-ubuntu22.04"),
    # The serving proxy: Docker's official image (docker-library/official-images library/haproxy: 3.0.5, the LTS
    # branch's tag there), built with HAProxy's Prometheus exporter; the lab runs Debian's package of HAProxy.
    "haproxy": ("docker.io", "library/haproxy:3.0.5"),
}
IMAGE_OF_KIND = {
    "nccl-allreduce": "nccl-tests",
    "ib-write-bw": "nccl-tests",
    "tf-cnn-benchmarks": "tensorflow",
    "resnet50-train": "pytorch",
    "resnet50-infer": "pytorch",
    "resnet152-train": "pytorch",
    "resnet152-infer": "pytorch",
}
# tf_cnn_benchmarks, at the branch that runs on TensorFlow 2, fetched by the workers' init container.
TF_BENCHMARKS = ("https://github.com/tensorflow/benchmarks.git", "cnn_tf_v2.1_compatible")
SHM_PER_GPU_GI = 8  # NCCL and data loaders share memory through /dev/shm; the 64 MiB default stalls them
# Restricted tenants' pods run as this user: the pinned images are Ubuntu 24.04 based, whose `ubuntu` user it is.
NON_ROOT_UID = 1000
NON_ROOT_HOME = "/home/ubuntu"
# An MPIJob's workers in a restricted tenant (non-root): the MPI Operator's own way (its v2beta1 `pi` example and
# build/base image): the operator mounts the job's SSH key at `sshAuthMountPath` (the user's ~/.ssh), and each
# worker runs sshd as that user with a config of its own (PidFile and HostKey in the user's reach, StrictModes no,
# a port above 1024); the launcher's mpirun reaches the workers on that port.
MPI_SSH_PORT = 2222
_NON_ROOT_SSHD = (
    f"printf 'Port {MPI_SSH_PORT}\\nPidFile /tmp/sshd.pid\\nHostKey {NON_ROOT_HOME}/.ssh/id_rsa\\n"
    "StrictModes no\\n' > /tmp/sshd_config && exec /usr/sbin/sshd -De -f /tmp/sshd_config"
)
BATCH = {"resnet50": 256, "resnet152": 128, "tf-cnn-benchmarks": 256, "fio": 1024}


def image(plan: Plan, w: WorkloadPlan) -> str:
    return w.image or pinned_image(plan, IMAGE_OF_KIND[w.kind])


def pinned_image(plan: Plan, name: str) -> str:
    registry, path = IMAGES[name]
    return f"{plan.kubernetes.job_registry or registry}/{path}"


def tenant_plan(plan: Plan, name: str) -> TenantPlan:
    return next(t for t in plan.tenants if t.name == name)


def _tenant(plan: Plan, w: WorkloadPlan) -> TenantPlan:
    return tenant_plan(plan, w.tenant)


def _scalable_unit(plan: Plan, w: WorkloadPlan) -> int | None:
    """The first unit with enough nodes of the job's GPU type, where Kueue keeps it (NCCL's rings under one
    block of leaves); None: the job spans units."""
    counts: dict[int, int] = {}
    for n in plan.by_role("gpu"):
        if n.gpu and n.gpu.type == w.gpu_type and n.scalable_unit is not None and n.gpu.count >= w.gpus_per_node:
            counts[n.scalable_unit] = counts.get(n.scalable_unit, 0) + 1
    return next((su for su, c in sorted(counts.items()) if c >= w.nodes), None)


def _rails(plan: Plan, w: WorkloadPlan) -> list[int]:
    """The rails a job's pods get: those of its GPU type's nodes (where it runs), through the Network Operator."""
    if "network-operator" not in plan.kubernetes.addons or plan.kubernetes.rail_pod_addresses <= 0:
        return []
    return list(rail_interfaces(plan, w.gpu_type))


def nccl_env(plan: Plan, w: WorkloadPlan) -> list[dict[str, str]]:
    """NCCL over the rails: the RoCE traffic class and GID of DESIGN.md; bootstrap over the pod's own network.
    Only the rails' HCAs are visible in the pod (the RDMA shared device plugin exposes the requested ones)."""
    env = {
        "NCCL_IB_TC": str(plan.roce.traffic_class),
        "NCCL_IB_GID_INDEX": str(plan.roce.nccl_ib_gid_index),
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_DEBUG": "WARN",
    }
    rails, devices = _rails(plan, w), rail_devices(plan, w.gpu_type)
    if rails and all(r in devices for r in rails):
        # Exactly the rails' RDMA devices as the model's documents name them (a DGX H100's are mlx5_0,3,4,5,6,9,
        # 10,11; its others are storage and in-band ports). Where one is unknown the variable is left out and
        # NCCL takes the devices the pod was given (`aisite validate` warns).
        env["NCCL_IB_HCA"] = "=" + ",".join(devices[r] for r in rails)
    return [{"name": k, "value": v} for k, v in env.items()]


def compute_domain(plan: Plan, w: WorkloadPlan) -> str | None:
    """The job's ComputeDomain: a job of several trays of a rack-scale type shares NVLink memory across its pods
    through IMEX channels, which the DRA driver's ComputeDomain gives them (and runs the IMEX daemons for); None."""
    if not (w.gpus_per_node and w.nodes > 1 and compute_domains(plan) and rack_scale(plan, w.gpu_type)):
        return None
    return f"{w.name}-domain"


def gpus(plan: Plan, w: WorkloadPlan) -> GpuRequest:
    """The job's GPUs a pod (and its ComputeDomain's channel), as platform/gpus.py asks for them."""
    lbls = labels(plan, tenant=w.tenant, workload=w.name)
    return gpu_request(plan, w.gpus_per_node, w.name, w.namespace, lbls, domain=compute_domain(plan, w))


def _resources(plan: Plan, w: WorkloadPlan) -> dict[str, Any]:
    request = gpus(plan, w)
    limits = {rail_resource(r): "1" for r in _rails(plan, w)} | request.limits
    out: dict[str, Any] = {"limits": limits, "requests": dict(limits)} if limits else {}
    if request.claims:
        out["claims"] = request.container_claims
    return out


def _rack(plan: Plan, w: WorkloadPlan) -> bool:
    """Whether a rack of the job's GPU type holds it: enough trays with enough GPUs each."""
    sizes: dict[str, int] = {}
    for n in plan.by_role("gpu"):
        if n.rack and n.gpu and n.gpu.type == w.gpu_type and n.gpu.count >= w.gpus_per_node:
            sizes[n.rack] = sizes.get(n.rack, 0) + 1
    return any(size >= w.nodes for size in sizes.values())


def topology_request(plan: Plan, w: WorkloadPlan) -> dict[str, str]:
    """Kueue's placement of the job's pods where its flavor is topology-aware: on rack-scale trays, within one NVLink
    clique (inside one rack) when a rack holds the job; else all within one scalable unit when the site has a unit
    that fits the job (NCCL's rings then stay under one block of leaves), else as few units (pods, in three tiers)
    as Kueue can find."""
    if not w.gpus_per_node or "kueue" not in plan.kubernetes.addons or not topology_aware(plan, w.gpu_type):
        return {}
    racks = rack_scale(plan, w.gpu_type)
    if racks and _rack(plan, w):
        return {REQUIRED_TOPOLOGY: CLIQUE_LEVEL}
    if _scalable_unit(plan, w) is not None:
        return {REQUIRED_TOPOLOGY: UNIT_LEVEL}
    return {PREFERRED_TOPOLOGY: topology_levels(plan, racks)[0]}


def _pod_meta(plan: Plan, w: WorkloadPlan) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": labels(plan, tenant=w.tenant, workload=w.name)}
    annotations = topology_request(plan, w)
    rails, networks = _rails(plan, w), pod_networks(plan)
    if rails and networks:
        # The same names on every node: each node's file gives its unit's pool (platform/rails.py), so a job
        # that spans units gets every rail too.
        annotations["k8s.v1.cni.cncf.io/networks"] = ",".join(networks[r] for r in rails if r in networks)
    if annotations:
        meta["annotations"] = annotations
    return meta


def _volumes(plan: Plan, w: WorkloadPlan) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    shm = f"{max(1, w.gpus_per_node) * SHM_PER_GPU_GI}Gi"
    vols: list[dict[str, Any]] = [
        {"name": "payloads", "configMap": {"name": "aisite-payloads"}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "payloads", "mountPath": PAYLOAD_DIR, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    if plan.exports:
        vols.append({"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets"}})
        mounts.append({"name": "datasets", "mountPath": DATASETS_MOUNT})
    return vols, mounts


def gpu_placement(gpu_type: str, gpus: int) -> dict[str, Any]:
    """A pod with GPUs on nodes of its GPU type, past their GPU taint; nothing for a pod without GPUs."""
    if not gpus:
        return {}
    return {
        "nodeSelector": {f"{LABEL_PREFIX}/gpu-type": gpu_type},
        "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
    }


def _placement(plan: Plan, w: WorkloadPlan) -> dict[str, Any]:
    return gpu_placement(w.gpu_type, w.gpus_per_node)


def queue_labels(plan: Plan) -> dict[str, str]:
    """The tenant's Kueue queue, where the site installs Kueue."""
    return {"kueue.x-k8s.io/queue-name": LOCAL_QUEUE} if "kueue" in plan.kubernetes.addons else {}


# What `restricted` Pod Security asks of every container, and of every pod whatever its level (the runtime's seccomp).
RESTRICTED_CONTAINER: dict[str, Any] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
RUNTIME_SECCOMP: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}


def container_security(t: TenantPlan) -> dict[str, Any]:
    """What the tenant's Pod Security level asks of each container (restricted: no escalation, no capability)."""
    if t.pod_security != "restricted":
        return {}
    return {"securityContext": copy.deepcopy(RESTRICTED_CONTAINER)}


def _container(plan: Plan, w: WorkloadPlan, name: str, command: list[str], gpus: bool = True) -> dict[str, Any]:
    _, mounts = _volumes(plan, w)
    c: dict[str, Any] = {
        "name": name,
        "image": image(plan, w),
        "command": command,
        "env": [*nccl_env(plan, w), {"name": "AISITE_WORKLOAD", "value": w.name}],
        "volumeMounts": mounts,
    }
    if gpus and (res := _resources(plan, w)):
        c["resources"] = res
    return c | container_security(_tenant(plan, w))


def pod_security_context(t: TenantPlan) -> dict[str, Any]:
    """What the tenant namespace's Pod Security level asks of its pods. RDMA needs no capability: every container
    inherits containerd's unlimited locked memory (the common role's DefaultLimitMEMLOCK), so no pod adds IPC_LOCK,
    which neither baseline nor restricted admits."""
    sc: dict[str, Any] = copy.deepcopy(RUNTIME_SECCOMP)
    if t.pod_security == "restricted":
        sc |= {"runAsNonRoot": True, "runAsUser": NON_ROOT_UID, "runAsGroup": NON_ROOT_UID, "fsGroup": NON_ROOT_UID}
    return sc


def _pod(plan: Plan, w: WorkloadPlan, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    vols, _ = _volumes(plan, w)
    # The claims its containers name (a launcher, which names none, claims nothing).
    claims = gpus(plan, w).claims if any("claims" in c.get("resources", {}) for c in containers) else []
    return {
        "metadata": _pod_meta(plan, w),
        "spec": {"containers": containers, "volumes": vols, "securityContext": pod_security_context(_tenant(plan, w))}
        | ({"resourceClaims": claims} if claims else {})
        | _placement(plan, w)
        | spec,
    }


def _payload(*args: str) -> list[str]:
    return ["python3", f"{PAYLOAD_DIR}/{args[0]}", *args[1:]]


def _resnet_args(w: WorkloadPlan) -> list[str]:
    return command_args(w.name, w.kind, w.batch_size or BATCH[w.kind.split("-")[0]], w.nodes)


def _job(plan: Plan, w: WorkloadPlan, api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A workload's job object: in its tenant's namespace, labelled with the tenant, workload and queue."""
    return obj(
        api_version,
        kind,
        w.name,
        labels(plan, tenant=w.tenant, workload=w.name) | queue_labels(plan),
        w.namespace,
        spec=spec,
    )


def mpi_job(plan: Plan, w: WorkloadPlan) -> dict[str, Any]:
    ranks = w.nodes * max(1, w.gpus_per_node)
    non_root = _tenant(plan, w).pod_security == "restricted"
    if non_root:
        # Its workers' sshd on MPI_SSH_PORT; the pods' keys are the job's own (no known_hosts to write to).
        ssh = f"-p {MPI_SSH_PORT} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
        mpirun = ["mpirun", "-np", str(ranks), "--bind-to", "none", "--mca", "plm_rsh_args", ssh]
    else:
        mpirun = ["mpirun", "--allow-run-as-root", "-np", str(ranks), "--bind-to", "none"]
    mpirun += [a for e in nccl_env(plan, w) for a in ("-x", e["name"])]
    wrap = ["--workload", w.name, "--nodes", str(w.nodes), "--world-size", str(ranks), "--"]
    init: list[dict[str, Any]] = []
    if w.kind == "nccl-allreduce":
        command = _payload(
            "tools.py", "nccl-allreduce", *wrap, *mpirun, "all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "1"
        )
    elif w.kind == "tf-cnn-benchmarks":
        # The vScaler reference architecture's run: ResNet-50, fp16, batch 256 per GPU, Horovod across GPUs.
        repo, branch = TF_BENCHMARKS
        init = [
            {
                "name": "tf-benchmarks",
                "image": image(plan, w),
                "command": ["git", "clone", "--depth", "1", "--branch", branch, repo, "/bench/benchmarks"],
                "volumeMounts": [{"name": "bench", "mountPath": "/bench"}],
            }
        ]
        script = "/bench/benchmarks/scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py"
        flags = ["--model=resnet50", f"--batch_size={w.batch_size or BATCH['tf-cnn-benchmarks']}", "--use_fp16=True"]
        flags += ["--variable_update=horovod", "--horovod_device=gpu", "--num_batches=100", "--display_every=10"]
        command = _payload("tools.py", "tf-cnn-benchmarks", *wrap, *mpirun, "python3", script, *flags)
    else:  # the ResNet payload under mpirun: rank 0 (worker 0) is the rendezvous
        master = f"{w.name}-worker-0.{w.name}.{w.namespace}.svc"
        command = [
            *mpirun,
            "-x",
            f"MASTER_ADDR={master}",
            "-x",
            "MASTER_PORT=29500",
            *_payload("resnet.py", *_resnet_args(w)),
        ]
    sshd = ["sh", "-c", _NON_ROOT_SSHD] if non_root else ["/usr/sbin/sshd", "-De"]
    worker = _pod(plan, w, [_container(plan, w, "worker", sshd)])
    if init:
        worker["spec"]["initContainers"] = init
        worker["spec"]["volumes"].append({"name": "bench", "emptyDir": {}})
        worker["spec"]["containers"][0]["volumeMounts"].append({"name": "bench", "mountPath": "/bench"})
    launcher = _pod(plan, w, [_container(plan, w, "launcher", command, gpus=False)])
    launcher["spec"].pop("tolerations", None)
    launcher["spec"].pop("nodeSelector", None)
    launcher["metadata"].pop("annotations", None)
    return _job(
        plan,
        w,
        "kubeflow.org/v2beta1",
        "MPIJob",
        {
            "slotsPerWorker": max(1, w.gpus_per_node),
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 0, "suspend": bool(queue_labels(plan))},
            "mpiImplementation": "OpenMPI",
            # Where the operator mounts the job's SSH key: the user's ~/.ssh (root's by default).
            **({"sshAuthMountPath": f"{NON_ROOT_HOME}/.ssh"} if non_root else {}),
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "Never", "template": launcher},
                "Worker": {"replicas": w.nodes, "restartPolicy": "Never", "template": worker},
            },
        },
    )


# What a TrainJob patches into the runtime's pods: the tenant's mounts, placement and Pod Security context.
_PATCHED_POD_KEYS = ("volumes", "nodeSelector", "tolerations", "securityContext")


def train_job(plan: Plan, w: WorkloadPlan) -> dict[str, Any]:
    pod = _pod(plan, w, [])
    node = _container(plan, w, "node", [])
    patch_pod: dict[str, Any] = {
        "metadata": {k: v for k, v in pod["metadata"].items() if k == "annotations"},
        "spec": {k: v for k, v in pod["spec"].items() if k in _PATCHED_POD_KEYS}
        | {"containers": [{k: v for k, v in node.items() if k in ("name", "volumeMounts", "securityContext")}]},
    }
    return _job(
        plan,
        w,
        "trainer.kubeflow.org/v1alpha1",
        "TrainJob",
        {
            "runtimeRef": {
                "name": TRAINER_RUNTIME,
                "kind": "ClusterTrainingRuntime",
                "apiGroup": "trainer.kubeflow.org",
            },
            "suspend": bool(queue_labels(plan)),
            "trainer": {
                "image": image(plan, w),
                "command": ["torchrun", f"{PAYLOAD_DIR}/resnet.py"],
                "args": _resnet_args(w),
                "env": nccl_env(plan, w),
                "numNodes": w.nodes,
                "numProcPerNode": max(1, w.gpus_per_node),
                "resourcesPerNode": _resources(plan, w) or {},
            },
            "runtimePatches": [
                {
                    "manager": "aisite.io/workloads",
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [{"name": "node", "template": {"spec": {"template": patch_pod}}}]
                            }
                        }
                    },
                }
            ],
        },
    )


def pair_job(plan: Plan, w: WorkloadPlan) -> list[dict[str, Any]]:
    """Two pods on two nodes: index 0 serves, index 1 measures against it by its stable DNS name."""
    peer = f"{w.name}-0.{w.name}"
    wrap = ["--workload", w.name, "--nodes", "2", "--world-size", "1", "--"]
    if w.kind == "ib-write-bw":
        # One run per rail, each on that rail's device, the RoCE GID and traffic class of the fabric.
        # checks refuse the workload where a rail's device is unknown.
        rails, tc, gid = _rails(plan, w) or [0], plan.roce.traffic_class, plan.roce.nccl_ib_gid_index
        dev = rail_devices(plan, w.gpu_type)
        serve = " & ".join(
            f"ib_write_bw -d {dev.get(r, '')} -x {gid} --tclass={tc} --report_gbits -F -p {18515 + r}" for r in rails
        )
        measure = " && ".join(
            f"until {' '.join(_payload('tools.py', 'ib-write-bw', *wrap))} "
            f"ib_write_bw -d {dev.get(r, '')} -x {gid} --tclass={tc} "
            f"--report_gbits -F -p {18515 + r} {peer}; do sleep 2; done"
            for r in rails
        )
        serve += " & wait"
    else:
        serve = "iperf3 -s -1"
        measure = (
            f"until {' '.join(_payload('tools.py', 'iperf3', *wrap))} iperf3 -J -c {peer} -P 4 -t 10; do sleep 2; done"
        )
    script = f'if [ "$JOB_COMPLETION_INDEX" = 0 ]; then {serve}; else {measure}; fi'
    pod = _pod(plan, w, [_container(plan, w, "bench", ["sh", "-c", script])], subdomain=w.name, restartPolicy="Never")
    # Two different nodes: the measurement is between them, never inside one.
    pod["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {f"{LABEL_PREFIX}/workload": w.name}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    lbls = labels(plan, tenant=w.tenant, workload=w.name)
    return [
        obj(
            "v1",
            "Service",
            w.name,
            lbls,
            w.namespace,
            spec={"clusterIP": "None", "selector": {f"{LABEL_PREFIX}/workload": w.name}},
        ),
        obj(
            "batch/v1",
            "Job",
            w.name,
            lbls | queue_labels(plan),
            w.namespace,
            spec={
                "completionMode": "Indexed",
                "completions": 2,
                "parallelism": 2,
                "backoffLimit": 0,
                "suspend": bool(queue_labels(plan)),
                "template": pod,
            },
        ),
    ]


def fio_job(plan: Plan, w: WorkloadPlan) -> dict[str, Any]:
    bs = w.batch_size or BATCH["fio"]
    fio = [
        "fio",
        "--output-format=json",
        "--name=seq",
        "--directory=/datasets/aisite-fio",
        "--rw=readwrite",
        f"--bs={bs}k",
        "--size=4g",
        "--numjobs=4",
        "--direct=1",
        "--unlink=1",
    ]
    cmd = [
        "sh",
        "-c",
        "mkdir -p /datasets/aisite-fio && exec "
        + " ".join(_payload("tools.py", "fio", "--workload", w.name, "--") + fio),
    ]
    pod = _pod(plan, w, [_container(plan, w, "fio", cmd)], restartPolicy="Never")
    return _job(
        plan,
        w,
        "batch/v1",
        "Job",
        {
            "completions": w.nodes,
            "parallelism": w.nodes,
            "backoffLimit": 0,
            "suspend": bool(queue_labels(plan)),
            "template": pod,
        },
    )


def tenant_support(plan: Plan, t: TenantPlan) -> list[dict[str, Any]]:
    """What a tenant's jobs mount: the payloads and, where the site exports storage, the datasets claim."""
    out = [
        obj(
            "v1",
            "ConfigMap",
            "aisite-payloads",
            labels(plan, tenant=t.name),
            t.namespace,
            data={f: (PAYLOADS / f).read_text() for f in PAYLOAD_FILES},
        )
    ]
    if plan.exports:
        export = next((e for e in plan.exports if e.name == "datasets"), plan.exports[0])
        out.append(
            obj(
                "v1",
                "PersistentVolumeClaim",
                "datasets",
                labels(plan, tenant=t.name),
                t.namespace,
                spec={
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": f"nfs-{export.name}",
                    "resources": {"requests": {"storage": "1Ti"}},
                },
            )
        )
    return out


def workload_objects(plan: Plan, w: WorkloadPlan) -> list[dict[str, Any]]:
    claims = gpus(plan, w).objects
    if w.operator == "mpi-operator":
        return [*claims, mpi_job(plan, w)]
    if w.operator == "training-operator":
        return [*claims, train_job(plan, w)]
    if w.kind in ("ib-write-bw", "iperf3"):
        return [*claims, *pair_job(plan, w)]
    return [*claims, fio_job(plan, w)]
