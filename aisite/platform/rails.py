"""Rails inside pods (Network Operator): one RDMA resource per rail from the RDMA shared device plugin, an NV-IPAM
pool per rail and scalable unit carved from that leaf's block, and one pod network per rail for the whole site.

A macvlan pod is a neighbour of its node's leaf, so its address must lie in the leaf's block for that rail: the
plan sizes the block for `fabric.rail_pod_addresses` per node beyond the hosts, and the pool holds exactly that
part (never a host's or the gateway's address), with a route to the rail's other blocks through the leaf. Blocks
differ per unit but a job's pods must all name the same networks, wherever they land: each tenant's
NetworkAttachmentDefinition of a rail has no config, so Multus reads the node's own CNI file of that name
(multus-cni GetCNIConfigFromFile, in its confDir /etc/cni/multus/net.d), which roles/roce_host writes from the
plan with the pool of the node's unit. A job spanning units or pods thus gets every rail on every node.
"""

from __future__ import annotations

import json
from ipaddress import IPv4Address, IPv4Network
from typing import Any

from aisite.plan import LABEL_PREFIX, Plan, Switch, TenantPlan
from aisite.plan.fabric import pod_pool_name, rail_host_address
from aisite.platform.common import labels, obj
from aisite.platform.tenants import in_tenant

NAMESPACE = "nvidia-network-operator"
MELLANOX = "mellanox.com/v1alpha1"
NV_IPAM = "nv-ipam.nvidia.com/v1alpha1"
NAD = "k8s.cni.cncf.io/v1"
RDMA_PREFIX = "rdma"
IMAGE_REPOSITORY = "nvcr.io/nvidia/mellanox"
COMPONENT_VERSION = "network-operator-v26.4.1"  # the components the Network Operator 26.4.1 chart ships


def rail_resource(rail: int) -> str:
    """The extended resource a pod requests for rail N (the shared RDMA device of that rail's NIC)."""
    return f"{RDMA_PREFIX}/rail{rail}"


def _per_rail(plan: Plan, field: str, gpu_type: str | None = None) -> dict[int, list[str]]:
    """rail -> the distinct values of one of its fields over the GPU nodes (of one GPU type where given: a site's
    Grace trays may have four rails beside DGX systems' eight), in the nodes' order."""
    out: dict[int, list[str]] = {}
    for n in plan.nodes:
        if gpu_type and (n.gpu is None or n.gpu.type != gpu_type):
            continue
        for r in n.rails:
            values = out.setdefault(r.index, [])
            if getattr(r, field) not in values:
                values.append(getattr(r, field))
    return dict(sorted(out.items()))


def rail_interfaces(plan: Plan, gpu_type: str | None = None) -> dict[int, str]:
    """rail -> its interface name on the GPU nodes (of one type), as checks hold it: one name per rail."""
    return {i: v[0] for i, v in _per_rail(plan, "interface", gpu_type).items()}


def pod_networks(plan: Plan) -> dict[int, str]:
    """rail -> the pods' network on it, as the plan names it (one name a rail on every node); none without pods."""
    return {i: names[0] for i, v in _per_rail(plan, "pod_network").items() if (names := [x for x in v if x])}


def rail_devices(plan: Plan, gpu_type: str | None = None) -> dict[int, str]:
    """rail -> its RDMA device where every GPU node (of one type) names it alike (aisite.catalog or the site's
    ports); a rail whose device is unknown on some node, or differs between models, is left out."""
    return {i: v[0] for i, v in _per_rail(plan, "rdma", gpu_type).items() if len(v) == 1 and v[0]}


def _leaf_blocks(plan: Plan) -> list[tuple[Switch, int, IPv4Network, IPv4Address]]:
    """(leaf, rail, block, gateway) of every leaf block that has GPU nodes behind it."""
    return [
        (leaf, h.rail, IPv4Network(h.subnet), IPv4Address(h.gateway))
        for leaf in plan.switches_by_role("leaf")
        for h in leaf.host_subnets
        if leaf.scalable_unit is not None
    ]


