"""Rails inside pods (Network Operator): one RDMA resource per rail from the RDMA shared device plugin, an NV-IPAM
pool per rail and scalable unit carved from that leaf's block, and a macvlan network per rail in each tenant.

A macvlan pod is a neighbour of its node's leaf, so its address must lie in the leaf's block for that rail: the
plan sizes the block for `fabric.rail_pod_addresses` per node beyond the hosts, and the pool holds exactly that
part (never a host's or the gateway's address). Blocks differ per scalable unit, so pools and networks are per
(rail, unit): a job's pods take the networks of the unit they run in.
"""

from __future__ import annotations

import json
from ipaddress import IPv4Address, IPv4Network
from typing import Any

from aisite.plan import LABEL_PREFIX, Plan, Switch, TenantPlan
from aisite.plan.fabric import rail_host_address
from aisite.platform.common import labels, obj
from aisite.platform.tenants import in_tenant

NAMESPACE = "nvidia-network-operator"
MELLANOX = "mellanox.com/v1alpha1"
NV_IPAM = "nv-ipam.nvidia.com/v1alpha1"
RDMA_PREFIX = "rdma"
IMAGE_REPOSITORY = "nvcr.io/nvidia/mellanox"
COMPONENT_VERSION = "network-operator-v26.4.1"  # the components the Network Operator 26.4.1 chart ships


def rail_resource(rail: int) -> str:
    """The extended resource a pod requests for rail N (the shared RDMA device of that rail's NIC)."""
    return f"{RDMA_PREFIX}/rail{rail}"


def pool_name(rail: int, su: int) -> str:
    return f"rail{rail}-su{su}"


def rail_interfaces(plan: Plan) -> dict[int, str]:
    """rail -> its interface name on the GPU nodes (checks hold it to one name per rail)."""
    out: dict[int, str] = {}
    for n in plan.nodes:
        for r in n.rails:
            out.setdefault(r.index, r.interface)
    return dict(sorted(out.items()))


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
                pool_name(rail, su),
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
    """A macvlan network per rail and scalable unit in the tenant's namespace, on the rail interface."""
    names = rail_interfaces(plan)
    out = []
    for leaf, rail, _, _ in _leaf_blocks(plan):
        su = leaf.scalable_unit
        assert su is not None
        out.append(
            obj(
                MELLANOX,
                "MacvlanNetwork",
                f"{t.name}-{pool_name(rail, su)}",
                labels(plan, tenant=t.name),
                spec={
                    "networkNamespace": t.namespace,
                    "master": names[rail],
                    "mode": "bridge",
                    "mtu": plan.roce.host_mtu,
                    "ipam": json.dumps({"type": "nv-ipam", "poolName": pool_name(rail, su)}),
                },
            )
        )
    return out


def rail_quota(plan: Plan, t: TenantPlan) -> dict[str, Any]:
    """One rail device per GPU the tenant may use, on every rail."""
    hard = {f"requests.{rail_resource(r)}": str(t.gpu_quota) for r in rail_interfaces(plan)}
    return in_tenant(plan, t, "v1", "ResourceQuota", "rail-quota", spec={"hard": hard})


def rail_objects(plan: Plan) -> list[dict[str, Any]]:
    return [nic_cluster_policy(plan), *ip_pools(plan), *(n for t in plan.tenants for n in tenant_networks(plan, t))]
