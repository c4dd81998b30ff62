"""The Pod Security Standards (https://kubernetes.io/docs/concepts/security/pod-security-standards/, version
"latest" as of Kubernetes 1.33), applied to a pod spec as the PodSecurity admission plugin does: `violations(spec,
level)` lists every control the spec breaks at that level, empty when it is admitted. Baseline's controls, then
restricted's on top. No library offers these checks outside the API server (k8s.io/pod-security-admission is Go).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

LEVELS = ("privileged", "baseline", "restricted")

BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def _containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _baseline(spec: dict[str, Any], annotations: dict[str, str]) -> Iterator[str]:
    pod_sc = spec.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            yield f"host namespaces: {key}"
    if (pod_sc.get("windowsOptions") or {}).get("hostProcess"):
        yield "HostProcess pod"
    for v in spec.get("volumes") or []:
        if "hostPath" in v:
            yield f"hostPath volume {v.get('name')}"
    for s in pod_sc.get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            yield f"sysctl {s.get('name')}"
    for sc, where in [(pod_sc, "pod")] + [(c.get("securityContext") or {}, c["name"]) for c in _containers(spec)]:
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            yield f"{where}: seccomp Unconfined"
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            yield f"{where}: AppArmor Unconfined"
        se = sc.get("seLinuxOptions") or {}
        if se.get("type", "") not in SELINUX_TYPES or se.get("user") or se.get("role"):
            yield f"{where}: SELinux options {se}"
    for k, v in annotations.items():
        if k.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            v == "runtime/default" or v.startswith("localhost/")
        ):
            yield f"AppArmor annotation {k}: {v}"
    for c in _containers(spec):
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            yield f"{c['name']}: privileged"
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            yield f"{c['name']}: HostProcess"
        extra = set((sc.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if extra:
            yield f"{c['name']}: capabilities {sorted(extra)}"
        if sc.get("procMount", "Default") != "Default":
            yield f"{c['name']}: procMount {sc['procMount']}"
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                yield f"{c['name']}: hostPort {p['hostPort']}"


def _restricted(spec: dict[str, Any]) -> Iterator[str]:
    pod_sc = spec.get("securityContext") or {}
    for v in spec.get("volumes") or []:
        kind = next((k for k in v if k != "name"), None)
        if kind not in RESTRICTED_VOLUMES:
            yield f"volume {v.get('name')} of type {kind}"
    if pod_sc.get("runAsUser") == 0:
        yield "pod: runAsUser 0"
    for c in _containers(spec):
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            yield f"{c['name']}: allowPrivilegeEscalation is not false"
        if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
            yield f"{c['name']}: runAsNonRoot is not true"
        if sc.get("runAsUser") == 0:
            yield f"{c['name']}: runAsUser 0"
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            yield f"{c['name']}: seccompProfile is not RuntimeDefault or Localhost"
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            yield f"{c['name']}: capabilities do not drop ALL"
        extra = set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
        if extra:
            yield f"{c['name']}: capabilities add {sorted(extra)}"


def violations(spec: dict[str, Any], level: str, annotations: dict[str, str] | None = None) -> list[str]:
    """The controls of `level` that a pod spec breaks (nothing for privileged)."""
    if level == "privileged":
        return []
    out = list(_baseline(spec, annotations or {}))
    if level == "restricted":
        out += _restricted(spec)
    return out


def lowest_level(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> str:
    return next(level for level in reversed(LEVELS) if not violations(spec, level, annotations))


def pod_templates(o: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, str]]]:
    """(where, pod spec, pod annotations) of every pod an object creates: workloads, Jobs, CronJobs, MPIJobs,
    JobSets, (Cluster)TrainingRuntimes and InferenceServices."""
    kind, name, spec = o.get("kind"), (o.get("metadata") or {}).get("name"), o.get("spec") or {}

    def template(t: dict[str, Any], where: str) -> Iterator[tuple[str, dict[str, Any], dict[str, str]]]:
        yield where, t.get("spec") or {}, (t.get("metadata") or {}).get("annotations") or {}

    if kind == "Pod":
        yield f"Pod {name}", spec, (o.get("metadata") or {}).get("annotations") or {}
    elif kind in ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"):
        yield from template(spec.get("template") or {}, f"{kind} {name}")
    elif kind == "CronJob":
        yield from template(spec["jobTemplate"]["spec"]["template"], f"CronJob {name}")
    elif kind == "MPIJob":
        for role, r in spec["mpiReplicaSpecs"].items():
            yield from template(r["template"], f"MPIJob {name} {role}")
    elif kind in ("ClusterTrainingRuntime", "TrainingRuntime"):
        for rj in spec["template"]["spec"]["replicatedJobs"]:
            yield from template(rj["template"]["spec"]["template"], f"{kind} {name} {rj['name']}")
    elif kind == "InferenceService":
        # Its predictor is a pod spec inline (KServe's Standard mode makes a Deployment of it).
        keep = {k: v for k, v in spec["predictor"].items() if k not in ("minReplicas", "maxReplicas", "labels")}
        yield f"InferenceService {name}", keep, {}
    elif kind == "JobSet":
        for rj in spec["replicatedJobs"]:
            yield from template(rj["template"]["spec"]["template"], f"JobSet {name} {rj['name']}")
