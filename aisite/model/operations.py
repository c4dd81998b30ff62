"""How the site is operated: Ansible, GitOps, acceptance, health and the maintenance budget."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from aisite.fields import (
    DnsLabel,
    DnsSubdomain,
    GitBranch,
    UnixUser,
)
from aisite.model.base import SSH_KEY, Bandwidth, Fraction, GpuTypeKey, Name, Strict


class AnsibleSettings(Strict):
    # ssh: real hosts at their management addresses. lab: the containers `aisite lab up` makes for this stack,
    # reached the same way (SSH, pipelining, ControlPersist) with the key and host keys the lab generates.
    connection: Literal["ssh", "lab"] = "ssh"
    user: UnixUser = "root"


_BACKEND = r"^(https://|s3://|gs://|azblob://|file://)[A-Za-z0-9._~%+@:/=?&-]{1,2000}$"


class Gitops(Strict):
    """Where the site's repository is and how it is applied from it: by the reconciler (`aisite reconcile` on a
    management host, role `reconciler`) and by in-cluster GitOps (Flux + the Pulumi Kubernetes Operator, rendered
    into manifests/gitops/<site>/). Credentials are named Secrets, never values."""

    repository: Annotated[str, Field(pattern=r"^(ssh://|https://|git@)[A-Za-z0-9._~%+@:/=-]{1,2000}$")]
    branch: GitBranch = "main"
    interval_seconds: Annotated[int, Field(ge=30, le=86400)] = 300
    full_pass_seconds: Annotated[int, Field(ge=300)] = 3600  # reconciler: every layer on every host this often
    # The node that runs the reconciler (systemd timer); None: the first control-plane node.
    reconciler_host: Name | None = None
    # OpenSSH allowed-signers lines: when any, only commits signed by one of these keys are applied.
    allowed_signers: list[Annotated[str, Field(pattern=r"^\S+ " + SSH_KEY[1:])]] = []
    # Layers the nodes converge themselves: ansible-pull of verified commits on a timer (role pull, installed by
    # `aisite deploy STACK --layer pull`); the reconciler keeps pushing the others.
    pull_layers: Annotated[list[Literal["hosts", "cluster"]], Field(max_length=2)] = []
    pull_interval_seconds: Annotated[int, Field(ge=60, le=86400)] = 900
    # Where the nodes fetch the repository from (a mirror inside the site); None: `repository`. git:// (no
    # transport authentication) is accepted: a node applies only commits its verifier accepts, whoever served them.
    pull_repository: (
        Annotated[str, Field(pattern=r"^(ssh://|https://|git://|git@|file:///)[A-Za-z0-9._~%+@:/=-]{1,2000}$")] | None
    ) = None
    pulumi_stack: Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+){0,2}$")] | None = None
    pulumi_backend: Annotated[str, Field(pattern=_BACKEND)] | None = None
    namespace: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")] = "aisite-gitops"
    # Secret with the repository's credentials (identity + known_hosts, or token).
    git_secret: DnsSubdomain | None = None
    # Secret with the signers' public keys (*.sshpub) for Flux to verify HEAD.
    signers_secret: DnsSubdomain | None = None
    # Secret whose keys are the environment variables the stack reads (its password_from.env names) and
    # PULUMI_ACCESS_TOKEN; None: aisite-<site>-credentials.
    credentials_secret: DnsSubdomain | None = None


class Acceptance(Strict):
    """`aisite accept`: what a measurement must reach, over the built-in table of aisite.accept.thresholds (GPU
    and NIC models, with sources), and where its jobs run on a site."""

    # NCCL all_reduce bus bandwidth (GB/s) of one full node, per GPU type: replaces the table's figure.
    nccl_busbw_gbps: dict[GpuTypeKey, Bandwidth] = {}
    # ib_write_bw (Gb/s) per NIC speed in Gb/s (e.g. {400: 380}): replaces the table's figure.
    ib_write_bw_gbps: dict[Annotated[int, Field(ge=1, le=3200)], Bandwidth] = {}
    # A link, pair or group below this share of the best of its kind (same stage, same group size) fails, below
    # degraded_fraction it is degraded: a figure alone does not tell a slow cable from a slow fabric.
    fail_fraction: Fraction = 0.5
    degraded_fraction: Fraction = 0.8
    # The lab's floors (CPUs and veths set its figures, not a NIC model): iperf3 Gb/s, gloo all_reduce GB/s.
    lab_min_gbps: Bandwidth = 0.5
    lab_min_busbw_gbps: Bandwidth = 0.02
    # The namespace a site's acceptance jobs run in (created by the platform, privileged: DCGM diagnostics and
    # perftest need the devices).
    namespace: DnsLabel = "aisite-acceptance"


class Health(Strict):
    """The nodes' health check (roles/node_health: a systemd timer) and the quarantine `aisite health` runs."""

    interval_s: Annotated[int, Field(ge=30, le=86400)] = 300
    # What runs the check every interval: the node's systemd timer, or a DaemonSet on the cluster that starts the
    # same check on each node (for sites that want it scheduled and seen through Kubernetes).
    runner: Literal["timer", "daemonset"] = "timer"
    # A quarantined node is released after this many clean checks in a row.
    recover_after: Annotated[int, Field(ge=1, le=100)] = 3
    # Never more nodes quarantined at once than this share of the nodes checked (at least one) ...
    max_quarantined_fraction: Fraction = 0.1
    # ... or than this number, where set (0: never quarantine, only report and alert).
    max_quarantined: Annotated[int, Field(ge=0, le=100_000)] | None = None
    # An NVL72 rack whose NVLink fabric is at fault (a majority of its trays report a fabric problem of their own,
    # or a majority of them split evenly between NVLink cliques; never a minority's word) is quarantined whole: no
    # rack-scale job can use it. Its trays count under the node cap and the site's disruption budget like any
    # other nodes (a rack they cannot hold is held whole, and said); at most this many racks at once (0: never a
    # rack).
    max_quarantined_racks: Annotated[int, Field(ge=0, le=10_000)] = 1
    max_fs_used: Fraction = 0.95
    max_clock_offset_s: Annotated[float, Field(gt=0, le=3600)] = 0.5
    # A node's Kubernetes certificates (kubeadm's, /etc/kubernetes) closer than this to their expiry are a problem.
    min_certificate_days: Annotated[int, Field(ge=1, le=3650)] = 30


class Maintenance(Strict):
    """The site's one disruption budget: what maintenance, upgrades, firmware and the health quarantine together
    may take out of service at once (aisite.maintenance), and how a disruptive change rolls (`aisite diff` shows
    its waves)."""

    # At most this share of the site's GPUs out of service at once (never less than one node's, so a node can
    # always be taken out alone) ...
    max_unavailable_fraction: Fraction = 0.125
    # ... or this many GPUs, where set (0: no GPU node is ever taken out, nor quarantined).
    max_unavailable_gpus: Annotated[int, Field(ge=0, le=10_000_000)] | None = None
    # Never two nodes of one scalable unit out at once (a job placed in a unit loses one node at most).
    one_node_per_unit: bool = False
    # GPU nodes in the first wave; the rest wait until the canary is back in service and healthy.
    canary_nodes: Annotated[int, Field(ge=1, le=1000)] = 1
    # How long a cordoned node waits for its running Kueue jobs before they are preempted through Kueue (and the
    # rest of its pods evicted): aisite.maintenance.jobs.
    drain_timeout_s: Annotated[int, Field(ge=0, le=7 * 86400)] = 3600
