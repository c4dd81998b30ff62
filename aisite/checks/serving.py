"""What a serving workload must agree with in its site: its tenant and quota, the GPUs the site has, the storage its
checkpoints are read from, the training workload that feeds it and the signers of its promotions."""

from __future__ import annotations

import re

from aisite.errors import Problem
from aisite.model import Serving, Site, Workload
from aisite.plan.kubernetes import node_gpus, tenant_flavors
from aisite.plan.serving import candidate_replicas

# The objects a served model makes (platform/serving.py): <name>, <name>-proxy, <name>-champion, <name>-candidate
# and <name>-candidate-gpus; Service names are DNS-1035 labels (a letter first), of 63 characters at most.
SUFFIXES = ("", "-proxy", "-champion", "-candidate")
MAX_NAME = 63 - len("-candidate-gpus")
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def principals(line: str) -> set[str]:
    """The principals an OpenSSH allowed-signers line names (its first field, comma-separated)."""
    return set(line.split(" ", 1)[0].split(","))


def serving_problems(site: Site) -> list[Problem]:
    out: list[Problem] = []
    nodes = node_gpus(site)
    types = list(nodes)
    tenants = {t.name: dict(tenant_flavors(t, types)) for t in site.kubernetes.tenants}
    workloads = {w.name: w for w in site.workloads}
    exports = site.storage_nodes.exports if site.storage_nodes else []
    signers = set().union(*(principals(line) for line in site.gitops.allowed_signers)) if site.gitops else set()
    seen: dict[str, int] = {}
    for i, s in enumerate(site.serving):
        path = f"site.serving[{i}]"
        if s.name in seen:
            out.append(Problem(f"{path}.name", f"{s.name!r} is already site.serving[{seen[s.name]}]"))
        seen.setdefault(s.name, i)
        if not _DNS_1035.fullmatch(s.name) or len(s.name) > MAX_NAME:
            out.append(
                Problem(
                    f"{path}.name",
                    f"{s.name!r} names Services and so must start with a letter, and its objects' names "
                    f"({s.name}-candidate-gpus) must fit 63 characters: at most {MAX_NAME}",
                )
            )
        clash = [w for w in workloads if w in {f"{s.name}{x}" for x in SUFFIXES} | {f"serving-{s.name}"}]
        if clash:
            out.append(Problem(f"{path}.name", f"its objects or file would take workload {clash[0]!r}'s name"))
        if s.tenant not in tenants:
            out.append(Problem(f"{path}.tenant", f"tenant {s.tenant!r} is not declared under site.kubernetes.tenants"))
        if not exports:
            out.append(
                Problem(
                    f"{path}.champion.artifact",
                    "checkpoints are read from the tenant's datasets claim, and the site exports no storage "
                    "(site.storage_nodes.exports)",
                )
            )
        if s.candidate and s.candidate.version == s.champion.version:
            out.append(Problem(f"{path}.candidate.version", f"{s.candidate.version!r} is the champion's version"))
        if s.candidate and s.candidate.artifact == s.champion.artifact:
            out.append(Problem(f"{path}.candidate.artifact", "the champion's checkpoint: a candidate is another one"))
        _check_gpus(s, path, nodes, tenants, out)
        if s.promotion:
            _check_promotion(site, s, path, workloads, out, signers=signers)
    return out


def _check_gpus(
    s: Serving, path: str, nodes: dict[str, list[int]], tenants: dict[str, dict[str, int]], out: list[Problem]
) -> None:
    """Its GPU type among the site's, a replica on one node, and its replicas (the canary's too) in the quota."""
    types = list(nodes)
    if not s.gpus:
        if s.gpu_type:
            out.append(Problem(f"{path}.gpu_type", "gpus is 0: it serves on CPUs, so a GPU type means nothing"))
        return
    if s.gpu_type and s.gpu_type not in nodes:
        out.append(
            Problem(f"{path}.gpu_type", f"the site has no {s.gpu_type} nodes (it has: {', '.join(types) or 'none'})")
        )
        return
    if not s.gpu_type and len(types) != 1:
        have = ", ".join(types) or "none"
        out.append(Problem(f"{path}.gpu_type", f"the site has GPU types {have}: name the one it serves on"))
        return
    gtype = s.gpu_type or types[0]
    largest = max(nodes[gtype] or [0])
    if s.gpus > largest:
        out.append(Problem(f"{path}.gpus", f"{s.gpus} per replica but the largest {gtype} node has {largest}"))
    share = s.candidate.share if s.candidate else (s.promotion.canary.share if s.promotion else 0)
    replicas = s.replicas + (candidate_replicas(s.replicas, share) if share else 0)
    quota = tenants.get(s.tenant, {}).get(gtype, 0)
    if s.tenant in tenants and replicas * s.gpus > quota:
        out.append(
            Problem(
                path,
                f"needs {replicas * s.gpus} {gtype} GPUs ({replicas} replicas with its canary's x {s.gpus}) but "
                f"tenant {s.tenant!r} has a {gtype} quota of {quota}",
            )
        )


def _check_promotion(
    site: Site, s: Serving, path: str, workloads: dict[str, Workload], out: list[Problem], *, signers: set[str]
) -> None:
    p = s.promotion
    assert p is not None
    w = workloads.get(p.training)
    if w is None:
        out.append(Problem(f"{path}.promotion.training", f"no workload {p.training!r} under site.workloads"))
    else:
        if w.kind != f"{s.model}-train":
            out.append(
                Problem(
                    f"{path}.promotion.training",
                    f"{p.training!r} is a {w.kind} workload: {s.model} is fed by {s.model}-train",
                )
            )
        if w.tenant != s.tenant:
            out.append(
                Problem(
                    f"{path}.promotion.training",
                    f"{p.training!r} runs in tenant {w.tenant!r}: its checkpoints are in another tenant's storage",
                )
            )
    for j, name in enumerate(p.signers):
        if name not in signers:
            out.append(
                Problem(
                    f"{path}.promotion.signers[{j}]",
                    f"{name!r} is not a principal of site.gitops.allowed_signers: its signature would not be trusted",
                )
            )
    if p.automatic and not site.gitops:
        out.append(Problem(f"{path}.promotion.automatic", "the reconciler promotes, and the site has no gitops"))
