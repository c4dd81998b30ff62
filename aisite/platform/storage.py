"""A StorageClass per NFS export of the site (csi-driver-nfs): server and path from the plan."""

from __future__ import annotations

from typing import Any

from aisite.plan import Plan
from aisite.platform.common import labels, obj

NFS_PROVISIONER = "nfs.csi.k8s.io"
SUBDIR = "${pvc.metadata.namespace}/${pvc.metadata.name}"  # csi-driver-nfs expands these per volume


def storage_classes(plan: Plan) -> list[dict[str, Any]]:
    return [
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
