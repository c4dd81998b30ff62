"""Storage nodes: their disks, NFS exports and the Ceph cluster's design (pools, file system, S3, tenants)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from aisite.fields import (
    AbsPath,
    NamePattern,
)
from aisite.model.base import Name, Strict
from aisite.model.nodes import NodeGroup


class Disk(Strict):
    tier: Literal["nvme", "ssd", "hdd"]  # a Ceph OSD's device class
    size_gb: Annotated[int, Field(ge=1, le=10_000_000)]
    count: Annotated[int, Field(ge=1, le=1024)] = 1


class Export(Strict):
    name: Name
    path: AbsPath
    tier: Literal["nvme", "ssd", "hdd"] = "nvme"


DeviceClass = Literal["nvme", "ssd", "hdd"]

# Ceph names a pool with letters, digits, '.', '_' and '-'; aisite keeps to lower case and a leading letter.
CephPoolName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_.-]{0,62}$")]

# An S3 storage class as RGW's placement targets name them (STANDARD, STANDARD_IA, ...).
S3StorageClass = Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]{0,31}$")]


class CephPool(Strict):
    """A pool: replicated (`size` copies) or erasure-coded (`k` data and `m` coding chunks), each copy or chunk in
    another failure domain (a storage node, or only another OSD), on the OSDs of one device class (or all)."""

    name: CephPoolName
    application: Literal["cephfs", "rgw", "rbd"]
    kind: Literal["replicated", "erasure"] = "replicated"
    size: Annotated[int, Field(ge=2, le=6)] | None = None  # replicated; 3 when not given
    k: Annotated[int, Field(ge=2, le=16)] | None = None
    m: Annotated[int, Field(ge=1, le=8)] | None = None
    failure_domain: Literal["host", "osd"] = "host"
    device_class: DeviceClass | None = None
    # The share of its device class's raw capacity the pool is expected to fill, in percent: its placement groups
    # are sized from it (Ceph's target_size_ratio) and the plan prints its usable capacity.
    share: Annotated[int, Field(ge=1, le=100)] = 10

    @model_validator(mode="after")
    def _shape(self) -> CephPool:
        if self.kind == "erasure" and (self.k is None or self.m is None):
            raise ValueError("an erasure-coded pool needs k and m")
        if self.kind == "replicated" and (self.k is not None or self.m is not None):
            raise ValueError("k and m are for erasure-coded pools; a replicated pool has size")
        if self.kind == "erasure" and self.size is not None:
            raise ValueError("size is for replicated pools; an erasure-coded pool's is k+m")
        return self


class CephFilesystem(Strict):
    """CephFS: its metadata pool, its first data pool (replicated: Ceph keeps every file's backtrace there, and
    refuses an erasure-coded one without --force) and directory layouts placing a tree's files in other pools."""

    name: Name = "data"
    metadata_pool: CephPoolName
    data_pool: CephPoolName
    layouts: Annotated[dict[AbsPath, CephPoolName], Field(max_length=64)] = {}


class S3Transition(Strict):
    """A lifecycle rule: objects under `prefix` move to `storage_class` `days` after they were written."""

    prefix: Annotated[str, Field(pattern=r"^[A-Za-z0-9!_.*'()/-]{0,256}$")] = ""
    days: Annotated[int, Field(ge=1, le=36500)]
    storage_class: S3StorageClass


class CephS3(Strict):
    """S3 through RGW: each storage class a placement target's pool (STANDARD is where objects land)."""

    storage_classes: Annotated[dict[S3StorageClass, CephPoolName], Field(min_length=1, max_length=16)]
    lifecycle: Annotated[list[S3Transition], Field(max_length=64)] = []


class CephTenant(Strict):
    """What a tenant (of site.kubernetes.tenants) asks of Ceph: a CephFS directory of its own with a quota, and an S3
    user with a quota, in GB as the disks are counted. Their keys are made by Ceph at install, never written here."""

    cephfs_gb: Annotated[int, Field(ge=0, le=10**9)] = 0
    s3_gb: Annotated[int, Field(ge=0, le=10**9)] = 0


class Ceph(Strict):
    """A Ceph cluster on the storage nodes: an OSD per disk (its device class the disk's tier), monitors on three
    nodes (the storage nodes, or the control plane's), managers beside them, MDS and RGW on the storage nodes."""

    # The release the nodes install: Debian 12's 16.2 (pacific) in the lab, upstream's repository on a site.
    release: Annotated[str, Field(pattern=r"^(1[6-9]|2[0-9])\.2$")] = "16.2"
    monitors: Literal["storage", "control-plane"] = "storage"
    # Ceph ignores a target at or below osd_memory_base + osd_memory_cache_min (768 + 128 MiB in 16.2.15's
    # defaults, `ceph-conf -D`): an OSD then grows as it likes.
    osd_memory_target_mib: Annotated[int, Field(gt=896, le=1_048_576)] = 4096
    pools: Annotated[list[CephPool], Field(min_length=1, max_length=64)]
    filesystem: CephFilesystem | None = None
    s3: CephS3 | None = None
    tenants: Annotated[dict[Name, CephTenant], Field(max_length=1024)] = {}


class StorageNodes(NodeGroup):
    name_pattern: NamePattern = "stor{n:02d}"
    disks: list[Disk] = []
    exports: list[Export] = []
    # The kernel NFS server on real sites; NFS-Ganesha (user space) where the kernel has none (the lab).
    nfs_server: Literal["kernel", "ganesha"] = "kernel"
    ceph: Ceph | None = None
