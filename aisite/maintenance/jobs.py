"""Cordon now, drain when the job ends: a rollout's drain step first waits for the Kueue workloads running on its
cordoned nodes to end, up to the site's `maintenance.drain_timeout_s`; those still running then are preempted
through Kueue (their Workload deactivated: Kueue evicts the whole job and keeps its place to requeue it), and
requeued (activated again) once their pods have left the nodes. Only then does the drain evict what is left
(kubernetes.core.k8s_drain, PodDisruptionBudgets honoured).

A workload aisite deactivates carries the label PREEMPTED_LABEL (the node it was preempted for) until it is
activated again, so one left inactive by a drain that died half-way is found and requeued by the next drain.

Kueue's names, from Kueue v0.19.2 (the chart the platform installs):
- a running pod of an admitted workload carries the annotation `kueue.x-k8s.io/workload` (the Workload's name, in
  the pod's namespace): apis/kueue/v1beta2/topology_types.go, WorkloadAnnotation, "set on the Job's PodTemplate
  ... when starting the Job";
- `spec.active` of a Workload (kueue.x-k8s.io/v1beta2): "Changing active from true to false will evict any running
  workloads" (the Workload CRD), and a deactivated workload is not requeued until it is active again
  (site/content/en/docs/concepts/workload.md, "Active")."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aisite.model import Maintenance
from aisite.paths import kubeconfig_path
from aisite.plan import Plan

WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
PREEMPTED_LABEL = "aisite.io/preempted-for"
# How long a preempted workload's pods get to leave (Kueue suspends the job; its pods' termination grace runs).
EVICT_WAIT_S = 600
POLL_S = 10.0

# What a cluster answers is checked before it is used: names as Kubernetes allows them (a namespace or a node label
# value is a DNS label here, a Workload's name a DNS subdomain).
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


class NoKueueError(Exception):
    """The cluster serves no Kueue Workload API: there is nothing to wait for through it."""


@dataclass(frozen=True, order=True)
class Workload:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def workload_of(namespace: object, name: object) -> Workload | None:
    """A Workload named by what the cluster sent, or None where a name is not one Kubernetes allows."""
    if not isinstance(namespace, str) or not isinstance(name, str):
        return None
    if not _DNS_LABEL.fullmatch(namespace) or not _DNS_SUBDOMAIN.fullmatch(name):
        return None
    return Workload(namespace, name)


class Cluster(Protocol):
    """What the drain needs of the cluster (KubeCluster on a real one; a scripted one in tests)."""

    def workloads_on(self, node: str) -> set[Workload]:
        """The workloads with a pod on the node that has not ended. Raises NoKueueError without Kueue's API."""
        ...

    def preempted(self) -> dict[Workload, str]:
        """The workloads a drain deactivated and has not activated again -> the node named in their label."""
        ...

    def is_active(self, workload: Workload) -> bool:
        """Whether the workload is active (`spec.active`, true unless set false)."""
        ...

    def set_active(self, workload: Workload, active: bool, node: str = "") -> None:
        """Deactivate (labelled for `node`) or activate (label removed) a workload."""
        ...


@dataclass
class Drained:
    """What the wait did, said: workloads that ended on their own, those preempted and requeued, errors per node."""

    ended: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    said: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


def drain_jobs(
    cluster: Cluster,
    nodes: list[str],
    wait_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    note: Callable[[str], None] = lambda _s: None,
    evict_wait_s: float = EVICT_WAIT_S,
) -> Drained:
    """Wait up to `wait_s` for the Kueue workloads on `nodes` to end, preempt and requeue what still runs then.
    A node whose workloads could not be read, preempted or seen leave has an error (and is not drained)."""
    out = Drained()
    try:
        _drain(cluster, nodes, wait_s, out, clock=clock, sleep=sleep, note=note, evict_wait_s=evict_wait_s)
        out.said += [s for s in getattr(cluster, "said", {}) if s not in out.said]
    except NoKueueError as exc:
        out.said.append(f"{', '.join(nodes)}: no Kueue workloads to wait for ({exc}); the drain evicts what runs")
    except Exception as exc:  # the API failed (refused, timed out, an odd answer): said, the nodes not drained
        for n in nodes:
            out.errors.setdefault(n, f"waiting for its Kueue workloads: {type(exc).__name__}: {exc}"[:500])
    return out


