"""The shape of the compute fabric and the numbers derived from it: rails, scalable units, port names, RoCE QoS."""

from __future__ import annotations

import math
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network

from aisite.model import GpuGroup, Site, group_hardware
from aisite.plan.types import RoceQos


@dataclass(frozen=True, slots=True)
class FabricLayout:
    """The shape of the compute fabric, shared by the checks (port budgets) and the plan (cabling)."""

    rails: int  # rails of the fabric: the most any GPU group uses
    leaves_per_su: int
    scalable_units: int
    gpu_nodes: int
    spines: int
    uplinks_per_spine: int

    @property
    def leaves_needed(self) -> int:
        return self.scalable_units * self.leaves_per_su

    def leaf_of_rail(self, rail: int) -> int:
        """Index within a scalable unit of the leaf that carries `rail`."""
        return rail * self.leaves_per_su // self.rails

    def rails_of_leaf(self, leaf: int) -> range:
        first = -(-leaf * self.rails // self.leaves_per_su)
        last = -(-(leaf + 1) * self.rails // self.leaves_per_su)
        return range(first, last)

    @property
    def max_rails_per_leaf(self) -> int:
        return -(-self.rails // self.leaves_per_su) if self.rails else 0

    def uplinks(self, leaves: int) -> int:
        """Fabric-facing ports per leaf: to every spine, or to every other leaf when there are no spines."""
        return self.spines * self.uplinks_per_spine if self.spines else (leaves - 1) * self.uplinks_per_spine

    def downlinks(self, su: int, su_size: int) -> int:
        in_su = min(su_size, self.gpu_nodes - su * su_size)
        return in_su * self.max_rails_per_leaf


def group_rails(group: GpuGroup) -> int:
    _, _, nics, _, _ = group_hardware(group)
    return group.rails if group.rails is not None else nics


def fabric_layout(site: Site) -> FabricLayout:
    rails = max((group_rails(g) for g in site.gpu_nodes if g.size), default=0)
    gpu_nodes = sum(g.size for g in site.gpu_nodes if group_rails(g))
    su = site.fabric.scalable_unit
    per_su = site.fabric.leaves_per_su or rails or 1
    return FabricLayout(
        rails=rails,
        leaves_per_su=min(per_su, rails) if rails else per_su,
        scalable_units=math.ceil(gpu_nodes / su) if gpu_nodes else 0,
        gpu_nodes=gpu_nodes,
        spines=site.switches.spines.count,
        uplinks_per_spine=site.fabric.uplinks_per_spine,
    )


def rail_block_prefix(scalable_unit: int, pod_addresses: int = 0) -> int:
    """Prefix length of one leaf's block of a rail subnet.

    Without pod addresses: network, gateway, the unit's hosts, broadcast. With them the block is laid out for
    NV-IPAM, which hands each node a range of perNodeBlockSize addresses counted from network+1 in order: the
    nodes' ranges come first (pod_addresses + 1 each, the first holding the gateway, which is never handed out),
    the hosts' own addresses last, below broadcast.
    """
    if pod_addresses:
        return 32 - math.ceil(math.log2(scalable_unit * (pod_addresses + 2) + 2))
    return 32 - math.ceil(math.log2(scalable_unit + 3))


def rail_host_address(block: IPv4Network, scalable_unit: int, position: int, pod_addresses: int) -> IPv4Address:
    """A GPU node's own address in its leaf's block: right after the gateway, or at the top when the block's
    bottom is the pods' (see rail_block_prefix)."""
    if pod_addresses:
        return block.broadcast_address - scalable_unit + position
    return block.network_address + 2 + position


def port_name(os: str, port: int, speed_gbps: int) -> str:
    """Front-panel port `port` (1-based) in the naming of the switch operating system."""
    if os == "sonic":
        lanes = 8 if speed_gbps >= 400 else 4
        return f"Ethernet{(port - 1) * lanes}"
    if os == "onyx":
        return f"Eth1/{port}"
    if os == "generic":
        return f"port{port}"
    return f"swp{port}"  # Cumulus and FRR on Linux


def rail_block(rail_net: IPv4Network, prefix: int, su: int) -> IPv4Network:
    size = 1 << (32 - prefix)
    return IPv4Network((int(rail_net.network_address) + su * size, prefix))


def roce_qos(site: Site) -> RoceQos:
    r = site.fabric.roce
    tos = (r.roce_dscp << 2) | 2  # ECT(0) set, as NVIDIA's reference: DSCP 26 -> ToS 106
    return RoceQos(
        pfc_priority=r.pfc_priority,
        pfc_enable=",".join("1" if p == r.pfc_priority else "0" for p in range(8)),
        trust=r.trust,
        roce_dscp=r.roce_dscp,
        roce_tc=r.pfc_priority,
        traffic_class=tos,
        cnp_dscp=r.cnp_dscp,
        cnp_priority=r.cnp_priority,
        ecn_min_bytes=r.ecn_min_kb * 1000,
        ecn_max_bytes=r.ecn_max_kb * 1000,
        ets_roce_percent=r.ets_roce_percent,
        ets_default_percent=100 - r.ets_roce_percent,
        ecn_probability_percent=r.ecn_probability_percent,
        pfc_watchdog=r.pfc_watchdog,
        pfc_watchdog_poll_ms=r.pfc_watchdog_poll_ms,
        pfc_watchdog_detection_ms=r.pfc_watchdog_detection_ms,
        pfc_watchdog_restoration_ms=r.pfc_watchdog_restoration_ms,
        switch_mtu=site.fabric.switch_mtu,
        host_mtu=site.fabric.host_mtu,
        nccl_ib_tc=tos,
        nccl_ib_gid_index=r.gid_index,
    )
