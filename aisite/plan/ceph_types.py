"""What the plan holds of a Ceph cluster (plan/ceph.py builds it): its daemons, OSDs, pools, tenants and clients,
and the ports its daemons listen on. Apart from the building so that plan/types.py's Plan can hold a CephPlan without
importing the code that builds it."""

from __future__ import annotations

from dataclasses import dataclass

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
