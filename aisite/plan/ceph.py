"""A Ceph cluster from the site (pure): where its daemons run, its OSDs, its pools sized in placement groups, what
each pool keeps usable and how many failures it rides out; and the checks a design must pass before anything is
installed.

Ceph's numbers used here are its own defaults (Ceph 16.2.15, `ceph-conf -D`): mon_target_pg_per_osd 100 (what the
placement groups of all pools aim at per OSD), mon_max_pg_per_osd 250 (above it a pool is refused at creation; RGW
then fails to start), osd_pool_default_size 3. A pool's placement groups follow the PG autoscaler's rule (Ceph
documentation, Placement Groups: a pool's share of its OSDs' capacity times the target per OSD, divided by the
copies or chunks each PG keeps, to the nearest power of two), never below 8 here. min_size (how many copies or
chunks must be up for I/O) is Ceph's default: size - size/2 for a replicated pool and k + min(1, m - 1) for an
erasure-coded one (src/mon/OSDMonitor.cc, prepare_pool_size), so an EC pool with m = 1 has no margin while one
failure lasts.
"""

from __future__ import annotations

import ipaddress
import math
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from aisite.errors import Problem
from aisite.model import Ceph, CephPool, Site
from aisite.plan.types import Cable, Node, TenantPlan

TARGET_PG_PER_OSD = 100
MAX_PG_PER_OSD = 250
MIN_PG = 8
# The pools RGW makes for its default zone (Ceph documentation, Ceph Object Gateway: Pools), each small: planned at
# MIN_PG PGs so that their defaults (osd_pool_default_pg_num 32 each) do not meet mon_max_pg_per_osd on small
# clusters. Object data goes to the site's own pools (its storage classes).
RGW_POOLS = (
    ".rgw.root",
    "default.rgw.control",
    "default.rgw.meta",
    "default.rgw.log",
    "default.rgw.buckets.index",
    "default.rgw.buckets.non-ec",
)
# The manager's own pool, one PG: device_health_metrics in 16.2 (pacific), renamed .mgr from 17.2 (quincy).
MGR_POOLS = {"16.2": "device_health_metrics"}
MGR_POOL = ".mgr"
ALL = "all"  # a pool with no device class spans every OSD
# Ceph's ports (Ceph documentation, Network Configuration Reference: the monitors' msgr2 3300 and v1 6789;
# Prometheus Module: server_port 9283; Ceph Object Gateway: the beast frontend's default port 7480). The role
# configures them and the platform's clients and scrapes read them, both from the plan.
MON_V2_PORT = 3300
MON_V1_PORT = 6789
MGR_METRICS_PORT = 9283
RGW_PORT = 7480
# The ports OSDs and MDSs bind, first to last (Network Configuration Reference: ms_bind_port_min 6800,
# ms_bind_port_max 7300, 16.2's defaults): the role writes them to ceph.conf, the tenants' egress opens them alone.
DAEMON_PORTS = (6800, 7300)


@dataclass(frozen=True, slots=True)
class Osd:
    id: int
    host: str
    device_class: str
    size_gb: int


@dataclass(frozen=True, slots=True)
class PoolPlan:
    name: str
    application: str  # cephfs | rgw | rbd | mgr
    kind: str  # replicated | erasure
    width: int  # copies (replicated) or k + m chunks each placement group keeps
    min_size: int
    k: int | None
    m: int | None
    failure_domain: str  # host | osd
    device_class: str  # nvme | ssd | hdd | all
    pg_num: int
    usable_gb: int  # of its share of the device class's raw capacity, after copies or coding chunks
    system: bool = False  # one Ceph makes for itself (RGW's, the manager's), planned small

    @property
    def margin(self) -> int:
        """Failures of its failure domain the pool rides out and still serves I/O."""
        return self.width - self.min_size


@dataclass(frozen=True, slots=True)
class CephTenantPlan:
    """A tenant's share of the cluster: its CephFS directory (the pool its files land in, on a RADOS namespace of
    its own) with its quota, its cephx client for that directory and namespace alone, its S3 user with its quota
    inside an RGW tenant of its own (where its bucket lives: no other tenant can create or reach it)."""

    name: str
    namespace: str
    cephfs_dir: str
    cephfs_pool: str
    cephfs_gb: int
    client: str
    s3_user: str
    s3_gb: int
    s3_bucket: str  # made by its user, so the tenant owns it; the site's lifecycle rules apply to it
    # The RADOS namespace its directory's files land in (ceph.dir.layout.pool_namespace): its key reaches no other.
    rados_namespace: str = ""
    s3_tenant: str = ""  # RGW's tenant holding its user and bucket (RGW multitenancy: a bucket namespace per tenant)