def _drain(
    cluster: Cluster,
    nodes: list[str],
    wait_s: float,
    out: Drained,
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    note: Callable[[str], None],
    evict_wait_s: float,
) -> None:
    def on_nodes() -> dict[str, set[Workload]]:
        return {n: cluster.workloads_on(n) for n in nodes}

    running = on_nodes()
    first: set[Workload] = set().union(*running.values())
    start, last_note = clock(), None
    while any(running.values()) and clock() - start < wait_s:
        if last_note is None or clock() - last_note >= 60:
            left = sorted(set().union(*running.values()))
            shown = ", ".join(map(str, left[:5])) + (" ..." if len(left) > 5 else "")
            note(
                f"{', '.join(nodes)}: waiting for {len(left)} Kueue workload(s) to end ({shown}): "
                f"{(clock() - start) / 60:.0f} of {wait_s / 60:.0f} min"
            )
            last_note = clock()
        sleep(min(POLL_S, max(0.0, wait_s - (clock() - start))))
        running = on_nodes()
    still: set[Workload] = set().union(*running.values())
    out.ended = [str(w) for w in sorted(first - still)]
    for w in sorted(still):
        holders = [n for n in nodes if w in running[n]]
        try:
            if not cluster.is_active(w):
                # Someone else deactivated it: its pods are leaving; it is theirs to activate again, not ours.
                out.said.append(f"{w}: already inactive (not by this drain); waiting for its pods to leave")
                continue
            cluster.set_active(w, False, holders[0])
        except Exception as exc:  # an API error: its nodes are not drained, said
            for n in holders:
                out.errors[n] = f"could not preempt {w} through Kueue: {exc}"[:500]
            continue
        out.preempted.append(f"{w} (still running after {wait_s:.0f} s)")
    # Their pods leave as Kueue stops the jobs; then they are requeued.
    deadline = clock() + evict_wait_s
    while any(running[n] & still for n in nodes if n not in out.errors) and clock() < deadline:
        sleep(min(POLL_S, max(0.0, deadline - clock())))
        running = on_nodes()
    for n in nodes:
        stuck = running[n] & still
        if stuck and n not in out.errors:
            out.errors[n] = (
                f"Kueue workload(s) {', '.join(map(str, sorted(stuck)))} stopped through Kueue, still on the node "
                f"after {evict_wait_s:.0f} s"
            )
    _requeue_left(cluster, set().union(*running.values()), out)


def _requeue_left(cluster: Cluster, running: set[Workload], out: Drained) -> None:
    """Activate again what a drain deactivated whose pods are gone from these nodes (this one's, or a dead
    drain's)."""
    for w, node in sorted(cluster.preempted().items()):
        if w in running:
            continue
        try:
            cluster.set_active(w, True)
        except Exception as exc:  # an API error, said; the next drain tries again
            out.said.append(f"{w}: could not be requeued ({exc}); the next drain tries again")
            continue
        out.requeued.append(f"{w} (preempted for {node})")


