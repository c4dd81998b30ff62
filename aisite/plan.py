"""The plan: a pure, deterministic expansion of a validated Site.

Every address, port, ASN and cable that any layer uses is decided here, once; renderers, the Pulumi program and
the lab read the plan and never re-derive. Cost is linear in nodes + links (address pools are cursors, not scans).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from ipaddress import IPv4Address, IPv4Network
from typing import Any

from aisite.catalog import GPU_TYPES
from aisite.model import (
    AccessSwitchGroup,
    GpuGroup,
    NodeGroup,
    NodeSpec,
    Site,
    SwitchGroupBase,
    SwitchSpec,
    Taint,
    group_hardware,
)


@dataclass(frozen=True, slots=True)
class NodeTaint:
    key: str
    value: str
    effect: str

    @classmethod
    def of(cls, t: Taint) -> NodeTaint:
        return cls(t.key, t.value, t.effect)


GPU_TAINT = NodeTaint(key="nvidia.com/gpu", value="present", effect="NoSchedule")
LABEL_PREFIX = "aisite.io"
RAIL_TABLE_BASE = 100  # routing table of rail N is 100 + N


# ---------------------------------------------------------------------------------------------- plan types
@dataclass(frozen=True, slots=True)
class Bmc:
    protocol: str
    address: str
    mac: str | None
    port: int
    credentials: str
    switch: str | None
    switch_port: str | None
    power: str  # on | off: the state the BMC role holds the node in
    tls_verify: bool


@dataclass(frozen=True, slots=True)
class Interface:
    name: str
    address: str
    prefix: int
    gateway: str | None
    mac: str | None
    mtu: int


@dataclass(frozen=True, slots=True)
class Rail:
    index: int
    interface: str
    address: str
    prefix: int
    gateway: str
    subnet: str
    leaf: str
    leaf_port: str
    table: int
    mtu: int


@dataclass(frozen=True, slots=True)
class Gpu:
    type: str
    product: str
    arch: str
    count: int
    nvswitch: bool
    driver_branch: int


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    fqdn: str
    role: str  # control-plane | gpu | storage
    group: str
    index: int  # position within its group
    path: str  # where it is declared in the stack file
    model: str
    gpu: Gpu | None
    scalable_unit: int | None
    bmc: Bmc
    management: Interface
    storage: Interface | None
    rails: tuple[Rail, ...]
    labels: dict[str, str]
    taints: tuple[NodeTaint, ...]


@dataclass(frozen=True, slots=True)
class BgpNeighbor:
    interface: str
    peer: str
    peer_interface: str
    peer_asn: int
    # /31 addresses for operating systems configured numbered; unnumbered peers use the interface alone.
    local_address: str
    peer_address: str


@dataclass(frozen=True, slots=True)
class HostSubnet:
    rail: int
    subnet: str
    gateway: str
    ports: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Switch:
    name: str
    role: str  # leaf | spine | management | oob
    os: str
    model: str
    ports: int
    speed_gbps: int
    management_address: str
    management_prefix: int
    asn: int | None
    loopback: str | None
    scalable_unit: int | None
    neighbors: tuple[BgpNeighbor, ...]
    host_subnets: tuple[HostSubnet, ...]


@dataclass(frozen=True, slots=True)
class Cable:
    kind: str  # rail | fabric | management | storage | bmc | switch-management
    a_device: str
    a_port: str
    b_device: str
    b_port: str
    speed_gbps: int


@dataclass(frozen=True, slots=True)
class RoceQos:
    pfc_priority: int
    pfc_enable: str  # mlnx_qos --pfc vector, e.g. 0,0,0,1,0,0,0,0
    trust: str
    roce_dscp: int
    roce_tc: int
    traffic_class: int  # IP ToS byte: DSCP << 2 with ECT(0), the value of NCCL_IB_TC and default_roce_tos
    cnp_dscp: int
    cnp_priority: int
    ecn_min_bytes: int
    ecn_max_bytes: int
    ets_roce_percent: int
    ets_default_percent: int
    pfc_watchdog: bool
    switch_mtu: int
    host_mtu: int
    nccl_ib_tc: int
    nccl_ib_gid_index: int


@dataclass(frozen=True, slots=True)
class TenantPlan:
    name: str
    namespace: str
    gpu_quota: int
    groups: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class WorkloadPlan:
    name: str
    kind: str
    tenant: str
    namespace: str
    nodes: int
    gpus_per_node: int


@dataclass(frozen=True, slots=True)
class KubernetesPlan:
    version: str
    cni: str
    api_vip: str
    api_port: int
    pod_cidr: str
    service_cidr: str
    addons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AdminUserPlan:
    name: str
    ssh_keys: tuple[str, ...]
    sudo: bool


@dataclass(frozen=True, slots=True)
class ExportPlan:
    """An NFS export: served by one storage node on the storage network, mounted by the GPU nodes."""

    name: str
    path: str
    tier: str
    server: str
    address: str  # the server's storage address
    clients: str  # the storage network: nothing else may mount it
    mount_point: str


def exports(site: Site, nodes: tuple[Node, ...]) -> tuple[ExportPlan, ...]:
    """Export i is served by storage node i mod n (round-robin, so tiers spread over the nodes)."""
    servers = [n for n in nodes if n.role == "storage" and n.storage]
    if not site.storage_nodes or not servers:
        return ()
    out = []
    for i, e in enumerate(site.storage_nodes.exports):
        srv = servers[i % len(servers)]
        assert srv.storage is not None
        out.append(
            ExportPlan(
                e.name, e.path, e.tier, srv.name, srv.storage.address, str(site.networks.storage), f"/mnt/{e.name}"
            )
        )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class NetworksPlan:
    oob: str
    management: str
    storage: str
    loopbacks: str
    p2p: str
    rails: tuple[str, ...]
    pods: str
    services: str

    def gateway(self, name: str) -> str:
        """First host of a network: the gateway (the pools never hand it out)."""
        return str(IPv4Network(getattr(self, name)).network_address + 1)


@dataclass(frozen=True, slots=True)
class Plan:
    site: str
    domain: str
    connection: str
    ansible_user: str
    ntp_servers: tuple[str, ...]
    dns_servers: tuple[str, ...]
    nvidia_repository: str
    networks: NetworksPlan
    nodes: tuple[Node, ...]
    switches: tuple[Switch, ...]
    cables: tuple[Cable, ...]
    roce: RoceQos
    kubernetes: KubernetesPlan
    tenants: tuple[TenantPlan, ...]
    workloads: tuple[WorkloadPlan, ...]
    secrets: dict[str, dict[str, str | None]] = field(default_factory=dict)
    # Accounts the BMC role keeps on every Redfish BMC: ({secret, role}, ...).
    bmc_accounts: tuple[dict[str, str], ...] = ()
    admin_users: tuple[AdminUserPlan, ...] = ()
    nfs_server: str = "kernel"
    exports: tuple[ExportPlan, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def by_role(self, role: str) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.role == role)

    def switches_by_role(self, role: str) -> tuple[Switch, ...]:
        return tuple(s for s in self.switches if s.role == role)


# ------------------------------------------------------------------------------------------ fabric layout
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


def rail_block_prefix(scalable_unit: int) -> int:
    """Prefix length of one leaf's block of a rail subnet: a unit's hosts, the gateway, network and broadcast."""
    return 32 - math.ceil(math.log2(scalable_unit + 3))


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


# --------------------------------------------------------------------------------------- address pools
class Pool:
    """Hands out host addresses of a network in order, skipping the gateway (first host) and reserved ones."""

    def __init__(self, network: IPv4Network, reserved: Iterable[IPv4Address] = ()) -> None:
        self.network = network
        self._reserved = {int(a) for a in reserved}
        self._next = int(network.network_address) + 2
        self._last = int(network.broadcast_address) - 1 if network.prefixlen < 31 else int(network.broadcast_address)

    @property
    def gateway(self) -> IPv4Address:
        return self.network.network_address + 1

    def take(self) -> IPv4Address:
        while self._next in self._reserved:
            self._next += 1
        if self._next > self._last:
            raise ValueError(f"address pool {self.network} is exhausted")
        address = IPv4Address(self._next)
        self._next += 1
        return address


def explicit_addresses(site: Site) -> Iterator[IPv4Address]:
    """Every address written in the stack file; pools skip them all."""
    yield site.control_plane.vip
    for group in _node_groups(site):
        for spec in (group.bmc, *(n.bmc for n in group.nodes)):
            if spec and spec.address:
                yield spec.address
        for nspec in group.nodes:
            for iface in (nspec.management, nspec.storage):
                if iface and iface.address:
                    yield iface.address
    for sgroup in _switch_groups(site):
        for sw in sgroup.nodes:
            if sw.management and sw.management.address:
                yield sw.management.address


def _node_groups(site: Site) -> list[NodeGroup]:
    groups: list[NodeGroup] = [site.control_plane, *site.gpu_nodes]
    if site.storage_nodes:
        groups.append(site.storage_nodes)
    return groups


def _switch_groups(site: Site) -> list[SwitchGroupBase]:
    groups: list[SwitchGroupBase] = [site.switches.spines, site.switches.leaves]
    for extra in (site.switches.management, site.switches.oob):
        if extra:
            groups.append(extra)
    return groups


# ------------------------------------------------------------------------------------------------ build
@dataclass(slots=True)
class _Slots:
    """Fills the ports of a group of access switches in order, spilling to the next switch when one is full."""

    names: list[str]
    ports: int
    os: str
    speed: int
    used: int = 0

    def take(self) -> tuple[str, str] | None:
        if not self.names:
            return None
        switch, port = divmod(self.used, self.ports)
        self.used += 1
        if switch >= len(self.names):
            raise ValueError(f"access switches {self.names} have no free port")
        return self.names[switch], port_name(self.os, port + 1, self.speed)


def _access_slots(group: AccessSwitchGroup | None) -> _Slots:
    if group is None:
        return _Slots([], 1, "generic", 0)
    return _Slots(group.switch_names(), group.ports, group.os, group.speed_gbps)


def _rail_block(rail_net: IPv4Network, prefix: int, su: int) -> IPv4Network:
    size = 1 << (32 - prefix)
    return IPv4Network((int(rail_net.network_address) + su * size, prefix))


@dataclass(frozen=True, slots=True)
class _NodeRef:
    """A node as declared: its group, where the group is in the file, and its position in the group."""

    group: NodeGroup
    path: str
    role: str
    group_name: str
    index: int
    name: str

    @property
    def spec(self) -> NodeSpec:
        return self.group.nodes[self.index] if self.index < len(self.group.nodes) else NodeSpec()


class _Builder:
    """Walks the site once, in declaration order, handing out addresses and ports from cursors."""

    def __init__(self, site: Site) -> None:
        self.site = site
        nets = site.networks
        reserved = list(explicit_addresses(site))
        self.mgmt = Pool(nets.management, reserved)
        self.oob = Pool(nets.oob, reserved)
        self.storage = Pool(nets.storage, reserved)
        self.loopbacks = Pool(nets.loopbacks, reserved)
        self.p2p_next = int(nets.p2p.network_address)
        self.layout = fabric_layout(site)
        self.mgmt_slots = _access_slots(site.switches.management)
        self.oob_slots = _access_slots(site.switches.oob)
        self.leaf_names = site.switches.leaves.switch_names()
        self.block_prefix = rail_block_prefix(site.fabric.scalable_unit)
        self.host_ports: dict[tuple[int, int], list[str]] = {}  # (leaf index, rail) -> node-facing ports
        self.neighbors: dict[str, list[BgpNeighbor]] = {}
        self.cables: list[Cable] = []
        self.gpu_position = 0  # position among GPU nodes on the fabric: fixes scalable unit and leaf port

    # -- nodes
    def node_refs(self) -> Iterator[_NodeRef]:
        site = self.site
        cp = site.control_plane
        for i, name in enumerate(cp.node_names()):
            yield _NodeRef(cp, "site.control_plane", "control-plane", "control-plane", i, name)
        for gi, group in enumerate(site.gpu_nodes):
            for i, name in enumerate(group.node_names()):
                yield _NodeRef(group, f"site.gpu_nodes[{gi}]", "gpu", group.name, i, name)
        if site.storage_nodes:
            st = site.storage_nodes
            for i, name in enumerate(st.node_names()):
                yield _NodeRef(st, "site.storage_nodes", "storage", "storage", i, name)

    def bmc(self, ref: _NodeRef) -> Bmc:
        spec, gspec, oob = ref.spec.bmc, ref.group.bmc, self.site.oob
        protocol = (spec and spec.protocol) or (gspec and gspec.protocol) or oob.protocol
        address = (spec and spec.address) or self.oob.take()
        port = (spec and spec.port) or (gspec and gspec.port) or (443 if protocol == "redfish" else 623)
        creds = (spec and spec.credentials) or (gspec and gspec.credentials) or oob.credentials or ""
        slot = self.oob_slots.take()
        if slot:
            self.cables.append(Cable("bmc", f"{ref.name}-bmc", "bmc", *slot, self.oob_slots.speed))
        power = (spec and spec.power) or (gspec and gspec.power) or oob.power
        return Bmc(
            protocol,
            str(address),
            spec.mac if spec else None,
            port,
            creds,
            slot[0] if slot else None,
            slot[1] if slot else None,
            power,
            oob.tls_verify,
        )

    def interface(self, ref: _NodeRef, kind: str) -> Interface:
        """The management or storage interface of a node, cabled to the next free management-switch port."""
        nets = self.site.networks
        spec = ref.spec.management if kind == "management" else ref.spec.storage
        pool = self.mgmt if kind == "management" else self.storage
        name = ref.group.interfaces.management if kind == "management" else ref.group.interfaces.storage
        address = (spec and spec.address) or pool.take()
        slot = self.mgmt_slots.take()
        if slot:
            self.cables.append(Cable(kind, ref.name, name, *slot, self.mgmt_slots.speed))
        return Interface(
            name=name,
            address=str(address),
            prefix=(nets.management if kind == "management" else nets.storage).prefixlen,
            gateway=str(pool.gateway) if kind == "management" else None,
            mac=spec.mac if spec else None,
            mtu=1500 if kind == "management" else self.site.fabric.host_mtu,
        )

    def rails(self, ref: _NodeRef, group: GpuGroup, nic_speed: int) -> tuple[int | None, tuple[Rail, ...]]:
        n_rails = group_rails(group)
        if not n_rails:
            return None, ()
        layout, leaves = self.layout, self.site.switches.leaves
        su, pos = divmod(self.gpu_position, self.site.fabric.scalable_unit)
        self.gpu_position += 1
        names = group.interfaces.rails or [f"rail{r}" for r in range(n_rails)]
        out: list[Rail] = []
        for r in range(n_rails):
            in_su = layout.leaf_of_rail(r)
            leaf_index = su * layout.leaves_per_su + in_su
            leaf = self.leaf_names[leaf_index]
            port_no = pos * layout.max_rails_per_leaf + (r - layout.rails_of_leaf(in_su).start) + 1
            leaf_port = port_name(leaves.os, port_no, leaves.speed_gbps)
            block = _rail_block(self.site.networks.rails[r], self.block_prefix, su)
            gateway = block.network_address + 1
            out.append(
                Rail(
                    index=r,
                    interface=names[r],
                    address=str(gateway + 1 + pos),
                    prefix=self.block_prefix,
                    gateway=str(gateway),
                    subnet=str(block),
                    leaf=leaf,
                    leaf_port=leaf_port,
                    table=RAIL_TABLE_BASE + r,
                    mtu=self.site.fabric.host_mtu,
                )
            )
            self.host_ports.setdefault((leaf_index, r), []).append(leaf_port)
            self.cables.append(Cable("rail", ref.name, names[r], leaf, leaf_port, min(nic_speed, leaves.speed_gbps)))
        return su, tuple(out)

    def node(self, ref: _NodeRef) -> Node:
        site = self.site
        bmc = self.bmc(ref)
        management = self.interface(ref, "management")
        storage = self.interface(ref, "storage") if ref.role in ("gpu", "storage") else None
        labels = {
            f"{LABEL_PREFIX}/site": site.name,
            f"{LABEL_PREFIX}/role": ref.role,
            f"{LABEL_PREFIX}/group": ref.group_name,
        }
        taints: list[NodeTaint] = []
        gpu: Gpu | None = None
        su: int | None = None
        rails: tuple[Rail, ...] = ()
        model = {"control-plane": "hci", "storage": "storage"}.get(ref.role, "")
        if ref.role == "control-plane":
            labels["node-role.kubernetes.io/control-plane"] = ""
        group = ref.group
        if isinstance(group, GpuGroup):
            gtype, count, _, speed, nvswitch = group_hardware(group)
            info = GPU_TYPES[gtype]
            branch = group.driver_branch or site.nvidia.driver_branch or info.default_driver_branch
            gpu = Gpu(gtype, info.product, info.arch, count, nvswitch, branch)
            model = group.model
            labels |= {
                f"{LABEL_PREFIX}/gpu-type": gtype,
                f"{LABEL_PREFIX}/gpu-arch": info.arch,
                f"{LABEL_PREFIX}/model": group.model,
                f"{LABEL_PREFIX}/driver-branch": str(branch),
            }
            taints.append(GPU_TAINT)
            su, rails = self.rails(ref, group, speed)
            if su is not None:
                labels[f"{LABEL_PREFIX}/scalable-unit"] = str(su)
                labels[f"{LABEL_PREFIX}/rails"] = str(len(rails))
        labels |= group.labels | ref.spec.labels
        taints.extend(NodeTaint.of(t) for t in (*group.taints, *ref.spec.taints))
        return Node(
            name=ref.name,
            fqdn=f"{ref.name}.{site.domain}",
            role=ref.role,
            group=ref.group_name,
            index=ref.index,
            path=f"{ref.path}.nodes[{ref.index}]",
            model=model,
            gpu=gpu,
            scalable_unit=su,
            bmc=bmc,
            management=management,
            storage=storage,
            rails=rails,
            labels=labels,
            taints=tuple(taints),
        )

    # -- switches
    def link(self, a: tuple[str, str, int], b: tuple[str, str, int], speed: int) -> None:
        """A fabric link between (switch, port, ASN) a and b: a cable, a BGP neighbour each side, a /31."""
        local, peer = IPv4Address(self.p2p_next), IPv4Address(self.p2p_next + 1)
        self.p2p_next += 2
        self.neighbors.setdefault(a[0], []).append(BgpNeighbor(a[1], b[0], b[1], b[2], f"{local}/31", f"{peer}/31"))
        self.neighbors.setdefault(b[0], []).append(BgpNeighbor(b[1], a[0], a[1], a[2], f"{peer}/31", f"{local}/31"))
        self.cables.append(Cable("fabric", a[0], a[1], b[0], b[1], speed))

    def fabric_links(self) -> dict[str, int]:
        """Cable the leaves to the spines (or to each other without spines); returns each switch's ASN."""
        sw, fab, layout = self.site.switches, self.site.fabric, self.layout
        leaves, spines = sw.leaves, sw.spines
        spine_names = spines.switch_names()
        asn = {name: fab.asn_base + 1 + i for i, name in enumerate(self.leaf_names)}
        asn |= dict.fromkeys(spine_names, fab.asn_base)
        speed = min(leaves.speed_gbps, spines.speed_gbps) if spines.count else leaves.speed_gbps
        up = fab.uplinks_per_spine
        first_uplink = leaves.ports - layout.uplinks(len(self.leaf_names)) + 1

        def leaf_port(n: int) -> str:
            return port_name(leaves.os, first_uplink + n, leaves.speed_gbps)

        for li, leaf in enumerate(self.leaf_names):
            if spines.count:
                for si, spine in enumerate(spine_names):
                    for u in range(up):
                        spine_port = port_name(spines.os, li * up + u + 1, spines.speed_gbps)
                        self.link((leaf, leaf_port(si * up + u), asn[leaf]), (spine, spine_port, asn[spine]), speed)
            else:
                # No spines: the leaves mesh directly, each pair joined by uplinks_per_spine links.
                for lj in range(li + 1, len(self.leaf_names)):
                    other = self.leaf_names[lj]
                    for u in range(up):
                        a = (leaf, leaf_port((lj - 1) * up + u), asn[leaf])
                        self.link(a, (other, leaf_port(li * up + u), asn[other]), speed)
        return asn

    def switch(self, group: SwitchGroupBase, role: str, index: int, name: str, asn: int | None) -> Switch:
        spec = group.nodes[index] if index < len(group.nodes) else SwitchSpec()
        address = (spec.management and spec.management.address) or self.oob.take()
        # Out-of-band switches are the OOB network: managed in-band on it, not cabled into themselves.
        slot = self.oob_slots.take() if role != "oob" else None
        if slot:
            self.cables.append(Cable("switch-management", name, "eth0", *slot, self.oob_slots.speed))
        su: int | None = None
        subnets: list[HostSubnet] = []
        if role == "leaf" and self.layout.rails:
            su, in_su = divmod(index, self.layout.leaves_per_su)
            if su < self.layout.scalable_units:
                for r in self.layout.rails_of_leaf(in_su):
                    block = _rail_block(self.site.networks.rails[r], self.block_prefix, su)
                    ports = tuple(self.host_ports.get((index, r), ()))
                    subnets.append(HostSubnet(r, str(block), str(block.network_address + 1), ports))
        return Switch(
            name=name,
            role=role,
            os=group.os,
            model=group.model,
            ports=group.ports,
            speed_gbps=group.speed_gbps,
            management_address=str(address),
            management_prefix=self.site.networks.oob.prefixlen,
            asn=asn,
            loopback=f"{self.loopbacks.take()}/32" if role in ("leaf", "spine") else None,
            scalable_unit=su,
            neighbors=tuple(self.neighbors.get(name, ())),
            host_subnets=tuple(subnets),
        )

    def switches(self) -> tuple[Switch, ...]:
        sw = self.site.switches
        asn = self.fabric_links()
        out = [self.switch(sw.spines, "spine", i, n, asn[n]) for i, n in enumerate(sw.spines.switch_names())]
        out += [self.switch(sw.leaves, "leaf", i, n, asn[n]) for i, n in enumerate(self.leaf_names)]
        for group, role in ((sw.management, "management"), (sw.oob, "oob")):
            if group:
                out += [self.switch(group, role, i, n, None) for i, n in enumerate(group.switch_names())]
        return tuple(out)


