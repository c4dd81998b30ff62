"""What the lab builds for a plan: networks, containers and veth links. A pure function of the plan, so the lab
can be checked without podman, and nothing here re-derives an address, a port or a name."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from aisite.plan import FABRIC_ROLES, Node, Plan
from aisite.render.inventory import BOOT_SERVER, container_name

LABEL = "io.aisite.lab"  # value: the site name; the lab removes exactly what carries its label
ROLE_LABEL = "io.aisite.role"
HOST_LABEL = "io.aisite.host"
SPEC_LABEL = "io.aisite.spec"  # digest of how a container was started; lab up recreates it when that changes
NODE_CAPS = ("NET_ADMIN", "NET_RAW", "SYS_ADMIN")
# NFS-Ganesha serves from a storage node: it opens files by handle (DAC_READ_SEARCH) and raises its limits.
STORAGE_CAPS = (*NODE_CAPS, "DAC_READ_SEARCH", "SYS_RESOURCE")
SWITCH_CAPS = ("NET_ADMIN", "NET_RAW", "SYS_ADMIN")
# /proc/sys is read-only in a container, so the lab sets at start what fabric_frr would set on a white-box switch
# (its fabric_frr_sysctls): forwarding, and ECMP hashing on the 5-tuple so flows spread over the spines.
SWITCH_SYSCTLS = (
    "net.ipv4.ip_forward=1",
    "net.ipv6.conf.all.forwarding=1",
    "net.ipv4.fib_multipath_hash_policy=1",
    "net.ipv6.fib_multipath_hash_policy=1",
)


@dataclass(frozen=True, slots=True)
class LabNetwork:
    name: str  # podman network (podman names its bridge; `podman network inspect` tells which)
    subnet: str
    gateway: str
    mtu: int
    purpose: str  # management | storage | oob


@dataclass(frozen=True, slots=True)
class Attachment:
    network: str
    address: str
    interface: str
    # Fixed per interface, as hardware's is: a container recreated at the same address keeps its MAC, so the
    # host's neighbour entry stays right (with a new MAC the host sends to the old one until the entry expires,
    # up to ~45 s after the last exchange).
    mac: str


@dataclass(frozen=True, slots=True)
class LabContainer:
    name: str
    host: str
    role: str  # control-plane | gpu | storage | leaf | spine | super-spine
    image: str  # node | frr
    attachments: tuple[Attachment, ...]
    caps: tuple[str, ...]
    sysctls: tuple[str, ...] = ()
    # Paths on anonymous podman volumes (removed with the container): NFS exports need a file system with file
    # handles, which the container's overlay root does not have.
    volumes: tuple[str, ...] = ()
    # Host devices passed in: /dev/fuse where Ceph is mounted with ceph-fuse (the lab's kernel has no ceph module).
    devices: tuple[str, ...] = ()

    @property
    def address(self) -> str:
        """Where Ansible reaches it (the inventory's ansible_host): a node's management address, a switch's
        out-of-band one, which `lab_topology` attaches first."""
        return self.attachments[0].address


@dataclass(frozen=True, slots=True)
class LabLink:
    """A veth pair standing in for a cable between two containers."""

    a: str
    a_port: str
    a_mtu: int
    b: str
    b_port: str
    b_mtu: int
    a_address: str | None = None  # CIDR of a node's rail interface, from the plan


@dataclass(frozen=True, slots=True)
class LabBmc:
    """A BMC emulator: one container on the out-of-band network at the plan's BMC address."""

    name: str
    node: str
    protocol: str  # redfish | ipmi
    address: str
    port: int
    network: str
    credentials: str  # the secret's name in the plan
    node_address: str
    node_mac: str  # the node's management NIC, as the lab node container has it
    mac: str  # the emulator's own (see Attachment.mac)


@dataclass(frozen=True, slots=True)
class LabVm:
    """A node `aisite provision` installs, which the lab runs as a QEMU virtual machine: one container holds the
    VM, its NICs bridged onto the container's ports on the lab's networks (the container keeps no address there:
    the VM's installed system takes the node's), and its BMC (ipmi_sim on the out-of-band network, whose chassis
    control powers the VM on and off and sets its one-time boot device)."""

    bmc: LabBmc  # the emulator, as a BMC container has it; its name is the VM container's
    ports: tuple[Attachment, ...]  # the container's ports on the management (first) and storage networks
    nics: tuple[str, ...]  # the VM's NIC MACs, one per port: the boot MAC first
    memory_mb: int = 1536
    disk_gb: int = 12

    @property
    def name(self) -> str:
        return self.bmc.name

    @property
    def node(self) -> str:
        return self.bmc.node


@dataclass(frozen=True, slots=True)
class LabTopology:
    site: str
    networks: tuple[LabNetwork, ...]
    containers: tuple[LabContainer, ...]
    links: tuple[LabLink, ...]
    bmcs: tuple[LabBmc, ...] = ()
    # The nodes pull layers (gitops.pull_layers): they need ansible-core's wheels from this machine.
    pulls: bool = False
    vms: tuple[LabVm, ...] = ()

    def container(self, host: str) -> LabContainer:
        return next(c for c in self.containers if c.host == host)


def lab_mac(site: str, host: str, nic: str) -> str:
    """A locally administered unicast MAC for an emulated NIC the plan gives no MAC."""
    digest = hashlib.sha256(f"{site}/{host}/{nic}".encode()).digest()
    return ":".join(f"{b:02x}" for b in (0x02, *digest[:5]))


def _node_mac(plan: Plan, node: str, nic: str, declared: str | None) -> str:
    return declared or lab_mac(plan.site, node, nic)


def _network(plan: Plan, purpose: str, mtu: int) -> LabNetwork:
    short = {"management": "mgmt", "storage": "stor", "oob": "oob"}[purpose]
    return LabNetwork(
        name=f"aisite-{plan.site}-{short}",
        subnet=getattr(plan.networks, purpose),
        gateway=plan.networks.gateway(purpose),
        mtu=mtu,
        purpose=purpose,
    )


class LabPlanError(ValueError):
    """A plan the lab cannot emulate; the message says which node and why."""


def vm_nodes(plan: Plan) -> set[str]:
    """The nodes the lab runs as virtual machines: those `aisite provision` installs (a container cannot boot)."""
    return {t.node for t in plan.provisioning.targets} if plan.provisioning else set()


def _vm(plan: Plan, node: Node, mgmt: LabNetwork, storage: LabNetwork, oob: LabNetwork) -> LabVm:
    if node.bmc.protocol != "ipmi":
        raise LabPlanError(
            f"{node.name}: the lab runs a node to install as a VM whose BMC is ipmi_sim: give it bmc.protocol ipmi"
        )
    if node.rails:
        raise LabPlanError(f"{node.name}: the lab cables a VM on the management and storage networks only, not rails")
    name = container_name(plan, node.name)
    ports = [Attachment(mgmt.name, node.management.address, node.management.name, lab_mac(plan.site, name, "mgmt"))]
    nics = [_node_mac(plan, node.name, node.management.name, node.management.mac)]
    if node.storage:
        s = node.storage
        ports.append(Attachment(storage.name, s.address, s.name, lab_mac(plan.site, name, "stor")))
        nics.append(_node_mac(plan, node.name, s.name, s.mac))
    bmc = LabBmc(
        name=name,
        node=node.name,
        protocol="ipmi",
        address=node.bmc.address,
        port=node.bmc.port,
        network=oob.name,
        credentials=node.bmc.credentials,
        node_address=node.management.address,
        node_mac=nics[0],
        mac=_node_mac(plan, f"{node.name}-bmc", "bmc0", node.bmc.mac),
    )
    return LabVm(bmc, tuple(ports), tuple(nics))


def lab_topology(plan: Plan) -> LabTopology:
    mgmt = _network(plan, "management", 1500)
    storage = _network(plan, "storage", plan.roce.host_mtu)
    oob = _network(plan, "oob", 1500)
    containers: list[LabContainer] = []
    mgmt_mac: dict[str, str] = {}  # node -> its container's management MAC, which its BMC emulator reports
    vm_names = vm_nodes(plan)
    vms = tuple(_vm(plan, n, mgmt, storage, oob) for n in plan.nodes if n.name in vm_names)
    if plan.provisioning:
        # The site's boot server: a container on the management network at the plan's address.
        address = plan.provisioning.boot_server
        mac = lab_mac(plan.site, BOOT_SERVER, "mgmt0")
        containers.append(
            LabContainer(
                container_name(plan, BOOT_SERVER),
                BOOT_SERVER,
                "boot-server",
                "node",
                (Attachment(mgmt.name, address, "mgmt0", mac),),
                NODE_CAPS,
            )
        )
    # ceph-fuse mounts: the cluster's first monitor lays the file system out, the GPU nodes read the data sets.
    fuse: set[str] = set()
    if plan.ceph:
        fuse = {plan.ceph.monitors[0]} | ({n.name for n in plan.by_role("gpu")} if plan.ceph.gpu_client else set())
    for node in plan.nodes:
        if node.name in vm_names:
            continue
        m = node.management
        mgmt_mac[node.name] = _node_mac(plan, node.name, m.name, m.mac)
        att = [Attachment(mgmt.name, m.address, m.name, mgmt_mac[node.name])]
        if node.storage:
            s = node.storage
            att.append(Attachment(storage.name, s.address, s.name, _node_mac(plan, node.name, s.name, s.mac)))
        storage_node = node.role == "storage"
        containers.append(
            LabContainer(
                container_name(plan, node.name),
                node.name,
                node.role,
                "node",
                tuple(att),
                STORAGE_CAPS if storage_node else NODE_CAPS,
                volumes=tuple(e.path for e in plan.exports if e.server == node.name) if storage_node else (),
                devices=("/dev/fuse",) if node.name in fuse else (),
            )
        )
    for sw in plan.switches:
        if sw.role in FABRIC_ROLES:
            att = [Attachment(oob.name, sw.management_address, "eth0", lab_mac(plan.site, sw.name, "eth0"))]
            containers.append(
                LabContainer(
                    container_name(plan, sw.name), sw.name, sw.role, "frr", tuple(att), SWITCH_CAPS, SWITCH_SYSCTLS
                )
            )
    hosts = {c.host for c in containers}
    switch_hosts = {s.name for s in plan.switches}
    mtu = {h: plan.roce.switch_mtu if h in switch_hosts else plan.roce.host_mtu for h in hosts}
    rail_cidr = {(n.name, r.interface): f"{r.address}/{r.prefix}" for n in plan.nodes for r in n.rails}
    links = tuple(
        LabLink(
            container_name(plan, c.a_device),
            c.a_port,
            mtu[c.a_device],
            container_name(plan, c.b_device),
            c.b_port,
            mtu[c.b_device],
            rail_cidr.get((c.a_device, c.a_port)),
        )
        for c in plan.cables
        if c.kind in ("rail", "fabric") and c.a_device in hosts and c.b_device in hosts
    )
    bmcs = tuple(
        LabBmc(
            name=container_name(plan, f"{n.name}-bmc"),
            node=n.name,
            protocol=n.bmc.protocol,
            address=n.bmc.address,
            port=n.bmc.port,
            network=oob.name,
            credentials=n.bmc.credentials,
            node_address=n.management.address,
            node_mac=mgmt_mac[n.name],
            mac=_node_mac(plan, f"{n.name}-bmc", "bmc0", n.bmc.mac),
        )
        for n in plan.nodes
        if n.name not in vm_names
    )
    pulls = bool(plan.pulled_layers)
    return LabTopology(plan.site, (mgmt, storage, oob), tuple(containers), links, bmcs, pulls, vms)