@dataclass(frozen=True, slots=True)
class CephIdentity:
    """A cephx client the cluster makes for a user outside it, with the capabilities the plan gives it (Ceph's
    `caps`: daemon type, capability). Ceph makes its key; the key goes to its user (a tenant's namespace, ceph-csi,
    the GPU nodes), never into the plan."""

    name: str  # client.NAME
    caps: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class CephClientPlan:
    """What a GPU node needs to mount the site's data sets read-only with ceph-fuse: the cluster's monitors, its
    identity (whose key the first monitor holds) and each data-set directory with where it is mounted. The nodes'
    inventory holds this alone, so that a change to pools or tenants leaves their digests as they were."""

    release: str
    fsid: str
    mon_host: str  # ceph.conf's: CephPlan's mon_addrvecs joined
    filesystem: str
    client: str
    keys_from: str  # the first monitor's node, which holds the client's key
    mounts: tuple[tuple[str, str], ...]  # (CephFS directory, mount point on the node)


@dataclass(frozen=True, slots=True)
class CephPlan:
    release: str
    fsid: str  # derived from the site's domain: the same cluster on every run
    monitors: tuple[str, ...]
    # Each monitor's address (its storage network address, else its management one) and the networks Ceph's
    # clients and daemons reach them on (public_network).
    mon_addresses: tuple[tuple[str, str], ...]
    # Every node of the cluster (monitors, managers, MDS, RGW, OSD hosts) at its address on Ceph's public network
    # (its storage interface, else its management one), where its daemons listen.
    addresses: tuple[tuple[str, str], ...]
    public_networks: tuple[str, ...]
    managers: tuple[str, ...]
    mds: tuple[str, ...]
    rgw: tuple[str, ...]
    osds: tuple[Osd, ...]
    osd_memory_target_mib: int
    pools: tuple[PoolPlan, ...]
    raw_gb: dict[str, int]  # per device class
    pgs_per_osd: dict[str, int]  # per device class: the placement groups each OSD carries, all pools together
    filesystem: str | None
    fs_metadata_pool: str | None
    fs_data_pool: str | None
    fs_layouts: tuple[tuple[str, str], ...]  # (directory, pool)
    s3_classes: tuple[tuple[str, str], ...]  # (storage class, pool)
    s3_lifecycle: tuple[tuple[str, int, str], ...]  # (prefix, days, storage class)
    # What the storage network gives it, from the plan's cables (0 where a node's storage port is not cabled in the
    # plan, as in the lab): the storage nodes' ports together, and each GPU node's (the slowest).
    serve_gbps: int = 0
    clients: int = 0
    client_gbps: int = 0
    storage_switches: tuple[str, ...] = ()  # where the storage ports land (the in-band management switches today)
    tenants: tuple[CephTenantPlan, ...] = ()
    mon_v2_port: int = MON_V2_PORT
    mon_v1_port: int = MON_V1_PORT
    mgr_metrics_port: int = MGR_METRICS_PORT
    rgw_port: int = RGW_PORT
    daemon_ports: tuple[int, int] = DAEMON_PORTS
    # Each monitor's address vector (msgr2, then v1), in monitor order: the monitor map's and ceph.conf's mon_host.
    mon_addrvecs: tuple[str, ...] = ()
    s3_endpoint: str = ""  # the first RGW's (http://ADDRESS:PORT), where the tenants' buckets are made
    identities: tuple[CephIdentity, ...] = ()
    gpu_client: CephClientPlan | None = None  # where the file system has data sets for the GPU nodes to read
    # (directory, RADOS namespace) each directory's files land in (ceph.dir.layout.pool_namespace): every data
    # set's on DATASETS_NAMESPACE, every tenant's on its own.
    fs_namespaces: tuple[tuple[str, str], ...] = ()


def min_size(pool: CephPool) -> int:
    if pool.kind == "erasure":
        assert pool.k is not None and pool.m is not None
        return pool.k + min(1, pool.m - 1)
    size = pool.size or 3
    return size - size // 2


def width(pool: CephPool) -> int:
    return (pool.k or 0) + (pool.m or 0) if pool.kind == "erasure" else pool.size or 3


