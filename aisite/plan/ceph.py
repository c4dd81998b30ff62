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

from aisite.model import Ceph, CephPool, Site
from aisite.plan.ceph_types import (
    MON_V1_PORT,
    MON_V2_PORT,
    RGW_PORT,
    CephClientPlan,
    CephIdentity,
    CephPlan,
    CephTenantPlan,
    Osd,
    PoolPlan,
)
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


def domains(all_osds: Iterable[Osd], device_class: str, failure_domain: str) -> int:
    chosen = [o for o in all_osds if device_class in (ALL, o.device_class)]
    return len({o.host for o in chosen}) if failure_domain == "host" else len(chosen)


def pool_plans(ceph: Ceph, all_osds: tuple[Osd, ...]) -> tuple[PoolPlan, ...]:
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


def pgs_per_osd(pools: Iterable[PoolPlan], all_osds: tuple[Osd, ...]) -> dict[str, int]:
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


def tenant_dir(ceph: Ceph, name: str) -> str:
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
        directory, ns = tenant_dir(ceph, name), namespaces[name]
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
    pools = pool_plans(ceph, all_osds)
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
        pgs_per_osd=pgs_per_osd(pools, all_osds),
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
