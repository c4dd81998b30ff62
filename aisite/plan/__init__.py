"""The plan: a pure, deterministic expansion of a validated Site.

Every address, port, ASN and cable that any layer uses is decided here, once; renderers, the Pulumi program and
the lab read the plan and never re-derive. Cost is linear in nodes + links (address pools are cursors, not scans).
Modules: `types` (the dataclasses), `pools` (addresses), `fabric` (rails, ports, RoCE), `kubernetes`, `build`.
"""

from aisite.plan.build import build_plan, exports
from aisite.plan.fabric import FabricLayout, fabric_layout, group_rails, port_name, rail_block_prefix, roce_qos
from aisite.plan.types import (
    GPU_TAINT,
    LABEL_PREFIX,
    RAIL_TABLE_BASE,
    AdminUserPlan,
    BgpNeighbor,
    Bmc,
    Cable,
    ExportPlan,
    GitopsPlan,
    Gpu,
    HostSubnet,
    Interface,
    KubernetesPlan,
    NetworksPlan,
    Node,
    NodeTaint,
    Plan,
    Rail,
    RegistryPlan,
    RoceQos,
    Switch,
    TenantPlan,
    WorkloadPlan,
)

__all__ = [
    "GPU_TAINT",
    "LABEL_PREFIX",
    "RAIL_TABLE_BASE",
    "AdminUserPlan",
    "BgpNeighbor",
    "Bmc",
    "Cable",
    "ExportPlan",
    "FabricLayout",
    "GitopsPlan",
    "Gpu",
    "HostSubnet",
    "Interface",
    "KubernetesPlan",
    "NetworksPlan",
    "Node",
    "NodeTaint",
    "Plan",
    "Rail",
    "RegistryPlan",
    "RoceQos",
    "Switch",
    "TenantPlan",
    "WorkloadPlan",
    "build_plan",
    "exports",
    "fabric_layout",
    "group_rails",
    "port_name",
    "rail_block_prefix",
    "roce_qos",
]