def _power_of_two(x: float) -> int:
    """The nearest power of two, at least MIN_PG."""
    if x <= MIN_PG:
        return MIN_PG
    low = 1 << math.floor(math.log2(x))
    return low * 2 if x - low > low * 2 - x else low


def osds(site: Site) -> tuple[Osd, ...]:
    """An OSD per disk of each storage node, its device class the disk's tier, numbered node by node."""
    group = site.storage_nodes
    if group is None:
        return ()
    out: list[Osd] = []
    for host in group.node_names():
        for disk in group.disks:
            out += [Osd(len(out) + i, host, disk.tier, disk.size_gb) for i in range(disk.count)]
    return tuple(out)


def _domains(all_osds: Iterable[Osd], device_class: str, failure_domain: str) -> int:
    chosen = [o for o in all_osds if device_class in (ALL, o.device_class)]
    return len({o.host for o in chosen}) if failure_domain == "host" else len(chosen)


def _pool_plans(ceph: Ceph, all_osds: tuple[Osd, ...]) -> tuple[PoolPlan, ...]:
    raw = _raw(all_osds)
    out = []
    for p in ceph.pools:
        cls = p.device_class or ALL
        members = [o for o in all_osds if cls in (ALL, o.device_class)]
        w = width(p)
        pg = _power_of_two(TARGET_PG_PER_OSD * len(members) * p.share / 100 / w) if members else MIN_PG
        efficiency = (p.k or 0) / w if p.kind == "erasure" else 1 / w
        out.append(
            PoolPlan(
                p.name,
                p.application,
                p.kind,
                w,
                min_size(p),
                p.k,
                p.m,
                p.failure_domain,
                cls,
                pg,
                int(raw.get(cls, 0) * p.share / 100 * efficiency),
            )
        )
    # Three copies on three hosts; on fewer hosts (a lab), on three OSDs: Ceph refuses a pool of one copy
    # (mon_allow_pool_size_one) and a pool of two on two hosts stops at the first failure.
    hosts = len({o.host for o in all_osds})
    domain = "host" if hosts >= 3 else "osd"
    small = max(1, min(3, hosts if domain == "host" else len(all_osds)))
    mgr = MGR_POOLS.get(ceph.release, MGR_POOL)
    system = [(mgr, "mgr", 1)] + ([(n, "rgw", MIN_PG) for n in RGW_POOLS] if ceph.s3 else [])
    for name, app, pg in system:
        out.append(PoolPlan(name, app, "replicated", small, small - small // 2, None, None, domain, ALL, pg, 0, True))
    return tuple(out)


def _raw(all_osds: Iterable[Osd]) -> dict[str, int]:
    raw: dict[str, int] = {}
    for o in all_osds:
        raw[o.device_class] = raw.get(o.device_class, 0) + o.size_gb
        raw[ALL] = raw.get(ALL, 0) + o.size_gb
    return raw


def _pgs_per_osd(pools: Iterable[PoolPlan], all_osds: tuple[Osd, ...]) -> dict[str, int]:
    """Per device class, the placement-group copies an OSD of it carries (each pool's PGs times their width,
    spread over the OSDs the pool may use)."""
    load: dict[int, float] = {o.id: 0.0 for o in all_osds}
    for p in pools:
        members = [o for o in all_osds if p.device_class in (ALL, o.device_class)]
        for o in members:
            load[o.id] += p.pg_num * p.width / len(members)
    out: dict[str, int] = {}
    for o in all_osds:
        out[o.device_class] = max(out.get(o.device_class, 0), math.ceil(load[o.id]))
    return out


TENANTS_DIR = "/tenants"
# The RADOS namespace the data sets' files land in (each data-set directory's layout), the only one of their pools
# the GPU nodes' key reads; a tenant's files land in a namespace of its own (its Kubernetes namespace's name).
DATASETS_NAMESPACE = "datasets"
# Where a GPU node mounts a data-set directory of the file system (NFS exports go to /mnt/EXPORT).
CLIENT_MOUNT_ROOT = "/mnt/ceph"
GPU_CLIENT = "client.gpu-nodes"
# ceph-csi's own identities (ceph-csi, docs/capabilities.md: RBD's and CephFS's provisioner and node users; CephFS's
# volumes under its subvolume group `csi`, /volumes/csi).
CSI_RBD, CSI_CEPHFS = "client.csi-rbd", "client.csi-cephfs"


def tenant_pool(ceph: Ceph, directory: str) -> str:
    """The pool a directory's files land in: the layout of its nearest ancestor (or itself), else the first data
    pool (CephFS layouts are inherited by what is created below a directory)."""
    assert ceph.filesystem is not None
    fs = ceph.filesystem
    above = [d for d in fs.layouts if directory == d or directory.startswith(d.rstrip("/") + "/")]
    return fs.layouts[max(above, key=len)] if above else fs.data_pool


def _tenant_dir(ceph: Ceph, name: str) -> str:
    """The tenant's CephFS directory ("" where it asks for none, or there is no file system)."""
    return f"{TENANTS_DIR}/{name}" if ceph.filesystem and ceph.tenants[name].cephfs_gb else ""


def rgw_tenant(namespace: str) -> str:
    """The RGW tenant of a Kubernetes namespace: RGW takes letters, digits and '_' alone in a tenant's name
    (radosgw-admin: "only alphanumeric and _ characters are allowed"), and a namespace has no '_' of its own, so
    no two namespaces share one."""
    return namespace.replace("-", "_")


def _tenants(ceph: Ceph, namespaces: Mapping[str, str]) -> tuple[CephTenantPlan, ...]:
    """Each tenant's share, its Ceph identities named after its namespace (the plan's tenants'), where its Secrets
    go."""
    out = []
    for name, t in sorted(ceph.tenants.items()):
        directory, ns = _tenant_dir(ceph, name), namespaces[name]
        s3 = bool(ceph.s3 and t.s3_gb)
        pool = tenant_pool(ceph, directory) if directory else ""
        out.append(
            CephTenantPlan(
                name,
                ns,
                directory,
                pool,
                t.cephfs_gb,
                f"client.{ns}" if directory else "",
                ns if s3 else "",
                t.s3_gb,
                ns if s3 else "",
                ns if directory else "",
                rgw_tenant(ns) if s3 else "",
            )
        )
    return tuple(out)


def data_sets(ceph: Ceph) -> tuple[str, ...]:
    """The file system's data-set directories: those the plan lays out on a pool of their own, less the tenants'
    tree (one tenant's files are not for every GPU node to read)."""
    if ceph.filesystem is None:
        return ()
    inside = TENANTS_DIR + "/"
    return tuple(sorted(d for d in ceph.filesystem.layouts if d != TENANTS_DIR and not d.startswith(inside)))


def _identities(ceph: Ceph, tenants: tuple[CephTenantPlan, ...], sets: tuple[str, ...]) -> tuple[CephIdentity, ...]:
    """Each tenant's client for its directory and its RADOS namespace alone, ceph-csi's users and the GPU nodes'
    read-only one for the data sets' namespace alone.

    The MDS's `path=` limits the file hierarchy, not the objects: Ceph's documentation (CephFS client capabilities)
    says a client can still reach file data in RADOS directly. `ceph fs authorize`'s own OSD capability (`tag cephfs
    data=FS`) covers every data pool whole, so a tenant key made that way reads and writes every tenant's files and
    the data sets with `rados`. Here each key's OSD capability names a pool and a namespace (`allow rw pool=P
    namespace=NS`), which the OSDs enforce on every object."""
    out = []
    fs = ceph.filesystem
    if fs:
        mon, data = f"allow r fsname={fs.name}", f"tag cephfs data={fs.name}"
        for t in tenants:
            if t.client:
                mds = f"allow rw fsname={fs.name} path={t.cephfs_dir}"
                osd = f"allow rw pool={t.cephfs_pool} namespace={t.rados_namespace}"
                out.append(CephIdentity(t.client, (("mds", mds), ("mon", mon), ("osd", osd))))
        out.append(
            CephIdentity(
                CSI_CEPHFS,
                (
                    ("mds", f"allow r fsname={fs.name} path=/volumes, allow rws fsname={fs.name} path=/volumes/csi"),
                    ("mgr", "allow rw"),
                    ("mon", mon),
                    ("osd", f"allow rw tag cephfs metadata={fs.name}, allow rw {data}"),
                ),
            )
        )
        if sets:
            mds = ", ".join(f"allow r fsname={fs.name} path={d}" for d in sets)
            pools = sorted({tenant_pool(ceph, d) for d in sets})
            osd = ", ".join(f"allow r pool={p} namespace={DATASETS_NAMESPACE}" for p in pools)
            out.append(CephIdentity(GPU_CLIENT, (("mds", mds), ("mon", mon), ("osd", osd))))
    rbd = ", ".join(f"profile rbd pool={p.name}" for p in ceph.pools if p.application == "rbd")
    if rbd:
        out.append(CephIdentity(CSI_RBD, (("mgr", rbd), ("mon", "profile rbd"), ("osd", rbd))))
    return tuple(sorted(out, key=lambda i: i.name))


def ceph_plan(
    site: Site, nodes: tuple[Node, ...], cables: Iterable[Cable] = (), tenants: Iterable[TenantPlan] = ()
) -> CephPlan | None:
    group = site.storage_nodes
    if group is None or group.ceph is None:
        return None
    ceph = group.ceph
    storage = tuple(n.name for n in nodes if n.role == "storage")
    control_plane = tuple(n.name for n in nodes if n.role == "control-plane")
    all_osds = osds(site)
    pools = _pool_plans(ceph, all_osds)
    monitors = (control_plane if ceph.monitors == "control-plane" else storage)[:3]
    by_name = {n.name: n for n in nodes}
    interfaces = [by_name[m].storage or by_name[m].management for m in monitors]
    mds, rgw = (storage[:2] if ceph.filesystem else ()), (storage if ceph.s3 else ())
    members = [n.name for n in nodes if n.name in {*monitors, *mds, *rgw, *(o.host for o in all_osds)}]
    fs = ceph.filesystem
    ports = {c.a_device: c for c in cables if c.kind == "storage"}
    gpus = [n.name for n in nodes if n.role == "gpu"]
    fsid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"ceph.{site.name}.{site.domain}"))
    mon_addresses = tuple((m, i.address) for m, i in zip(monitors, interfaces, strict=True))
    by_address = {n: (by_name[n].storage or by_name[n].management).address for n in members}
    # The model's networks are IPv4: an address goes before a port as it is.
    addrvecs = tuple(f"[v2:{a}:{MON_V2_PORT},v1:{a}:{MON_V1_PORT}]" for _, a in mon_addresses)
    sets = data_sets(ceph)
    planned_tenants = _tenants(ceph, {t.name: t.namespace for t in tenants})
    return CephPlan(
        release=ceph.release,
        fsid=fsid,
        monitors=monitors,
        mon_addresses=mon_addresses,
        addresses=tuple(by_address.items()),
        public_networks=tuple(
            sorted({str(ipaddress.ip_interface(f"{i.address}/{i.prefix}").network) for i in interfaces})
        ),
        managers=monitors[:2],
        mds=mds,
        rgw=rgw,
        osds=all_osds,
        osd_memory_target_mib=ceph.osd_memory_target_mib,
        pools=pools,
        raw_gb={k: v for k, v in _raw(all_osds).items() if k != ALL},
        pgs_per_osd=_pgs_per_osd(pools, all_osds),
        filesystem=fs.name if fs else None,
        fs_metadata_pool=fs.metadata_pool if fs else None,
        fs_data_pool=fs.data_pool if fs else None,
        fs_layouts=tuple(sorted(fs.layouts.items())) if fs else (),
        s3_classes=tuple(sorted(ceph.s3.storage_classes.items())) if ceph.s3 else (),
        s3_lifecycle=tuple((r.prefix, r.days, r.storage_class) for r in ceph.s3.lifecycle) if ceph.s3 else (),
        serve_gbps=sum(ports[n].speed_gbps for n in storage if n in ports),
        clients=len(gpus),
        client_gbps=min((ports[n].speed_gbps for n in gpus if n in ports), default=0),
        storage_switches=tuple(sorted({c.b_device for c in ports.values()})),
        tenants=planned_tenants,
        mon_addrvecs=addrvecs,
        s3_endpoint=f"http://{by_address[rgw[0]]}:{RGW_PORT}" if rgw else "",
        identities=_identities(ceph, planned_tenants, sets),
        fs_namespaces=tuple(
            sorted(
                [(d, DATASETS_NAMESPACE) for d in sets]
                + [(t.cephfs_dir, t.rados_namespace) for t in planned_tenants if t.cephfs_dir]
            )
        ),
        gpu_client=CephClientPlan(
            ceph.release,
            fsid,
            ",".join(addrvecs),
            fs.name,
            GPU_CLIENT,
            monitors[0],
            tuple((d, CLIENT_MOUNT_ROOT + d) for d in sets),
        )
        if fs and sets and gpus
        else None,
    )