class KubeCluster:
    """The cluster through its API (the admin kubeconfig), with the Kubernetes Python client."""

    def __init__(self, kubeconfig: Path, timeout: float = 30) -> None:
        from kubernetes import client, config

        api = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), persist_config=False
        )
        self._core = client.CoreV1Api(api)
        self._custom = client.CustomObjectsApi(api)
        self._timeout = timeout
        self._api_exception = client.ApiException
        self._served = False
        # Pods whose word could not be taken (a workload name Kubernetes would not allow), said once each: each is
        # that pod's problem, not waited for through Kueue (the drain evicts it), never the wave's.
        self.said: dict[str, None] = {}

    def workloads_on(self, node: str) -> set[Workload]:
        if not self._served:
            self._kueue_served()
            self._served = True
        pods = self._core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed",
            _request_timeout=self._timeout,
        )
        found = set()
        for pod in pods.items or []:
            meta = pod.metadata
            name = (meta.annotations or {}).get(WORKLOAD_ANNOTATION) if meta is not None else None
            if name is None or meta is None:
                continue
            w = workload_of(meta.namespace, name)
            if w is None:
                who = f"{str(meta.namespace)[:63]}/{str(meta.name)[:253]}"
                self.said[
                    f"pod {who} on {node} names a workload Kubernetes would not allow ({name!r:.80}): not waited "
                    "for through Kueue; the drain evicts it"
                ] = None
                continue
            found.add(w)
        return found

    def _kueue_served(self) -> None:
        try:
            self._custom.list_cluster_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, "workloads", limit=1, _request_timeout=self._timeout
            )
        except self._api_exception as exc:
            if exc.status == 404:
                raise NoKueueError(f"the cluster serves no {KUEUE_GROUP}/{KUEUE_VERSION} Workload API") from None
            raise

    def preempted(self) -> dict[Workload, str]:
        doc: Any = self._custom.list_cluster_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, "workloads", label_selector=PREEMPTED_LABEL, _request_timeout=self._timeout
        )
        items = doc.get("items") if isinstance(doc, dict) else None
        found = {}
        for item in items if isinstance(items, list) else []:
            meta = item.get("metadata") if isinstance(item, dict) else None
            if not isinstance(meta, dict):
                continue
            labels = meta.get("labels")
            node = labels.get(PREEMPTED_LABEL) if isinstance(labels, dict) else None
            w = workload_of(meta.get("namespace"), meta.get("name"))
            if w is not None:
                found[w] = node if isinstance(node, str) and _DNS_LABEL.fullmatch(node) else "?"
        return found

    def is_active(self, workload: Workload) -> bool:
        doc: Any = self._custom.get_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, workload.namespace, "workloads", workload.name, _request_timeout=self._timeout
        )
        spec = doc.get("spec") if isinstance(doc, dict) else None
        return not (isinstance(spec, dict) and spec.get("active") is False)

    def set_active(self, workload: Workload, active: bool, node: str = "") -> None:
        # A JSON merge patch: null removes the label.
        body = {"spec": {"active": active}, "metadata": {"labels": {PREEMPTED_LABEL: None if active else node}}}
        self._custom.patch_namespaced_custom_object(
            KUEUE_GROUP,
            KUEUE_VERSION,
            workload.namespace,
            "workloads",
            workload.name,
            body,
            _content_type="application/merge-patch+json",
            _request_timeout=self._timeout,
        )


def drain_timeout_s(plan: Plan) -> int:
    """How long a cordoned node waits for its running jobs (the site's, or Maintenance's default)."""
    return plan.maintenance.drain_timeout_s if plan.maintenance else Maintenance().drain_timeout_s


def for_rollout(plan: Plan, note: Callable[[str], None]) -> Callable[[list[str]], Drained] | None:
    """The wait for a rollout's drain step, on the site's cluster; None without its admin kubeconfig (the lab
    runs no API server: the drain playbook says so)."""
    kubeconfig = kubeconfig_path(plan.site)
    if not kubeconfig.is_file():
        return None
    wait = drain_timeout_s(plan)

    def waits(nodes: list[str]) -> Drained:
        try:
            cluster = KubeCluster(kubeconfig)
        except Exception as exc:  # a kubeconfig the client cannot read: the nodes are not drained, said
            return Drained(errors=dict.fromkeys(nodes, f"the cluster's kubeconfig {kubeconfig}: {exc}"[:500]))
        return drain_jobs(cluster, nodes, wait, note=note)

    return waits
