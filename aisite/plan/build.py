"""Building the plan: one walk over the site in declaration order, handing out addresses and ports."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

from aisite.catalog import (
    CDMM_GPU_TYPES,
    CUDA_REPO_ARCH,
    GPU_TYPES,
    MACHINE,
    NIC_ETH,
    NIC_LINK_TYPE,
    NIC_NUM_OF_VFS,
    NIC_SRIOV_EN,
    NVLSM_MODELS,
    SERVER_MODELS,
    NicPort,
)
from aisite.drivers.bmcs import BMC_PROTOCOLS
from aisite.model import (
    AccessSwitchGroup,
    Firmware,
    GpuGroup,
    NodeGroup,
    NodeSpec,
    Site,
    SwitchGroupBase,
    SwitchSpec,
    compute_ports,
    group_cpu_arch,
    group_hardware,
    group_os,
    group_racks,
)
from aisite.plan.acceptance import acceptance_plan
from aisite.plan.ceph import ceph_plan
from aisite.plan.fabric import (
    fabric_bfd,
    fabric_layout,
    group_rails,
    panel,
    platform_mode,
    pod_network_name,
    pod_pool_name,
    rail_block,
    rail_block_prefix,
    rail_host_address,
    roce_qos,
    switch_port,
)
from aisite.plan.kubernetes import kubernetes_plan, tenant_plans, workload_plans
from aisite.plan.pools import Pool, explicit_addresses, reserved_addresses
from aisite.plan.power import power_racks
from aisite.plan.provisioning import provisioning_plan
from aisite.plan.serving import serving_plans
from aisite.plan.types import (
    FABRIC_ROLES,
    GPU_TAINT,
    LABEL_PREFIX,
    RAIL_TABLE_BASE,
    AccessPort,
    AdminUserPlan,
    BgpNeighbor,
    Bmc,
    Cable,
    ExportPlan,
    FirmwareBaseline,
    GitopsPlan,
    Gpu,
    HealthPlan,
    HostSubnet,
    Interface,
    MaintenancePlan,
    NetworksPlan,
    NicConfig,
    Node,
    NodeOsPlan,
    NodeTaint,
    Plan,
    RackPlan,
    Rail,
    ReservedAddress,
    Switch,
)


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


@dataclass(slots=True)
class _Slots:
    """Fills the ports of a group of access switches in order, spilling to the next switch when one is full."""

    group: AccessSwitchGroup | None
    used: int = 0
    names: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.names = self.group.switch_names() if self.group else []

    @property
    def speed(self) -> int:
        return self.group.speed_gbps if self.group else 0

    def take(self) -> tuple[str, str] | None:
        if self.group is None or not self.names:
            return None
        switch, port = divmod(self.used, self.group.ports)
        self.used += 1
        if switch >= len(self.names):
            raise ValueError(f"access switches {self.names} have no free port")
        return self.names[switch], switch_port(self.group, port + 1)


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


def _firmware(spec: Firmware | None) -> FirmwareBaseline | None:
    if spec is None:
        return None
    image = spec.bios_firmware
    return FirmwareBaseline(
        tuple(sorted(spec.bios.items())),
        image.version if image else None,
        image.image if image else None,
        image.sha256 if image else None,
    )


def _nics(rails: tuple[Rail, ...], spec: Firmware | None) -> tuple[NicConfig, ...]:
    """Per rail NIC the plan knows by PCI function, its firmware settings: Ethernet on each rail's port, and the
    model's SR-IOV settings (aisite.catalog)."""
    extra: dict[str, int] = {}
    if spec is not None and spec.nic is not None:
        if spec.nic.sriov is not None:
            extra[NIC_SRIOV_EN] = int(spec.nic.sriov)
        if spec.nic.num_vfs is not None:
            extra[NIC_NUM_OF_VFS] = spec.nic.num_vfs
    devices: dict[str, tuple[dict[str, int], list[str]]] = {}
    for r in rails:
        if not r.pci:
            continue
        device, function = r.pci.rsplit(".", 1)
        settings, names = devices.setdefault(f"{device}.0", (dict(extra), []))
        settings[NIC_LINK_TYPE.format(port=int(function, 16) + 1)] = NIC_ETH
        names.append(r.interface)
    return tuple(NicConfig(pci, tuple(sorted(s.items())), tuple(n)) for pci, (s, n) in sorted(devices.items()))