# ------------------------------------------------------------------------------------------------ checks
def _check_pools(ceph: Ceph, all_osds: tuple[Osd, ...], classes: set[str], out: list[Problem]) -> None:
    base = "site.storage_nodes.ceph.pools"
    seen: dict[str, int] = {}
    shares: dict[str, int] = {}
    for i, p in enumerate(ceph.pools):
        path = f"{base}[{i}]"
        if p.name in seen:
            out.append(Problem(f"{path}.name", f"{p.name!r} is already pools[{seen[p.name]}]"))
        elif p.name in (MGR_POOL, *MGR_POOLS.values(), *RGW_POOLS):
            out.append(Problem(f"{path}.name", f"{p.name!r} is a pool Ceph makes for itself"))
        seen.setdefault(p.name, i)
        if p.device_class is not None and p.device_class not in classes:
            have = ", ".join(sorted(classes)) or "none"
            out.append(Problem(f"{path}.device_class", f"no storage disk is {p.device_class} (disks: {have})"))
            continue
        cls = p.device_class or ALL
        shares[cls] = shares.get(cls, 0) + p.share
        need, have_domains = width(p), _domains(all_osds, cls, p.failure_domain)
        if have_domains < need:
            what = ("storage nodes with " if p.failure_domain == "host" else "") + ("" if cls == ALL else f"{cls} ")
            out.append(
                Problem(
                    path,
                    f"{p.kind} {'k+m' if p.kind == 'erasure' else 'size'} {need} needs {need} failure domains "
                    f"({p.failure_domain}); the site has {have_domains} {what}OSDs",
                )
            )
    for cls, total in sorted(shares.items()):
        if total > 100:
            out.append(Problem(base, f"the pools on {cls} OSDs share {total}% of their capacity, over 100%"))


