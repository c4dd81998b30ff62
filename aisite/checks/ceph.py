"""The Ceph cluster a site designs (site.ceph): pools that fit their OSDs' device classes and failure domains, a
file system and S3 on pools meant for them, tenants' directories, and the placement groups each OSD would carry."""

from __future__ import annotations

from aisite.errors import Problem
from aisite.model import Ceph, CephPool, Site
from aisite.plan.ceph import (
    ALL,
    MAX_PG_PER_OSD,
    MGR_POOL,
    MGR_POOLS,
    RGW_POOLS,
    domains,
    osds,
    pgs_per_osd,
    pool_plans,
    tenant_dir,
    tenant_pool,
    width,
)
from aisite.plan.ceph_types import Osd, PoolPlan


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
        need, have_domains = width(p), domains(all_osds, cls, p.failure_domain)
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
        if directory := tenant_dir(ceph, name):
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
    planned = pool_plans(ceph, all_osds) if not out else ()
    if planned:  # the pools are sound: what lands in them, and what they weigh on each OSD
        _check_capacity(ceph, planned, out)
    if not out and all_osds:
        for cls, n in sorted(pgs_per_osd(planned, all_osds).items()):
            if n > MAX_PG_PER_OSD:
                out.append(
                    Problem(
                        f"{base}.pools",
                        f"{n} placement groups per {cls} OSD, over Ceph's mon_max_pg_per_osd {MAX_PG_PER_OSD}: "
                        "pools would be refused; lower their shares or add OSDs",
                    )
                )
    return out
