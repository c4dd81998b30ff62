"""Warnings: a valid site that will not do what its owner likely expects. Printed by `aisite validate` (and in
its `--json`); never an exit code of their own unless `--strict`. Each names the key to change."""

from __future__ import annotations

from aisite.catalog import GENERIC_MODEL, SERVER_MODELS
from aisite.drivers.bmcs import BMC_PROTOCOLS
from aisite.errors import Problem
from aisite.model import Site, compute_ports, group_hardware
from aisite.plan import Plan, group_rails


def site_warnings(site: Site, plan: Plan) -> list[Problem]:
    out: list[Problem] = []
    railed = [(i, g) for i, g in enumerate(site.gpu_nodes) if g.size and group_rails(g)]
    addons = site.kubernetes.addons
    if railed and "network-operator" not in addons:
        out.append(
            Problem(
                "site.kubernetes.addons",
                "GPU nodes have rails but the network-operator is not installed: pods get no RDMA rail and NCCL "
                "falls back to TCP on the pod network",
            )
        )
    elif railed and site.fabric.rail_pod_addresses <= 0:
        out.append(
            Problem(
                "site.fabric.rail_pod_addresses",
                "0 with the network-operator: the leaf blocks hold no pod addresses, so pods get no rail",
            )
        )
    if "kserve" in addons:
        out.append(
            Problem(
                "site.kubernetes.addons",
                "kserve: its webhooks' certificate is a cert-manager Certificate, and aisite does not install "
                "cert-manager: the cluster must have it before the kserve release",
            )
        )
    if site.kubernetes.gpu_allocation == "dra":
        # NVIDIA's GPU Operator documentation, "NVIDIA DRA Driver for GPUs": its GPU allocation is "not yet fully
        # supported (Technology Preview)", its ComputeDomains fully supported (those need no gpu_allocation: dra).
        out.append(
            Problem(
                "site.kubernetes.gpu_allocation",
                "dra: the DRA driver's GPU allocation is a technology preview (NVIDIA's GPU Operator documentation, "
                "NVIDIA DRA Driver for GPUs), not supported in production; racks' ComputeDomains, which are, run "
                "with device-plugin too",
            )
        )
    if "jupyterhub" in addons and site.kubernetes.gpu_allocation == "dra":
        out.append(
            Problem(
                "site.kubernetes.gpu_allocation",
                "dra: JupyterHub's KubeSpawner asks for GPUs as resources, not DRA claims: notebooks get CPU "
                "profiles only",
            )
        )
    leaf_gbps = site.switches.leaves.speed_gbps
    for i, g in railed:
        _, _, _, nic_gbps, _ = group_hardware(g)
        if nic_gbps > leaf_gbps:
            out.append(
                Problem(
                    "site.switches.leaves.speed_gbps",
                    f"{leaf_gbps}G leaf ports serve {g.name}'s {nic_gbps}G NICs (site.gpu_nodes[{i}]): each rail "
                    f"runs at {leaf_gbps}G",
                )
            )
        ports = compute_ports(g)[: group_rails(g)]
        if len(ports) < group_rails(g) or not all(p.rdma for p in ports):
            out.append(
                Problem(
                    f"site.gpu_nodes[{i}].ports",
                    (
                        "the site declares no RDMA device for these generic servers' compute NICs"
                        if g.model == GENERIC_MODEL
                        else f"no document aisite cites names {g.model}'s compute NICs' RDMA devices"
                    )
                    + ": jobs set no NCCL_IB_HCA and the health check takes the device behind each rail's "
                    "interface; declare the ports (label, rdma, pci) to pin them",
                )
            )
        # A group that declares its install's OS has chosen it knowingly: said once, where it is chosen.
        declared = g.install is not None and "os" in g.install.model_fields_set
        if g.model in SERVER_MODELS and SERVER_MODELS[g.model].compute_ports and not declared:
            out.append(
                Problem(
                    f"site.gpu_nodes[{i}].model",
                    f"{g.model} runs Debian 12 here; NVIDIA supports DGX systems on DGX OS or Ubuntu only (adopt "
                    "them as they arrive with install: {method: adopt, os: dgx-os-7}, or declare install: "
                    "{os: debian-12} to accept Debian)",
                )
            )
    for key in ("management", "oob"):
        group = getattr(site.switches, key)
        if group is not None and group.count and group.os != "generic" and not group.uplinks:
            out.append(
                Problem(
                    f"site.switches.{key}.uplinks",
                    f"none: aisite replaces these {group.os} switches' whole configuration, so their network "
                    "reaches no further than them; name the ports to the site's core",
                )
            )
    m = plan.maintenance
    largest = max((n.gpu.count for n in plan.nodes if n.gpu), default=0)
    if m is not None and largest and m.max_unavailable_gpus < largest:
        out.append(
            Problem(
                "site.maintenance.max_unavailable_gpus",
                f"{m.max_unavailable_gpus} is fewer than one node's {largest} GPUs: no such node is ever taken out "
                "for a change (every rollout waits) nor quarantined (a failing one is held in service)",
            )
        )
    renew, late = site.kubernetes.certificate_renew_days, site.health.min_certificate_days
    if renew <= late:
        out.append(
            Problem(
                "site.kubernetes.certificate_renew_days",
                f"{renew} is not more than health.min_certificate_days ({late}): the health check reports the "
                "control plane's certificates as a problem before their renewal is due",
            )
        )
    ipmi: dict[str, list[str]] = {}
    for n in plan.nodes:
        if n.firmware is not None and not BMC_PROTOCOLS[n.bmc.protocol].firmware:
            ipmi.setdefault(n.path.rsplit(".nodes[", 1)[0], []).append(n.name)
    for path, names in ipmi.items():
        out.append(
            Problem(
                f"{path}.firmware",
                f"{len(names)} nodes with IPMI BMCs ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''}): "
                "IPMI offers no BIOS settings or firmware update, so their baseline is neither read nor set",
            )
        )
    unverified = [n.name for n in plan.nodes if BMC_PROTOCOLS[n.bmc.protocol].tls and not n.bmc.tls_verify]
    if unverified and site.ansible.connection != "lab":
        out.append(
            Problem(
                "site.oob.tls_verify",
                f"false: the certificates of {len(unverified)} Redfish BMCs ({', '.join(unverified[:4])}"
                f"{', ...' if len(unverified) > 4 else ''}) are not checked, so whoever answers at their addresses "
                "gets their credentials and their orders; install certificates the site's CA signed and turn it on",
            )
        )
    empty = [s.name for s in plan.switches_by_role("leaf") if not s.host_subnets]
    leaves = plan.switches_by_role("leaf")
    if railed and empty:
        out.append(
            Problem(
                "site.switches.leaves.count",
                f"{len(empty)} of {len(leaves)} leaves have no GPU node behind them ({', '.join(empty[:4])}"
                + (", ..." if len(empty) > 4 else "")
                + ")",
            )
        )
    out += _ceph_margins(plan)
    return out