def _dotted(address: int) -> str:
    """str(IPv4Address(address)), several times faster: a 32,768-GPU fabric has 131,072 link addresses."""
    return f"{address >> 24}.{(address >> 16) & 255}.{(address >> 8) & 255}.{address & 255}"


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
        self.mgmt_slots = _Slots(site.switches.management)
        self.oob_slots = _Slots(site.switches.oob)
        self.leaf_names = site.switches.leaves.switch_names()
        self.block_prefix = rail_block_prefix(site.fabric.scalable_unit, site.fabric.rail_pod_addresses)
        self.host_ports: dict[tuple[int, int], list[str]] = {}  # (leaf index, rail) -> node-facing ports
        self.host_peers: dict[tuple[int, int], list[str]] = {}  # the same ports' far ends
        self.neighbors: dict[str, list[BgpNeighbor]] = {}
        self.cables: list[Cable] = []
        self.gpu_position = 0  # position among GPU nodes on the fabric: fixes scalable unit and leaf port
        self.racks: dict[str, list[str]] = {}  # GPU group -> the rack of each of its nodes

    def rack_of(self, group: GpuGroup, index: int) -> str | None:
        """The rack the group's node `index` is in; None for a model without racks (or a node past them, which the
        checks refuse)."""
        if group.name not in self.racks:
            self.racks[group.name] = [name for name, _, trays in group_racks(group) for _ in range(trays)]
        racks = self.racks[group.name]
        return racks[index] if index < len(racks) else None

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
        port = (spec and spec.port) or (gspec and gspec.port) or BMC_PROTOCOLS[protocol].port
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
        nics = compute_ports(group)
        pods = self.site.fabric.rail_pod_addresses
        pod_rails = pods > 0 and "network-operator" in self.site.kubernetes.addons
        out: list[Rail] = []
        for r in range(n_rails):
            nic = nics[r] if r < len(nics) else NicPort("")
            in_su = layout.leaf_of_rail(r)
            leaf_index = su * layout.leaves_per_su + in_su
            leaf = self.leaf_names[leaf_index]
            port_no = pos * layout.max_rails_per_leaf + (r - layout.rails_of_leaf(in_su).start) + 1
            leaf_port = switch_port(leaves, port_no)
            block = rail_block(self.site.networks.rails[r], self.block_prefix, su)
            gateway = block.network_address + 1
            out.append(
                Rail(
                    index=r,
                    interface=names[r],
                    address=str(rail_host_address(block, self.site.fabric.scalable_unit, pos, pods)),
                    prefix=self.block_prefix,
                    gateway=str(gateway),
                    subnet=str(block),
                    leaf=leaf,
                    leaf_port=leaf_port,
                    table=RAIL_TABLE_BASE + r,
                    mtu=self.site.fabric.host_mtu,
                    speed_gbps=min(nic_speed, leaves.speed_gbps),
                    port=nic.label,
                    netdev=nic.netdev,
                    rdma=nic.rdma,
                    pci=nic.pci,
                    gpu=nic.gpu,
                    pod_network=pod_network_name(r) if pod_rails else "",
                    pod_pool=pod_pool_name(r, su) if pod_rails else "",
                )
            )
            self.host_ports.setdefault((leaf_index, r), []).append(leaf_port)
            label = f" ({nic.label})" if nic.label else ""
            self.host_peers.setdefault((leaf_index, r), []).append(f"{ref.name}:{names[r]}{label}")
            self.cables.append(
                Cable(
                    "rail",
                    ref.name,
                    names[r],
                    leaf,
                    leaf_port,
                    min(nic_speed, leaves.speed_gbps),
                    nic.label or names[r],
                )
            )
        return su, tuple(out)

    def placement_labels(self, su: int) -> dict[str, str]:
        """Where a rail node sits in the fabric, as the schedulers' topology levels read it: its scalable unit,
        the block of leaves its rails cable to (named by the block's first leaf) and, in three tiers, its pod."""
        layout = self.layout
        out = {
            f"{LABEL_PREFIX}/scalable-unit": str(su),
            f"{LABEL_PREFIX}/leaf-block": self.leaf_names[su * layout.leaves_per_su],
        }
        if layout.three_tier:
            out[f"{LABEL_PREFIX}/pod"] = str(su // layout.pod_size)
        return out

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
        rack: str | None = None
        rails: tuple[Rail, ...] = ()
        model = {"control-plane": "hci", "storage": "storage"}.get(ref.role, "")
        if ref.role == "control-plane":
            labels["node-role.kubernetes.io/control-plane"] = ""
        group = ref.group
        node_os = _node_os(group)
        if isinstance(group, GpuGroup):
            gtype, count, _, speed, nvswitch = group_hardware(group)
            info = GPU_TYPES[gtype]
            branch = group.driver_branch or site.nvidia.driver_branch or info.default_driver_branch
            distro = group_os(group).cuda_distro
            repo = f"{site.nvidia.repository}{distro}/{CUDA_REPO_ARCH[node_os.arch]}/"
            nvlsm = group.model in NVLSM_MODELS
            cdmm = gtype in CDMM_GPU_TYPES
            gpu = Gpu(gtype, info.product, info.arch, count, nvswitch, branch, info.kernel_modules, repo, nvlsm, cdmm)
            model = group.model
            labels |= {
                f"{LABEL_PREFIX}/gpu-type": gtype,
                f"{LABEL_PREFIX}/gpu-arch": info.arch,
                f"{LABEL_PREFIX}/model": group.model,
                f"{LABEL_PREFIX}/driver-branch": str(branch),
            }
            taints.append(GPU_TAINT)
            rack = self.rack_of(group, ref.index)
            if rack is not None:
                labels[f"{LABEL_PREFIX}/rack"] = rack
            su, rails = self.rails(ref, group, speed)
            if su is not None:
                labels |= self.placement_labels(su)
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
            firmware=_firmware(group.firmware),
            nics=_nics(rails, group.firmware),
            rack=rack,
            os=node_os,
        )

    # -- switches
    def link(self, a: tuple[str, str, int], b: tuple[str, str, int], speed: int) -> None:
        """A fabric link between (switch, port, ASN) a and b: a cable, a BGP neighbour each side, a /31."""
        local, peer = f"{_dotted(self.p2p_next)}/31", f"{_dotted(self.p2p_next + 1)}/31"
        self.p2p_next += 2
        self.neighbors.setdefault(a[0], []).append(BgpNeighbor(a[1], b[0], b[1], b[2], local, peer))
        self.neighbors.setdefault(b[0], []).append(BgpNeighbor(b[1], a[0], a[1], a[2], peer, local))
        self.cables.append(Cable("fabric", a[0], a[1], b[0], b[1], speed))

    def fabric_links(self) -> dict[str, int]:
        """Cable the fabric's tiers; returns each switch's ASN.

        ASNs as RFC 7938 lays them out: one per leaf, one shared by the spines of each pod and one by the
        super-spines (in two tiers, by all spines), so that BGP's loop check forbids paths down and up again
        through one tier (valley-free routing) while ECMP spreads flows over every switch of the tier above."""
        sw, fab, layout = self.site.switches, self.site.fabric, self.layout
        if layout.three_tier:
            return self.three_tier_links()
        leaves, spines = sw.leaves, sw.spines
        spine_names = spines.switch_names()
        asn = {name: fab.asn_base + layout.first_leaf_asn + i for i, name in enumerate(self.leaf_names)}
        asn |= dict.fromkeys(spine_names, fab.asn_base)
        speed = min(leaves.speed_gbps, spines.speed_gbps) if spines.count else leaves.speed_gbps
        up = fab.uplinks_per_spine
        first_uplink = leaves.ports - layout.uplinks(len(self.leaf_names)) + 1

        def leaf_port(n: int) -> str:
            return switch_port(leaves, first_uplink + n)

        for li, leaf in enumerate(self.leaf_names):
            if spines.count:
                for si, spine in enumerate(spine_names):
                    for u in range(up):
                        spine_port = switch_port(spines, li * up + u + 1)
                        self.link((leaf, leaf_port(si * up + u), asn[leaf]), (spine, spine_port, asn[spine]), speed)
            else:
                # No spines: the leaves mesh directly, each pair joined by uplinks_per_spine links.
                for lj in range(li + 1, len(self.leaf_names)):
                    other = self.leaf_names[lj]
                    for u in range(up):
                        a = (leaf, leaf_port((lj - 1) * up + u), asn[leaf])
                        self.link(a, (other, leaf_port(li * up + u), asn[other]), speed)
        return asn

    def three_tier_links(self) -> dict[str, int]:
        """Leaves to their pod's spines (ports from the top of the leaf, from the bottom of the spine), then each
        spine to the super-spines of its plane (from the top of the spine, the bottom of the super-spine)."""
        sw, fab, layout = self.site.switches, self.site.fabric, self.layout
        leaves, spines, supers = sw.leaves, sw.spines, sw.super_spines
        assert supers is not None
        spine_names, super_names = spines.switch_names(), supers.switch_names()
        per_pod = layout.spines_per_pod
        asn = dict.fromkeys(super_names, fab.asn_base)
        asn |= {name: fab.asn_base + 1 + i // per_pod for i, name in enumerate(spine_names)}
        asn |= {name: fab.asn_base + layout.first_leaf_asn + i for i, name in enumerate(self.leaf_names)}
        up = fab.uplinks_per_spine
        leaf_speed = min(leaves.speed_gbps, spines.speed_gbps)
        first_uplink = leaves.ports - layout.uplinks(len(self.leaf_names)) + 1
        for li, leaf in enumerate(self.leaf_names):
            pod, local = divmod(li, layout.leaves_per_pod)
            for si in range(per_pod):
                spine = spine_names[pod * per_pod + si]
                for u in range(up):
                    leaf_port = switch_port(leaves, first_uplink + si * up + u)
                    spine_port = switch_port(spines, local * up + u + 1)
                    self.link((leaf, leaf_port, asn[leaf]), (spine, spine_port, asn[spine]), leaf_speed)
        ups = fab.uplinks_per_super_spine
        speed = min(spines.speed_gbps, supers.speed_gbps)
        first_spine_uplink = spines.ports - layout.spine_uplinks + 1
        per_plane = layout.super_spines_per_plane
        spines_in_plane = -(-per_pod // layout.planes)  # per pod, each super-spine's neighbours
        for gi, spine in enumerate(spine_names):
            pod, local = divmod(gi, per_pod)
            plane = layout.spine_plane(local)
            for k in range(per_plane):
                super_spine = super_names[k * layout.planes + plane]
                for u in range(ups):
                    spine_port = switch_port(spines, first_spine_uplink + k * ups + u)
                    slot = (pod * spines_in_plane + local // layout.planes) * ups + u + 1
                    super_port = switch_port(supers, slot)
                    self.link((spine, spine_port, asn[spine]), (super_spine, super_port, asn[super_spine]), speed)
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
                    block = rail_block(self.site.networks.rails[r], self.block_prefix, su)
                    ports = tuple(self.host_ports.get((index, r), ()))
                    peers = tuple(self.host_peers.get((index, r), ()))
                    subnets.append(HostSubnet(r, str(block), str(block.network_address + 1), ports, peers))
        front = panel(group)
        mode = platform_mode(group, front[0])
        vlans, access = self.access_ports(group, role, name)
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
            loopback=f"{self.loopbacks.take()}/32" if role in FABRIC_ROLES else None,
            scalable_unit=su,
            neighbors=tuple(self.neighbors.get(name, ())),
            host_subnets=tuple(subnets),
            os_version=group.os_version or "",
            bfd=fabric_bfd(self.site) and role in FABRIC_ROLES,
            breakout=front[0],
            cage_lanes=front[1],
            cages=-(-group.ports // front[0]),
            breakout_mode=mode[0],
            hwsku=mode[1],
            vlans=vlans,
            access_ports=access,
        )

    def access_ports(
        self, group: SwitchGroupBase, role: str, name: str
    ) -> tuple[tuple[int, ...], tuple[AccessPort, ...]]:
        """A configured management or out-of-band switch's VLANs and ports: each cable ending on it an access port
        of its network's VLAN, each uplink a trunk of them all. The nodes' cables and every other switch's
        management cable exist by now (the out-of-band switches are built last)."""
        if not isinstance(group, AccessSwitchGroup) or group.os == "generic":
            return (), ()
        v = group.vlans
        network = {"management": v.management, "storage": v.storage, "bmc": v.oob, "switch-management": v.oob}
        vlans = (v.management, v.storage) if role == "management" else (v.oob,)
        ports = [
            AccessPort(c.b_port, network[c.kind], f"{c.a_device}:{c.a_label or c.a_port}")
            for c in self.cables
            if c.b_device == name and c.kind in network
        ]
        ports += [AccessPort(u, 0, "uplink") for u in group.uplinks]
        return tuple(sorted(set(vlans))), tuple(ports)

    def switches(self) -> tuple[Switch, ...]:
        sw = self.site.switches
        asn = self.fabric_links()
        out: list[Switch] = []
        if self.layout.three_tier and sw.super_spines:
            names = sw.super_spines.switch_names()
            out += [self.switch(sw.super_spines, "super-spine", i, n, asn[n]) for i, n in enumerate(names)]
        out += [self.switch(sw.spines, "spine", i, n, asn[n]) for i, n in enumerate(sw.spines.switch_names())]
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
    tenants = tenant_plans(site)
    return Plan(
        site=site.name,
        domain=site.domain,
        connection=site.ansible.connection,
        ansible_user=site.ansible.user,
        ntp_servers=tuple(site.ntp_servers),
        dns_servers=tuple(str(d) for d in site.dns_servers),
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
        kubernetes=kubernetes_plan(site, nodes),
        tenants=tenants,
        workloads=workload_plans(site),
        serving=serving_plans(site),
        provisioning=provisioning_plan(site, nodes),
        acceptance=acceptance_plan(site, nodes, {c.speed_gbps for c in b.cables if c.kind == "rail"}),
        health=HealthPlan(**site.health.model_dump()),
        maintenance=maintenance_plan(site, nodes),
        ceph=ceph_plan(site, nodes, b.cables, tenants),
        racks=rack_plans(site, nodes),
        power_racks=power_racks(site, nodes),
        reserved=tuple(
            ReservedAddress(key, str(address), why)
            for key, address, why in reserved_addresses(
                site,
                {"management": nets.management, "oob": nets.oob, "storage": nets.storage, "loopbacks": nets.loopbacks},
            )
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
        gitops=gitops_plan(site, nodes),
    )


def rack_plans(site: Site, nodes: tuple[Node, ...]) -> tuple[RackPlan, ...]:
    by_name = {n.name: n for n in nodes}
    out = []
    for group in site.gpu_nodes:
        model = SERVER_MODELS.get(group.model)
        if model is None or not model.rack_trays:
            continue
        names = group.node_names()
        for rack, first, trays in group_racks(group):
            members = tuple(names[first : first + trays])
            out.append(
                RackPlan(
                    name=rack,
                    group=group.name,
                    model=group.model,
                    trays=members,
                    full=trays == model.rack_trays,
                    gpus=trays * model.gpus,
                    switch_trays=model.rack_switch_trays,
                    imex_peers=tuple(by_name[m].management.address for m in members if m in by_name),
                    # The GPU Operator's site installs the DRA driver with it (platform.charts.uses_dra_driver).
                    imex="pods" if "gpu-operator" in site.kubernetes.addons else "host",
                )
            )
    return tuple(out)


def gitops_plan(site: Site, nodes: tuple[Node, ...]) -> GitopsPlan | None:
    g = site.gitops
    if g is None:
        return None
    first_cp = next(n.name for n in nodes if n.role == "control-plane")
    return GitopsPlan(
        repository=g.repository,
        branch=g.branch,
        interval_seconds=g.interval_seconds,
        full_pass_seconds=g.full_pass_seconds,
        reconciler_host=g.reconciler_host or first_cp,
        allowed_signers=tuple(g.allowed_signers),
        pull_layers=tuple(dict.fromkeys(g.pull_layers)),
        pull_interval_seconds=g.pull_interval_seconds,
        pull_repository=g.pull_repository or g.repository,
        pulumi_stack=g.pulumi_stack or site.name,
        pulumi_backend=g.pulumi_backend,
        namespace=g.namespace,
        git_secret=g.git_secret,
        signers_secret=g.signers_secret,
        credentials_secret=g.credentials_secret or f"aisite-{site.name}-credentials",
    )


def maintenance_plan(site: Site, nodes: tuple[Node, ...]) -> MaintenancePlan:
    """The disruption budget in GPUs: the site's number, else its share of the GPUs, never below the largest
    node's (a share smaller than one node would keep every node in service forever)."""
    m = site.maintenance
    gpus = [n.gpu.count for n in nodes if n.gpu]
    limit = m.max_unavailable_gpus
    if limit is None:
        limit = max(max(gpus, default=0), math.floor(sum(gpus) * m.max_unavailable_fraction))
    return MaintenancePlan(limit, m.one_node_per_unit, m.canary_nodes, m.drain_timeout_s)


def _node_os(group: NodeGroup) -> NodeOsPlan:
    """The OS a group's nodes run, as the preflight checks it (install.method none: not declared)."""
    release, arch = group_os(group), group_cpu_arch(group)
    method = group.install.method if group.install else "none"
    return NodeOsPlan(release.name, release.distribution, release.codename, arch, MACHINE[arch], release.dgx, method)
