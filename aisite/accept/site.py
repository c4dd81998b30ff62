"""`aisite accept` on a site: each measurement is a Job in the acceptance namespace (site.acceptance.namespace,
privileged: the checks read the host and its devices), pinned to its nodes, on pinned images; a Cluster runs it
and returns the log that carries the figure.

- node: the node's own health check (roles/node_health, entered through nsenter from a privileged pod) with the
  DCGM diagnostics of the level (`dcgmi diag -r 1|3 -j`, DCGM image the GPU Operator pins);
- pair: perftest's ib_write_bw on the rail's RDMA device (the catalog's, else the one behind the rail's interface)
  with the RoCE GID and traffic class of the plan, server on one node, client on the other (the nccl-tests
  image, as the site's ib-write-bw workload);
- all_reduce: nccl-tests' all_reduce_perf under mpirun in an MPIJob (MPI Operator), its NCCL_IB_HCA narrowed to
  the group's rail (a node alone: its NVLinks; a rack of NVL72 trays: its NVLink domain, through a ComputeDomain).

GPUs are asked for as the site's jobs ask (platform/gpus.py): the device plugin's limit, or under DRA a claim.

No Kubernetes API server runs here: the jobs are validated offline (kubernetes-validate, the MPIJob CRD) and the
stages exercised with a Cluster that answers with recorded tool output (tests/test_accept.py)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

from aisite import foreign
from aisite.accept.report import Check
from aisite.accept.stages import NVLINK_SCOPES, MeasureError, Options
from aisite.health import parse
from aisite.health.judge import Expected, Facts, judge
from aisite.health.site import from_status
from aisite.payloads import tools
from aisite.plan import GPU_TAINT, UNHEALTHY_TAINT, Node, Plan, Rail
from aisite.platform.common import labels, obj
from aisite.platform.gpus import GpuRequest, gpu_request
from aisite.platform.jobs import pinned_image

MARK = "=====aisite-accept====="
STATUS_DIR = "/var/lib/aisite/health/accept"


def rdma_device(r: Rail) -> str:
    """The rail's RDMA device for a command on the host's network: the plan's, else the one behind the rail's
    interface (a model whose documents do not name its devices)."""
    return r.rdma or f"$(ls /sys/class/net/{r.interface}/device/infiniband | head -n 1)"


class Cluster(Protocol):
    """Runs one measurement's objects to completion and returns the log of the pod named `result_pod` (a prefix
    of its name); raises MeasureError when it cannot."""

    def run(self, objects: list[dict[str, Any]], result_pod: str, timeout: float) -> str: ...


def _name(*parts: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", "-".join(parts).lower())[:63].strip("-")


class SiteRunner:
    lab = False
    links = False
    unit = "Gb/s"

    def __init__(self, plan: Plan, opts: Options, cluster: Cluster) -> None:
        assert plan.acceptance is not None
        self.plan, self.opts, self.cluster, self.a = plan, opts, cluster, plan.acceptance
        self.namespace = self.a.namespace
        self.written: list[dict[str, Any]] = []  # every object submitted, in order (the report keeps their names)

    # ---------------------------------------------------------------------------------------------- floors
    def bandwidth_floor(self, stage: str, n: Node) -> float | None:
        speed = n.rails[0].speed_gbps if n.rails else None
        return next((t.value for t in self.a.ib_write_bw if t.key == str(speed)), None)

    def busbw_floor(self, scope: str, ranks: Sequence[tuple[Node, Rail]]) -> float | None:
        node = ranks[0][0]
        if scope != "node" or not node.gpu or node.gpu.count != 8:  # the table's figures are for 8-GPU nodes
            return None
        return next((t.value for t in self.a.nccl_busbw if t.key == node.gpu.type), None)

    # -------------------------------------------------------------------------------------------- the jobs
    def _pod(self, node: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
        toleration = {"key": GPU_TAINT.key, "operator": "Exists", "effect": GPU_TAINT.effect}
        return {
            "metadata": {"labels": labels(self.plan, role="acceptance")},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "tolerations": [toleration, {"key": UNHEALTHY_TAINT, "operator": "Exists"}],
                "restartPolicy": "Never",
                # The measurements read the host and the fabric, never the API: no token to steal from them.
                "automountServiceAccountToken": False,
                "containers": containers,
            }
            | spec,
        }

    def _job(self, name: str, pod: dict[str, Any]) -> dict[str, Any]:
        return obj(
            "batch/v1",
            "Job",
            name,
            labels(self.plan, role="acceptance"),
            self.namespace,
            spec={"backoffLimit": 0, "ttlSecondsAfterFinished": 3600, "template": pod},
        )

    def _gpus(self, count: int, name: str, domain: str | None = None) -> GpuRequest:
        """A measurement's GPUs (a limit, or under DRA a claim whose template comes first) and its ComputeDomain."""
        lbls = labels(self.plan, role="acceptance")
        return gpu_request(self.plan, count, name[:58], self.namespace, lbls, domain=domain)

    def node_objects(self, n: Node) -> list[dict[str, Any]]:
        """The node's check: [its GPUs' claim template (DRA)..., the Job]."""
        level = self.a.dcgm_levels[self.opts.level]
        check = (
            f"nsenter -t 1 -m -u -n -i -- python3 /opt/aisite/health/node.py --expected "
            f"/etc/aisite/health/expected.json --out {STATUS_DIR} >/dev/null && cat /host{STATUS_DIR}/status.json"
        )
        script = f"{check}; echo {MARK}; nv-hostengine -n -b 127.0.0.1 && sleep 2; dcgmi diag -r {level} -j || true"
        container = {
            "name": "check",
            "image": pinned_image(self.plan, "dcgm"),
            "command": ["sh", "-c", script],
            "securityContext": {"privileged": True},
            "volumeMounts": [{"name": "host", "mountPath": "/host", "readOnly": True}],
        }
        name = _name("accept-node", n.name)
        gpus = self._gpus(n.gpu.count if n.gpu else 0, name)
        if gpus.limits:
            container["resources"] = {"limits": gpus.limits}
        if gpus.claims:
            container["resources"] = {"claims": gpus.container_claims}
        pod = self._pod(
            n.name,
            [container],
            hostPID=True,
            hostNetwork=True,
            volumes=[{"name": "host", "hostPath": {"path": "/", "type": "Directory"}}],
            **({"resourceClaims": gpus.claims} if gpus.claims else {}),
        )
        return [*gpus.objects, self._job(name, pod)]

    def pair_jobs(self, a: Node, ra: Rail, b: Node, rb: Rail) -> list[dict[str, Any]]:
        roce, port = self.plan.roce, 18515 + ra.index

        def base(r: Rail) -> str:
            return (
                f"ib_write_bw -d {rdma_device(r)} -x {roce.nccl_ib_gid_index} --tclass={roce.traffic_class}"
                f" -F --report_gbits -p {port}"
            )

        image = pinned_image(self.plan, "nccl-tests")
        res = {"limits": {f"rdma/rail{ra.index}": "1"}}

        def c(name: str, cmd: str) -> dict[str, Any]:
            return {
                "name": name,
                "image": image,
                "command": ["sh", "-c", cmd],
                "resources": res,
                "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
            }

        name = _name("accept-pair", a.name, b.name, f"rail{ra.index}")
        server = self._job(f"{name}-s"[:63], self._pod(b.name, [c("server", base(rb))], hostNetwork=True))
        # The client retries until the server listens; it reaches the server on the server's rail address.
        client_cmd = f"until {base(ra)} {rb.address}; do sleep 2; done"
        client = self._job(f"{name}-c"[:63], self._pod(a.name, [c("client", client_cmd)], hostNetwork=True))
        return [server, client]

    def allreduce_objects(self, name: str, ranks: Sequence[tuple[Node, Rail]], scope: str) -> list[dict[str, Any]]:
        """The group's all_reduce: [claim templates and (a rack) its ComputeDomain..., the MPIJob]. Over rails one
        GPU a node; a node, or a rack's trays, every GPU over NVLink (a rack's pods through the ComputeDomain's IMEX
        channel: NCCL's multi-node NVLink, GB200 from NCCL 2.25.2, NVIDIA's multi-node tuning guide)."""
        nodes = list(dict.fromkeys(n.name for n, _ in ranks))
        gpus = ranks[0][0].gpu.count if ranks[0][0].gpu else 1
        per_node = gpus if scope in NVLINK_SCOPES else 1
        job_name = _name("accept", name)
        request = self._gpus(per_node, job_name, f"{job_name[:56]}-domain" if scope == "rack" else None)
        image = pinned_image(self.plan, "nccl-tests")
        env = [
            {"name": "NCCL_IB_TC", "value": str(self.plan.roce.traffic_class)},
            {"name": "NCCL_IB_GID_INDEX", "value": str(self.plan.roce.nccl_ib_gid_index)},
        ]
        devices = sorted({r.rdma for _, r in ranks})
        if scope not in NVLINK_SCOPES and "" not in devices:  # one rail: its device alone (one name on every node)
            env.append({"name": "NCCL_IB_HCA", "value": "=" + ",".join(devices)})
        size = f"{int(self.opts.mbytes * 2**20)}"
        mpirun = ["mpirun", "--allow-run-as-root", "-np", str(len(nodes) * per_node), "--bind-to", "none"]
        mpirun += [a for e in env for a in ("-x", e["name"])]
        mpirun += ["all_reduce_perf", "-b", size, "-e", size, "-g", "1", "-n", str(self.opts.iterations)]
        worker = self._pod(
            nodes[0],
            [
                {
                    "name": "worker",
                    "image": image,
                    "command": ["/usr/sbin/sshd", "-De"],
                    "env": env,
                    "resources": {"limits": request.limits} if request.limits else {},
                }
            ],
        )
        if request.claims:
            worker["spec"]["containers"][0]["resources"]["claims"] = request.container_claims
            worker["spec"]["resourceClaims"] = request.claims
        del worker["spec"]["nodeSelector"]
        del worker["spec"]["restartPolicy"]
        worker["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}
                    ]
                }
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"aisite.io/accept-group": _name(name)}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            },
        }
        worker["metadata"]["labels"] = worker["metadata"]["labels"] | {"aisite.io/accept-group": _name(name)}
        launcher = {"spec": {"containers": [{"name": "launcher", "image": image, "command": mpirun, "env": env}]}}
        return [*request.objects, self._mpijob(job_name, launcher, worker, per_node, len(nodes))]

    def _mpijob(
        self, name: str, launcher: dict[str, Any], worker: dict[str, Any], per_node: int, nodes: int
    ) -> dict[str, Any]:
        return obj(
            "kubeflow.org/v2beta1",
            "MPIJob",
            name,
            labels(self.plan, role="acceptance"),
            self.namespace,
            spec={
                "slotsPerWorker": per_node,
                "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 0},
                "mpiImplementation": "OpenMPI",
                "mpiReplicaSpecs": {
                    "Launcher": {"replicas": 1, "restartPolicy": "Never", "template": launcher},
                    "Worker": {"replicas": nodes, "restartPolicy": "Never", "template": worker},
                },
            },
        )

    # ----------------------------------------------------------------------------------------- measurements
    def _run(self, objects: list[dict[str, Any]], result_pod: str) -> str:
        self.written += objects
        return self.cluster.run(objects, result_pod, self.opts.timeout)

    def node(self, n: Node) -> list[Check]:
        objects = self.node_objects(n)
        text = self._run(objects, objects[-1]["metadata"]["name"])
        status_text, _, diag_text = text.partition(MARK)
        try:
            status = foreign.loads(status_text[status_text.find("{") :], foreign.RECORD_LIMIT)
        except foreign.ForeignJSONError:
            return [
                Check(
                    "node",
                    n.name,
                    "health-check",
                    None,
                    "status.json",
                    "fail",
                    "the node's check printed no status",
                    node=n.name,
                )
            ]
        expected = Expected(n.name, n.gpu.count if n.gpu else 0, bool(n.gpu and n.gpu.nvswitch), ())
        diag = judge(Facts(diag=parse.dcgm_diag(diag_text)), expected) if n.gpu else None
        # The node's own word, read as `aisite health` reads it: strictly, bounded, never a traceback.
        h = from_status(n.name, status)
        checks = [
            Check(
                "node",
                f"{n.name}:{p.subject}",
                p.check,
                p.message,
                "none",
                "fail",
                node=n.name,
                rail=_rail(n, p.subject),
            )
            for p in h.problems
        ]
        checks += [
            Check("node", n.name, c, "ok", "no problem", "pass", node=n.name)
            for c in h.checked
            if not any(x.metric == c for x in checks)
        ]
        checks += [Check("node", n.name, s.split(":")[0], None, "", "skipped", s, node=n.name) for s in h.skipped]
        if diag is not None:
            checks += [
                Check("node", f"{n.name}:{p.subject}", "dcgm-diag", p.message, "PASS", "fail", node=n.name)
                for p in diag.problems
            ]
            if not diag.problems:
                checks.append(Check("node", n.name, "dcgm-diag", "PASS", "PASS", "pass", node=n.name))
        return checks

    def link(self, n: Node, r: Rail, reverse: bool) -> float:
        raise MeasureError("a site's switch is not an endpoint: rails are judged by their pairs")

    def pair(self, a: Node, ra: Rail, b: Node, rb: Rail) -> float:
        objects = self.pair_jobs(a, ra, b, rb)
        text = self._run(objects, objects[1]["metadata"]["name"])
        try:
            return float(tools.ib_write_bw(text)["value"])
        except tools.NoFigureError as exc:
            raise MeasureError(f"ib_write_bw {a.name} -> {b.name} rail {ra.index}: {exc}") from None

    def allreduce(self, name: str, ranks: Sequence[tuple[Node, Rail]], scope: str) -> float:
        objects = self.allreduce_objects(name, ranks, scope)
        text = self._run(objects, f"{objects[-1]['metadata']['name']}-launcher")
        try:
            return float(tools.nccl(text)["value"])
        except tools.NoFigureError as exc:
            raise MeasureError(f"all_reduce_perf {name}: {exc}") from None


