"""Kubernetes and the platform on it: versions, DRA, tenants and quotas, workloads, exports, GitOps, acceptance."""

from __future__ import annotations

from aisite.errors import Problem
from aisite.model import (
    NodeGroup,
    Site,
    compute_ports,
    group_hardware,
    group_racks,
)
from aisite.plan import group_rails
from aisite.plan.kubernetes import (
    CNI_MANIFESTS,
    DRA_MIN_VERSION,
    PINNED,
    SUPPORTED_MINORS,
    gpu_inventory,
    job_operator,
    minor,
    node_gpus,
    tenant_flavors,
    version_tuple,
)


def check_acceptance(site: Site, out: list[Problem]) -> None:
    a = site.acceptance
    if a.degraded_fraction < a.fail_fraction:
        out.append(
            Problem(
                "site.acceptance.degraded_fraction",
                f"{a.degraded_fraction} is below fail_fraction {a.fail_fraction}: a figure would fail before degrading",
            )
        )
    types = {group_hardware(g)[0] for g in site.gpu_nodes}
    out.extend(
        Problem(f"site.acceptance.nccl_busbw_gbps.{t}", f"the site has no {t} GPUs")
        for t in a.nccl_busbw_gbps
        if t not in types
    )


def check_gitops(site: Site, groups: list[tuple[str, NodeGroup]], out: list[Problem]) -> None:
    g = site.gitops
    if g is None:
        return
    nodes = [name for _, group in groups for name in group.node_names()]
    if g.reconciler_host is not None and g.reconciler_host not in nodes:
        out.append(
            Problem(
                "site.gitops.reconciler_host",
                f"{g.reconciler_host!r} is not a node of the site (nodes: {', '.join(nodes[:8])}"
                + (", ...)" if len(nodes) > 8 else ")"),
            )
        )
    if g.pull_layers and not g.allowed_signers:
        # A pulling node runs as root whatever commit it accepts, fetched over transports (git://, a mirror) that
        # authenticate nothing: without signers it would accept whatever answers its fetch.
        out.append(
            Problem(
                "site.gitops.pull_layers",
                "nodes that pull their layers apply only signed commits: list the signers' keys in allowed_signers",
            )
        )
    if g.signers_secret and not g.allowed_signers:
        out.append(
            Problem(
                "site.gitops.signers_secret",
                "Flux would verify signatures the reconciler does not: list the same keys in allowed_signers",
            )
        )


def check_notebooks(site: Site, out: list[Problem]) -> None:
    """The jupyterhub addon logs users in through the site's provider (JupyterHub's default admits anyone) and
    starts their servers in tenants' namespaces (without a tenant no one could start one)."""
    k = site.kubernetes
    if "jupyterhub" not in k.addons:
        return
    if k.notebooks.login is None:
        out.append(
            Problem(
                "site.kubernetes.notebooks.login",
                "the jupyterhub addon needs the site's login provider (client_id and its URLs): without one "
                "JupyterHub's default authenticator admits anyone",
            )
        )
    if not k.tenants:
        out.append(
            Problem("site.kubernetes.addons", "jupyterhub: notebooks run in tenants' namespaces: declare tenants")
        )
    elif not any(t.groups for t in k.tenants):
        out.append(
            Problem("site.kubernetes.tenants", "jupyterhub: no tenant names groups, so no user could start a notebook")
        )


def check_kubernetes(site: Site, out: list[Problem]) -> None:
    """The version against what the pinned components support, and a CNI the cluster layer can install.
    (The VIP and the pod and service networks are held by the address and network checks.)"""
    k = site.kubernetes
    low, high = SUPPORTED_MINORS
    if not low <= minor(k.version) <= high:
        out.append(
            Problem(
                "site.kubernetes.version",
                f"{k.version} is not supported by the pinned components ({PINNED}): use 1.{low} to 1.{high}",
            )
        )
    if k.cni not in CNI_MANIFESTS and not k.cni_manifest:
        out.append(
            Problem(
                "site.kubernetes.cni",
                f"no pinned manifest for {k.cni} (pinned: {', '.join(CNI_MANIFESTS)}): "
                "set site.kubernetes.cni_manifest",
            )
        )
    if "network-operator" in k.addons:
        check_pod_rails(site, out)
    check_dra(site, out)
    check_notebooks(site, out)
    for i, r in enumerate(k.containerd.registries):
        if not r.mirrors and not r.ca:
            out.append(Problem(f"site.kubernetes.containerd.registries[{i}]", f"{r.host}: give mirrors, a ca, or both"))