def _check_filesystem(ceph: Ceph, pools: dict[str, CephPool], out: list[Problem]) -> None:
    fs = ceph.filesystem
    if fs is None:
        return
    base = "site.storage_nodes.ceph.filesystem"

    def pool(path: str, name: str, replicated: bool, why: str = "") -> None:
        p = pools.get(name)
        if p is None:
            out.append(Problem(path, f"no pool {name!r} under site.storage_nodes.ceph.pools"))
        elif p.application != "cephfs":
            out.append(Problem(path, f"pool {name!r} is for {p.application}, not cephfs"))
        elif replicated and p.kind != "replicated":
            out.append(Problem(path, f"pool {name!r} is erasure-coded: {why}"))

    pool(f"{base}.metadata_pool", fs.metadata_pool, True, "metadata needs a replicated pool")
    pool(
        f"{base}.data_pool",
        fs.data_pool,
        True,
        "the first data pool keeps every file's backtrace and must be replicated (put EC pools in layouts)",
    )
    if fs.data_pool == fs.metadata_pool:
        out.append(Problem(f"{base}.data_pool", "the data pool must not be the metadata pool"))
    for directory, name in fs.layouts.items():
        pool(f"{base}.layouts.{directory}", name, False)
        if name == fs.metadata_pool:
            out.append(Problem(f"{base}.layouts.{directory}", "files cannot go to the metadata pool"))