def build_plan(site: Site) -> Plan:
    b = _Builder(site)
    nodes = tuple(b.node(ref) for ref in b.node_refs())
    switches = b.switches()
    nets = site.networks
    return Plan(
        site=site.name,
        domain=site.domain,
        connection=site.ansible.connection,
        ansible_user=site.ansible.user,
        ntp_servers=tuple(site.ntp_servers),
        dns_servers=tuple(str(d) for d in site.dns_servers),
        nvidia_repository=site.nvidia.repository,
        networks=NetworksPlan(
            oob=str(nets.oob),
            management=str(nets.management),
            storage=str(nets.storage),
            loopbacks=str(nets.loopbacks),
            p2p=str(nets.p2p),
            rails=tuple(str(r) for r in nets.rails),
            pods=str(nets.pods),
            services=str(nets.services),
        ),
        nodes=nodes,
        switches=switches,
        cables=tuple(b.cables),
        roce=roce_qos(site),
        kubernetes=KubernetesPlan(
            version=site.kubernetes.version,
            cni=site.kubernetes.cni,
            api_vip=str(site.control_plane.vip),
            api_port=6443,
            pod_cidr=str(nets.pods),
            service_cidr=str(nets.services),
            addons=tuple(site.kubernetes.addons),
        ),
        tenants=tuple(
            TenantPlan(t.name, f"tenant-{t.name}", t.gpu_quota, tuple(t.groups)) for t in site.kubernetes.tenants
        ),
        workloads=tuple(
            WorkloadPlan(w.name, w.kind, w.tenant, f"tenant-{w.tenant}", w.nodes, w.gpus_per_node)
            for w in site.workloads
        ),
        secrets={
            name: {
                "username": s.username,
                "env": s.password_from.env,
                "pulumi_config": s.password_from.pulumi_config,
                "vault_file": s.password_from.vault_file,
            }
            for name, s in site.secrets.items()
        },
        bmc_accounts=tuple({"secret": a.secret, "role": a.role} for a in site.oob.accounts),
        admin_users=tuple(AdminUserPlan(u.name, tuple(u.ssh_keys), u.sudo) for u in site.admin_users),
        nfs_server=site.storage_nodes.nfs_server if site.storage_nodes else "kernel",
        exports=exports(site, nodes),
    )


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
        pfc_watchdog=r.pfc_watchdog,
        switch_mtu=site.fabric.switch_mtu,
        host_mtu=site.fabric.host_mtu,
        nccl_ib_tc=tos,
        nccl_ib_gid_index=r.gid_index,
    )