def check_dra(site: Site, out: list[Problem]) -> None:
    """GPU allocation through DRA needs NVIDIA's DRA driver, which aisite installs beside the GPU Operator (its Node
    Feature Discovery labels the nodes the driver's kubelet plugin runs on); racks get it there too, for their
    ComputeDomains. Without the GPU Operator a rack gets no ComputeDomains: the hosts keep the IMEX peers
    (nodes_config.cfg) and the package, its service masked, for a site that runs IMEX itself. The driver needs a
    Kubernetes that serves resource.k8s.io/v1."""
    k = site.kubernetes
    dra = k.gpu_allocation == "dra"
    racks = [f"site.gpu_nodes[{i}]" for i, g in enumerate(site.gpu_nodes) if group_racks(g)]
    operator = "gpu-operator" in k.addons
    if dra and not operator:
        out.append(
            Problem(
                "site.kubernetes.gpu_allocation",
                "dra needs NVIDIA's DRA driver, which aisite installs beside the gpu-operator addon (its Node "
                "Feature Discovery labels the GPU nodes the driver runs on): add gpu-operator to the addons",
            )
        )
    why = "gpu_allocation: dra" if dra else f"the racks of {racks[0]} (their ComputeDomains)" if racks else ""
    if why and (dra or operator) and version_tuple(k.version) < DRA_MIN_VERSION:
        floor = ".".join(map(str, DRA_MIN_VERSION))
        out.append(
            Problem(
                "site.kubernetes.version",
                f"{k.version}: {why} needs Dynamic Resource Allocation's resource.k8s.io/v1, which aisite's version "
                f"set asks of Kubernetes {floor} or later",
            )
        )
    if k.gpu_allocation == "dra" and k.mig_strategy == "mixed":
        out.append(
            Problem(
                "site.kubernetes.mig_strategy",
                "mixed names a resource per MIG profile for the device plugin; with gpu_allocation: dra, jobs claim "
                "whole GPUs (gpu.nvidia.com): use single or none",
            )
        )


def check_quotas(site: Site, out: list[Problem]) -> None:
    """Each tenant's GPUs per type against what the site has of that type, and all tenants' together unless the
    site allows overcommit: Kueue would admit nothing beyond the GPUs that exist."""
    have = gpu_inventory(site)
    promised: dict[str, list[tuple[str, int]]] = {}
    for i, t in enumerate(site.kubernetes.tenants):
        path = f"site.kubernetes.tenants[{i}]"
        if isinstance(t.gpu_quota, int):
            if len(have) > 1:
                out.append(
                    Problem(
                        f"{path}.gpu_quota",
                        f"the site has GPU types {', '.join(have)}: give the quota per type, e.g. "
                        f"{{{next(iter(have))}: {t.gpu_quota}}}",
                    )
                )
                continue
            quotas = dict.fromkeys(have, t.gpu_quota)
        else:
            quotas = t.gpu_quota
        for gtype, n in quotas.items():
            where = f"{path}.gpu_quota" + ("" if isinstance(t.gpu_quota, int) else f".{gtype}")
            if gtype not in have:
                known = ", ".join(have) or "none"
                out.append(Problem(where, f"the site has no {gtype} GPUs (it has: {known})"))
                continue
            if n > have[gtype]:
                out.append(Problem(where, f"{n} {gtype} GPUs but the site has {have[gtype]}"))
            if t.lending_limit is not None and t.lending_limit > n:
                out.append(Problem(f"{path}.lending_limit", f"{t.lending_limit} is more than its {gtype} quota of {n}"))
            promised.setdefault(gtype, []).append((t.name, n))
    if site.kubernetes.gpu_overcommit:
        return
    for gtype, shares in promised.items():
        total = sum(n for _, n in shares)
        if total > have[gtype]:
            who = ", ".join(f"{name} {n}" for name, n in shares)
            out.append(
                Problem(
                    "site.kubernetes.tenants",
                    f"quotas add up to {total} {gtype} GPUs ({who}) but the site has {have[gtype]}; "
                    "set site.kubernetes.gpu_overcommit: true to allow it",
                )
            )