def _check_s3(ceph: Ceph, pools: dict[str, CephPool], out: list[Problem]) -> None:
    s3 = ceph.s3
    if s3 is None:
        return
    base = "site.storage_nodes.ceph.s3"
    if "STANDARD" not in s3.storage_classes:
        out.append(Problem(f"{base}.storage_classes", "STANDARD is missing: it is where objects land"))
    for cls, name in s3.storage_classes.items():
        path = f"{base}.storage_classes.{cls}"
        p = pools.get(name)
        if p is None:
            out.append(
                Problem(f"{base}.storage_classes.{cls}", f"no pool {name!r} under site.storage_nodes.ceph.pools")
            )
        elif p.application != "rgw":
            out.append(Problem(f"{base}.storage_classes.{cls}", f"pool {name!r} is for {p.application}, not rgw"))
    for i, rule in enumerate(s3.lifecycle):
        path = f"{base}.lifecycle[{i}].storage_class"
        if rule.storage_class not in s3.storage_classes:
            out.append(Problem(path, f"{rule.storage_class} is not one of storage_classes"))
        elif rule.storage_class == "STANDARD":
            out.append(Problem(path, "objects land in STANDARD: a transition goes to another class"))


def _check_tenants(site: Site, ceph: Ceph, out: list[Problem]) -> None:
    """Each tenant declared, asking only for what the cluster has."""
    base = "site.storage_nodes.ceph.tenants"
    declared = {t.name for t in site.kubernetes.tenants}
    for name, t in ceph.tenants.items():
        if name not in declared:
            out.append(Problem(f"{base}.{name}", f"tenant {name!r} is not declared under site.kubernetes.tenants"))
        if t.cephfs_gb and ceph.filesystem is None:
            out.append(Problem(f"{base}.{name}.cephfs_gb", "the cluster has no file system (ceph.filesystem)"))
        if t.s3_gb and ceph.s3 is None:
            out.append(Problem(f"{base}.{name}.s3_gb", "the cluster has no S3 (ceph.s3)"))