def _ceph_margins(plan: Plan) -> list[Problem]:
    """Pools that write with no redundancy while one failure lasts (aisite.plan.ceph: Ceph's default min_size); and
    what of the cluster aisite does not install yet."""
    out = []
    if plan.ceph:
        out.append(
            Problem(
                "site.storage_nodes.ceph",
                "the hosts layer installs this cluster from Debian's packages (16.2 only: no upstream repository "
                "yet) with each OSD on a file, not a disk; it makes the clients ceph-csi and the tenants use, but does "
                "not copy their keys into Secrets yet: volumes will not bind until you make those Secrets",
            )
        )
    for i, pool in enumerate(p for p in (plan.ceph.pools if plan.ceph else ()) if not p.system):
        if pool.kind == "erasure" and pool.min_size == pool.k:
            out.append(
                Problem(
                    f"site.storage_nodes.ceph.pools[{i}]",
                    f"{pool.name}: erasure {pool.k}+{pool.m} has min_size {pool.min_size} = k: while one "
                    f"{pool.failure_domain} is down it takes writes with no coding chunk to spare (m >= 2 keeps one)",
                )
            )
        elif pool.kind == "replicated" and pool.width == 2:
            out.append(
                Problem(
                    f"site.storage_nodes.ceph.pools[{i}].size",
                    f"{pool.name}: 2 copies, min_size 1: while one {pool.failure_domain} is down it takes writes "
                    "on a single copy",
                )
            )
    return out