def check_pod_rails(site: Site, out: list[Problem]) -> None:
    """Pods get an interface on every rail (a macvlan network per rail): their addresses need room in the leaf
    blocks, and a rail's interface must have one name on every GPU node (a network has one master interface)."""
    if not site.fabric.rail_pod_addresses:
        out.append(
            Problem(
                "site.fabric.rail_pod_addresses",
                "the network-operator addon gives pods an interface per rail: set how many addresses each GPU node "
                "needs for them in each rail block (e.g. 2)",
            )
        )
    names: dict[int, tuple[str, str]] = {}
    for gi, g in enumerate(site.gpu_nodes):
        given = g.interfaces.rails or []
        for r in range(group_rails(g)):
            name = given[r] if r < len(given) else f"rail{r}"
            first = names.setdefault(r, (name, f"site.gpu_nodes[{gi}]"))
            if first[0] != name:
                out.append(
                    Problem(
                        f"site.gpu_nodes[{gi}].interfaces.rails[{r}]",
                        f"{name!r} but {first[1]} calls rail {r} {first[0]!r}: a pod network per rail needs one name",
                    )
                )


def check_exports(site: Site, out: list[Problem]) -> None:
    # An export's name is its StorageClass's and its PersistentVolume's: two of one name would replace each other.
    seen: dict[str, int] = {}
    for i, e in enumerate(site.storage_nodes.exports if site.storage_nodes else []):
        if e.name in seen:
            out.append(
                Problem(f"site.storage_nodes.exports[{i}].name", f"{e.name!r} is already exports[{seen[e.name]}]")
            )
        seen.setdefault(e.name, i)


def check_tenants(site: Site, out: list[Problem]) -> None:
    tenants: dict[str, int] = {}
    for i, t in enumerate(site.kubernetes.tenants):
        if t.name in tenants:
            out.append(Problem(f"site.kubernetes.tenants[{i}].name", f"tenant {t.name!r} is declared twice"))
        tenants.setdefault(t.name, t.gpu_quota if isinstance(t.gpu_quota, int) else sum(t.gpu_quota.values()))
    check_quotas(site, out)
    check_workloads(site, out, {t.name for t in site.kubernetes.tenants})


