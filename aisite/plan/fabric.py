"""The shape of the compute fabric and the numbers derived from it: rails, scalable units, port names, RoCE QoS."""

from __future__ import annotations

import math
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network

from aisite.catalog import SWITCH_MODELS
from aisite.drivers.switches import SWITCH_OS
from aisite.model import GpuGroup, Site, SwitchGroupBase, group_hardware
from aisite.plan.types import RoceQos


@dataclass(frozen=True, slots=True)
class FabricLayout:
    """The shape of the compute fabric, shared by the checks (port budgets) and the plan (cabling).

    Two tiers: every leaf cables to every spine (or, without spines, to every other leaf). Three tiers
    (pod_size > 0): the leaves of pod p (pod_size scalable units) cable to pod p's spines alone, and spine j of
    every pod to each super-spine of plane j mod planes."""

    rails: int  # rails of the fabric: the most any GPU group uses
    leaves_per_su: int
    scalable_units: int
    gpu_nodes: int
    spines: int
    uplinks_per_spine: int
    leaves: int = 0  # leaves declared (at least scalable_units x leaves_per_su)
    pod_size: int = 0  # scalable units per pod; 0: two tiers
    super_spines: int = 0
    uplinks_per_super_spine: int = 1
    planes: int = 1

    @property
    def leaves_needed(self) -> int:
        return self.scalable_units * self.leaves_per_su

    @property
    def three_tier(self) -> bool:
        return self.pod_size > 0

    @property
    def leaves_per_pod(self) -> int:
        return self.pod_size * self.leaves_per_su if self.three_tier else max(self.leaves, self.leaves_needed)

    @property
    def pods(self) -> int:
        if not self.three_tier:
            return 1
        return max(1, -(-max(self.leaves, self.leaves_needed) // self.leaves_per_pod))

    @property
    def spines_per_pod(self) -> int:
        return self.spines // self.pods

    @property
    def first_leaf_asn(self) -> int:
        """Leaf i's ASN is asn_base + this + i: after the spines' one (two tiers) or the pods' spines' (three)."""
        return 1 + (self.pods if self.three_tier else 0)

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
        """Fabric-facing ports per leaf: to every spine (of its pod), or to every other leaf without spines."""
        if self.three_tier:
            return self.spines_per_pod * self.uplinks_per_spine
        return self.spines * self.uplinks_per_spine if self.spines else (leaves - 1) * self.uplinks_per_spine

    def downlinks(self, su: int, su_size: int) -> int:
        in_su = min(su_size, self.gpu_nodes - su * su_size)
        return in_su * self.max_rails_per_leaf

    @property
    def spine_downlinks(self) -> int:
        """Ports of a spine to the leaves (of its pod)."""
        return self.leaves_per_pod * self.uplinks_per_spine

    @property
    def super_spines_per_plane(self) -> int:
        return self.super_spines // self.planes

    @property
    def spine_uplinks(self) -> int:
        """Ports of a spine to the super-spines of its plane (none in two tiers)."""
        return self.super_spines_per_plane * self.uplinks_per_super_spine if self.three_tier else 0

    @property
    def super_spine_downlinks(self) -> int:
        """Ports of a super-spine: to every spine of its plane in every pod."""
        return self.pods * -(-self.spines_per_pod // self.planes) * self.uplinks_per_super_spine

    def spine_plane(self, spine_in_pod: int) -> int:
        return spine_in_pod % self.planes

    @property
    def links(self) -> int:
        """Fabric links (/31s): leaf to spine (or leaf to leaf), and spine to super-spine."""
        if not self.spines:
            return self.leaves * (self.leaves - 1) // 2 * self.uplinks_per_spine
        if not self.three_tier:
            return self.leaves * self.spines * self.uplinks_per_spine
        return self.leaves * self.uplinks(self.leaves) + self.spines * self.spine_uplinks


def pod_network_name(rail: int) -> str:
    """The pods' network of a rail: one name site-wide (each tenant's NetworkAttachmentDefinition, each node's file)."""
    return f"aisite-rail{rail}"


def pod_pool_name(rail: int, su: int) -> str:
    """The NV-IPAM pool of a rail in one scalable unit: its leaf's block, whose gateway the pods use."""
    return f"rail{rail}-su{su}"


def fabric_bfd(site: Site) -> bool:
    """BFD on the fabric's sessions: the site's choice, else on wherever every fabric OS's role renders it."""
    if site.fabric.bfd is not None:
        return site.fabric.bfd
    sw = site.switches
    groups = [sw.leaves, sw.spines, *([sw.super_spines] if sw.super_spines else [])]
    return all(SWITCH_OS[g.os].bfd for g in groups)


def group_rails(group: GpuGroup) -> int:
    _, _, nics, _, _ = group_hardware(group)
    return group.rails if group.rails is not None else nics


def fabric_layout(site: Site) -> FabricLayout:
    rails = max((group_rails(g) for g in site.gpu_nodes if g.size), default=0)
    gpu_nodes = sum(g.size for g in site.gpu_nodes if group_rails(g))
    su = site.fabric.scalable_unit
    per_su = site.fabric.leaves_per_su or rails or 1
    fab, sw = site.fabric, site.switches
    supers = sw.super_spines.count if sw.super_spines else 0
    return FabricLayout(
        rails=rails,
        leaves_per_su=min(per_su, rails) if rails else per_su,
        scalable_units=math.ceil(gpu_nodes / su) if gpu_nodes else 0,
        gpu_nodes=gpu_nodes,
        spines=sw.spines.count,
        uplinks_per_spine=fab.uplinks_per_spine,
        leaves=sw.leaves.count,
        pod_size=fab.pod_size if fab.pod_size and supers and sw.spines.count else 0,
        super_spines=supers,
        uplinks_per_super_spine=fab.uplinks_per_super_spine,
        planes=fab.super_spine_planes,
    )


@dataclass(frozen=True, slots=True)
class Tier:
    """One tier's switches, what they serve below and reach above, as the plan cables them."""

    name: str  # leaves | spines
    down_gbps: int  # per switch of the tier (its busiest)
    up_gbps: int
    gpus_below: float  # GPUs under one switch (leaf) or one pod (spines); a GPU with two NICs is half under each
    up_gbps_below: int  # what those GPUs reach above the tier: the leaf's uplinks, or the whole pod's spines'

    @property
    def oversubscription(self) -> float:
        return self.down_gbps / self.up_gbps if self.up_gbps else math.inf

    @property
    def gbps_per_gpu(self) -> float:
        return self.up_gbps_below / self.gpus_below if self.gpus_below else math.inf


@dataclass(frozen=True, slots=True)
class FabricCapacity:
    switch_tiers: int  # 1: leaves alone (meshed), 2: leaves and spines, 3: with super-spines
    nic_gbps_per_gpu: float
    tiers: tuple[Tier, ...]  # those with a tier above them (a leaf mesh: the leaves, their links to each other)

    @property
    def bisection_gbps_per_gpu(self) -> float:
        """The narrowest of a GPU's NIC and each tier's bandwidth up per GPU below it: what every GPU can send across
        the fabric at once when the traffic crosses its top (half the GPUs to the other half)."""
        return min((self.nic_gbps_per_gpu, *(t.gbps_per_gpu for t in self.tiers)))


def fabric_capacity(site: Site, layout: FabricLayout) -> FabricCapacity | None:
    """The fabric's bandwidth per tier from its shape and speeds; None without rails. The busiest leaf (a full
    scalable unit's rails) and the fullest pod stand for their tier."""
    sw = site.switches
    # Groups without GPUs or rails carry no GPU traffic (and a generic group without `gpus` is reported elsewhere).
    groups = [g for g in site.gpu_nodes if g.size and group_rails(g) and group_hardware(g)[1]]
    if not layout.rails or not groups:
        return None
    hw = [group_hardware(g) for g in groups]
    rails = [group_rails(g) for g in groups]
    host_gbps = min(max(speed for _, _, _, speed, _ in hw), sw.leaves.speed_gbps)
    gpus_per_port = max(gpus / r for (_, gpus, _, _, _), r in zip(hw, rails, strict=True))
    nic_per_gpu = min(
        min(speed, sw.leaves.speed_gbps) * r / gpus for (_, gpus, _, speed, _), r in zip(hw, rails, strict=True)
    )
    down_ports = max(layout.downlinks(su, site.fabric.scalable_unit) for su in range(layout.scalable_units))
    tiers: list[Tier] = []
    if layout.spines or layout.leaves > 1:
        link = min(sw.leaves.speed_gbps, sw.spines.speed_gbps) if layout.spines else sw.leaves.speed_gbps
        up = layout.uplinks(layout.leaves) * link
        tiers.append(Tier("leaves", down_ports * host_gbps, up, down_ports * gpus_per_port, up))
    if layout.three_tier and sw.super_spines:
        down_link = min(sw.leaves.speed_gbps, sw.spines.speed_gbps)
        up_link = min(sw.spines.speed_gbps, sw.super_spines.speed_gbps)
        down, up = layout.spine_downlinks * down_link, layout.spine_uplinks * up_link
        pod_gpus = min(layout.pod_size * site.fabric.scalable_unit, layout.gpu_nodes) * layout.rails * gpus_per_port
        tiers.append(Tier("spines", down, up, pod_gpus, layout.spines_per_pod * up))
    return FabricCapacity(1 + bool(layout.spines) + layout.three_tier, nic_per_gpu, tuple(tiers))


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


def panel(group: SwitchGroupBase) -> tuple[int, int]:
    """(ports a cage, lanes a cage) of a group's switches: its model's breakout for the ports it declares; (1, 0)
    where the catalog does not know the model (its ports taken at their word, one per cage)."""
    model = SWITCH_MODELS.get(group.model)
    if model is None:
        return 1, 0
    return max(1, model.split(group.ports)), model.lanes


def platform_mode(group: SwitchGroupBase, split: int) -> tuple[str, str]:
    """(breakout mode, hardware SKU) of a group's cages split `split` ways, where its OS's driver knows the model's
    platform files (SONiC); ("", "") elsewhere, or where the platform has no such mode (the checks refuse it)."""
    platform = SWITCH_OS[group.os].platforms.get(group.model)
    if platform is None or split not in platform.modes:
        return "", ""
    return platform.modes[split], platform.hwsku(split)


def switch_port(group: SwitchGroupBase, port: int) -> str:
    """Port `port` (1-based) of a switch of `group`, as its OS names it on its front panel."""
    return port_name(group.os, port, group.speed_gbps, panel(group))


def port_name(os: str, port: int, speed_gbps: int, front: tuple[int, int] = (1, 0)) -> str:
    """Front-panel port `port` (1-based) in the naming of the switch operating system (its driver's). `front` is
    `panel()`: split cages name their ports after the cage (Cumulus swp1s0, swp1s1; SONiC by first lane, Ethernet0
    and Ethernet4 of an 8-lane cage split in two, as the HWSKU's port_config.ini numbers lanes; Onyx Eth1/1/1)."""
    split, lanes = front
    return SWITCH_OS[os].port(port, speed_gbps, split, lanes)


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