def _check_capacity(ceph: Ceph, planned: tuple[PoolPlan, ...], out: list[Problem]) -> None:
    """Every pool able to hold what the tenants' quotas let land in it, after copies or coding chunks."""
    base = "site.storage_nodes.ceph.tenants"
    usable = {p.name: p.usable_gb for p in planned}
    asked: dict[str, int] = {}
    for name, t in ceph.tenants.items():
        if directory := _tenant_dir(ceph, name):
            pool = tenant_pool(ceph, directory)
            asked[pool] = asked.get(pool, 0) + t.cephfs_gb
    for pool, gb in sorted(asked.items()):
        if gb > usable[pool]:
            out.append(
                Problem(base, f"tenants ask {gb} GB of CephFS in {pool}, which holds {usable[pool]} GB after copies")
            )
    if ceph.s3:
        s3 = sum(t.s3_gb for t in ceph.tenants.values())
        room = sum(usable[p] for p in set(ceph.s3.storage_classes.values()))
        if s3 > room:
            out.append(Problem(base, f"tenants ask {s3} GB of S3; its storage classes' pools hold {room} GB"))


def ceph_problems(site: Site) -> list[Problem]:
    """Every problem of the site's Ceph design, each at its path."""
    group = site.storage_nodes
    if group is None or group.ceph is None:
        return []
    ceph = group.ceph
    out: list[Problem] = []
    base = "site.storage_nodes.ceph"
    if ceph.monitors == "storage" and group.size < 3:
        out.append(
            Problem(
                f"{base}.monitors",
                f"Ceph's monitors need a majority of three nodes; the site has {group.size} storage node(s): "
                "put them on the control plane (monitors: control-plane) or add storage nodes",
            )
        )
    if ceph.monitors == "control-plane" and site.control_plane.size < 3:
        out.append(
            Problem(
                f"{base}.monitors",
                f"Ceph's monitors need a majority of three nodes; the control plane has {site.control_plane.size}",
            )
        )
    if site.gitops and "hosts" in site.gitops.pull_layers:
        # roles/ceph runs steps once for the cluster from its first monitor (keys, pools): no node can apply it alone.
        out.append(
            Problem(
                "site.gitops.pull_layers",
                "the hosts layer installs Ceph across its nodes from the first monitor (keys, pools): a node cannot "
                "pull it alone; pull only the cluster layer on a site with storage_nodes.ceph",
            )
        )
    if not group.disks:
        out.append(Problem("site.storage_nodes.disks", "a Ceph cluster needs disks for its OSDs"))
    all_osds = osds(site)
    _check_pools(ceph, all_osds, {d.tier for d in group.disks}, out)
    pools = {p.name: p for p in ceph.pools}
    _check_filesystem(ceph, pools, out)
    _check_s3(ceph, pools, out)
    _check_tenants(site, ceph, out)
    planned = _pool_plans(ceph, all_osds) if not out else ()
    if planned:  # the pools are sound: what lands in them, and what they weigh on each OSD
        _check_capacity(ceph, planned, out)
    if not out and all_osds:
        for cls, n in sorted(_pgs_per_osd(planned, all_osds).items()):
            if n > MAX_PG_PER_OSD:
                out.append(
                    Problem(
                        f"{base}.pools",
                        f"{n} placement groups per {cls} OSD, over Ceph's mon_max_pg_per_osd {MAX_PG_PER_OSD}: "
                        "pools would be refused; lower their shares or add OSDs",
                    )
                )
    return out
