"""The site's StorageClasses: one per NFS export (csi-driver-nfs: server and path from the plan), one per Ceph pool for
block volumes (ceph-csi RBD) and one per CephFS pool files may go to (ceph-csi CephFS: the first data pool and the
layouts'), each naming the cluster by its fsid and the secret ceph-csi reads its key from."""

from __future__ import annotations

from typing import Any

from aisite.plan import Plan
from aisite.platform.charts import CEPH_CEPHFS, CEPH_CSI, CEPH_RBD
from aisite.platform.common import labels, obj

NFS_PROVISIONER = "nfs.csi.k8s.io"
SUBDIR = "${pvc.metadata.namespace}/${pvc.metadata.name}"  # csi-driver-nfs expands these per volume


def _ceph_driver(chart: str) -> tuple[str, dict[str, str]]:
    """A ceph-csi chart's driver (the StorageClass's provisioner) and the parameters naming the Secret it reads."""
    provisioner, secret = CEPH_CSI[chart]
    params = {}
    for use in ("provisioner", "controller-expand", "node-stage"):
        params[f"csi.storage.k8s.io/{use}-secret-name"] = secret
        params[f"csi.storage.k8s.io/{use}-secret-namespace"] = chart  # its release's namespace
    return provisioner, params


def ceph_storage_classes(plan: Plan) -> list[dict[str, Any]]:
    c = plan.ceph
    if c is None:
        return []
    out: list[tuple[str, str, str, dict[str, str]]] = []
    rbd, rbd_secrets = _ceph_driver(CEPH_RBD)
    for pool in (p for p in c.pools if p.application == "rbd" and not p.system):
        params = {"clusterID": c.fsid, "pool": pool.name, "imageFeatures": "layering"} | rbd_secrets
        out.append((f"ceph-rbd-{pool.name}", rbd, pool.device_class, params))
    cephfs, cephfs_secrets = _ceph_driver(CEPH_CEPHFS)
    fs_pools = sorted({*(p for _, p in c.fs_layouts), *([c.fs_data_pool] if c.fs_data_pool else [])})
    classes = {p.name: p.device_class for p in c.pools}
    for name in fs_pools:
        params = {"clusterID": c.fsid, "fsName": c.filesystem or "", "pool": name} | cephfs_secrets
        out.append((f"ceph-fs-{name}", cephfs, classes[name], params))
    return [
        obj(
            "storage.k8s.io/v1",
            "StorageClass",
            sc_name,
            labels(plan) | {"aisite.io/tier": tier},
            provisioner=provisioner,
            parameters=params,
            # Kept on delete, as the NFS ones: training data outlives its claims.
            reclaimPolicy="Retain",
            volumeBindingMode="Immediate",
            allowVolumeExpansion=True,
        )
        for sc_name, provisioner, tier, params in out
    ]


def storage_classes(plan: Plan) -> list[dict[str, Any]]:
    return ceph_storage_classes(plan) + [
        obj(
            "storage.k8s.io/v1",
            "StorageClass",
            f"nfs-{e.name}",
            labels(plan) | {"aisite.io/tier": e.tier},
            provisioner=NFS_PROVISIONER,
            # A subdirectory per volume under the export; kept on delete: training data outlives its claims.
            parameters={
                "server": e.address,
                "share": e.path,
                "subDir": "${pvc.metadata.namespace}/${pvc.metadata.name}",
            },
            reclaimPolicy="Retain",
            volumeBindingMode="Immediate",
            allowVolumeExpansion=True,
            mountOptions=["nfsvers=4.1", "hard"],
        )
        for e in plan.exports
    ]