def check_workloads(site: Site, out: list[Problem], tenants: set[str]) -> None:
    """Each workload against its tenant's quota for its GPU type, the nodes of that type (how many, GPUs on each),
    and the operator its job object needs."""
    nodes = node_gpus(site)
    types = list(nodes)
    quota = {t.name: dict(tenant_flavors(t, types)) for t in site.kubernetes.tenants}
    addons = set(site.kubernetes.addons)
    names: set[str] = set()
    for i, w in enumerate(site.workloads):
        path = f"site.workloads[{i}]"
        if w.name in names:
            out.append(Problem(f"{path}.name", f"workload {w.name!r} is declared twice"))
        names.add(w.name)
        gtype = w.gpu_type or (types[0] if types else "")
        if w.gpu_type and w.gpu_type not in nodes:
            out.append(
                Problem(
                    f"{path}.gpu_type", f"the site has no {w.gpu_type} nodes (it has: {', '.join(types) or 'none'})"
                )
            )
            continue
        if w.gpu_type is None and len(types) > 1:
            out.append(
                Problem(f"{path}.gpu_type", f"the site has GPU types {', '.join(types)}: name the one it runs on")
            )
            continue
        need = w.nodes * w.gpus_per_node
        if w.tenant not in tenants:
            out.append(Problem(f"{path}.tenant", f"tenant {w.tenant!r} is not declared under site.kubernetes.tenants"))
        elif need > quota[w.tenant].get(gtype, 0):
            out.append(
                Problem(
                    path,
                    f"needs {need} {gtype} GPUs ({w.nodes} nodes x {w.gpus_per_node}) but tenant {w.tenant!r} has a "
                    f"{gtype} quota of {quota[w.tenant].get(gtype, 0)}",
                )
            )
        fits = sorted((n for n in nodes.get(gtype, []) if n >= w.gpus_per_node), reverse=True)
        largest = max(nodes.get(gtype) or [0])  # a group of count 0 has no nodes
        if w.gpus_per_node > largest:
            out.append(
                Problem(
                    f"{path}.gpus_per_node",
                    f"{w.gpus_per_node} but the largest {gtype} node has {largest}",
                )
            )
        elif w.nodes > len(fits):
            out.append(
                Problem(
                    f"{path}.nodes",
                    f"{w.nodes} nodes but the site has {len(fits)} {gtype} nodes with {w.gpus_per_node} GPUs or more",
                )
            )
        if w.kind in ("ib-write-bw", "iperf3") and w.nodes < 2:
            out.append(Problem(f"{path}.nodes", f"{w.kind} measures between nodes: give 2 or more"))
        if w.kind == "ib-write-bw":
            for j, g in enumerate(site.gpu_nodes):
                ports = compute_ports(g)[: group_rails(g)]
                if g.ports is not None and len(g.ports) != group_hardware(g)[2]:
                    continue  # the port list itself is refused above
                if g.size and group_rails(g) and (len(ports) < group_rails(g) or not all(p.rdma for p in ports)):
                    out.append(
                        Problem(
                            f"{path}.kind",
                            f"ib-write-bw runs on each rail's RDMA device and no document or port list names "
                            f"those of site.gpu_nodes[{j}] ({g.name}, {g.model}): declare its ports with each rdma",
                        )
                    )
        if w.kind in ("fio", "iperf3") and not w.image:
            out.append(
                Problem(
                    f"{path}.image", f"{w.kind} has no pinned upstream image: name the site's image that has {w.kind}"
                )
            )
        wanted = job_operator(w.kind, tuple(addons))
        if wanted and wanted not in addons:
            out.append(
                Problem(
                    f"{path}.kind", f"{w.kind} runs as a job of the {wanted} addon: add it to site.kubernetes.addons"
                )
            )
        racks = any(group_racks(g) and group_hardware(g)[0] == gtype for g in site.gpu_nodes)
        claims = w.gpus_per_node and (site.kubernetes.gpu_allocation == "dra" or (racks and w.nodes > 1))
        domain = racks and w.nodes > 1 and w.gpus_per_node and "gpu-operator" in addons
        if domain and w.gpus_per_node < largest:
            # The job's ComputeDomain (its own IMEX domain; NVIDIA DRA Driver for GPUs, ComputeDomains: "secure
            # isolation from other pods that are not in the domain") holds the trays it lands on: a job taking
            # part of a tray leaves the rest to another job's domain on the same node, which the driver does not
            # run (one ComputeDomain a node).
            out.append(
                Problem(
                    f"{path}.gpus_per_node",
                    f"{w.gpus_per_node} of a {gtype} tray's {largest}: a job across trays gets a ComputeDomain, and "
                    "a node holds one ComputeDomain at a time, so such a job takes whole trays (give "
                    f"{largest}, or run it on one tray: nodes: 1)",
                )
            )
        if wanted == "training-operator" and claims:
            out.append(
                Problem(
                    f"{path}.kind",
                    f"{w.kind} runs as a TrainJob, whose pods cannot carry resource claims (the trainer 2.3.0's "
                    "runtimePatches have no resourceClaims), and here they claim "
                    + ("GPUs through DRA" if site.kubernetes.gpu_allocation == "dra" else "a ComputeDomain's channel")
                    + ": leave training-operator out of the addons to run it as an MPIJob",
                )
            )