def _rail(n: Node, subject: str) -> int | None:
    return next((r.index for r in n.rails if r.interface == subject), None)


class AnsibleCluster:
    """The site's cluster through playbooks/accept-job.yml (kubernetes.core, the admin kubeconfig)."""

    def __init__(self, plan: Plan, namespace: str) -> None:
        from aisite.render.inventory import inventory, inventory_text

        self.inventory = inventory_text(inventory(plan))
        self.namespace = namespace

    def run(self, objects: list[dict[str, Any]], result_pod: str, timeout: float) -> str:
        from aisite.deploy import run_playbook

        result = run_playbook(
            "accept-job.yml",
            self.inventory,
            extravars={
                "accept_objects": objects,
                "accept_namespace": self.namespace,
                "accept_result_pod": re.escape(result_pod),
                "accept_timeout": int(timeout),
            },
        )
        log = result.stats.get("accept_log")
        if not result.ok or not isinstance(log, str):
            raise MeasureError(f"{result_pod}: " + ("; ".join(result.failures)[-400:] or "no log"))
        return log


def first_pass(plan: Plan, opts: Options) -> list[dict[str, Any]]:
    """The jobs of a first pass, before any bisection: each node's, each rail pair's, each group's (for review
    where no cluster answers, and for the offline validation of every object acceptance submits)."""
    from aisite.accept.stages import Acceptance

    runner = SiteRunner(plan, opts, _Unreachable())
    acc = Acceptance(plan, opts, runner, lambda _: None)
    out = [o for n in acc.nodes for o in runner.node_objects(n)]
    for a, b, r in acc.pair_plan():
        out += runner.pair_jobs(a, a.rails[r], b, b.rails[r])
    out += [o for scope, name, ranks in acc.groups() for o in runner.allreduce_objects(name, ranks, scope)]
    return out


class _Unreachable:
    def run(self, objects: list[dict[str, Any]], result_pod: str, timeout: float) -> str:
        raise MeasureError("no cluster")