def ip_pools(plan: Plan) -> list[dict[str, Any]]:
    k = plan.kubernetes
    out = []
    for leaf, rail, block, gateway in _leaf_blocks(plan):
        su = leaf.scalable_unit
        assert su is not None
        # The hosts' own addresses are the top of the block (rail_host_address): never handed to pods. NV-IPAM
        # counts node ranges from network+1, so the bottom is theirs; the first range holds the gateway, which
        # the CNI never hands out, hence one address more per node than the site asks for.
        first, last = (
            rail_host_address(block, k.scalable_unit, p, k.rail_pod_addresses) for p in (0, k.scalable_unit - 1)
        )
        out.append(
            obj(
                NV_IPAM,
                "IPPool",
                pod_pool_name(rail, su),
                labels(plan),
                NAMESPACE,
                spec={
                    "subnet": str(block),
                    "perNodeBlockSize": k.rail_pod_addresses + 1,
                    "gateway": str(gateway),
                    "exclusions": [{"startIP": str(first), "endIP": str(last)}],
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": f"{LABEL_PREFIX}/scalable-unit", "operator": "In", "values": [str(su)]}
                                ]
                            }
                        ]
                    },
                },
            )
        )
        rail_net = IPv4Network(plan.networks.rails[rail])
        if rail_net != block:
            # The rail's other blocks (other units, other pods) through this leaf, as the hosts route them; never
            # the block itself, whose connected route the CNI would collide with.
            out[-1]["spec"]["routes"] = [{"dst": str(rail_net)}]
    return out


def nic_cluster_policy(plan: Plan) -> dict[str, Any]:
    def image(name: str) -> dict[str, str]:
        return {"repository": IMAGE_REPOSITORY, "image": name, "version": COMPONENT_VERSION}

    config = {
        "configList": [
            {
                "resourceName": f"rail{r}",
                "resourcePrefix": RDMA_PREFIX,
                # Pods sharing the rail's NIC: more than a node can hold at once.
                "rdmaHcaMax": 63,
                "selectors": {"ifNames": [name]},
            }
            for r, name in rail_interfaces(plan).items()
        ]
    }
    return obj(
        MELLANOX,
        "NicClusterPolicy",
        "nic-cluster-policy",  # the one name the operator acts on
        labels(plan),
        spec={
            "rdmaSharedDevicePlugin": image("k8s-rdma-shared-dev-plugin") | {"config": json.dumps(config, indent=1)},
            "secondaryNetwork": {"cniPlugins": image("plugins"), "multus": image("multus-cni")},
            "nvIpam": image("nvidia-k8s-ipam") | {"enableWebhook": False},
        },
    )


def tenant_networks(plan: Plan, t: TenantPlan) -> list[dict[str, Any]]:
    """One network per rail in the tenant's namespace, with no config of its own: Multus takes the node's file
    of the same name (roles/roce_host: macvlan on the rail, the pool of the node's unit)."""
    return [
        obj(
            NAD,
            "NetworkAttachmentDefinition",
            name,
            labels(plan, tenant=t.name),
            t.namespace,
            spec={},
        )
        for name in pod_networks(plan).values()
    ]


def rail_quota(plan: Plan, t: TenantPlan) -> dict[str, Any]:
    """One rail device per GPU the tenant may use, on every rail."""
    hard = {f"requests.{rail_resource(r)}": str(t.gpu_quota) for r in rail_interfaces(plan)}
    return in_tenant(plan, t, "v1", "ResourceQuota", "rail-quota", spec={"hard": hard})


def rail_objects(plan: Plan) -> list[dict[str, Any]]:
    return [nic_cluster_policy(plan), *ip_pools(plan), *(n for t in plan.tenants for n in tenant_networks(plan, t))]
