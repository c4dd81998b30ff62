"""Cross-field rules of a site: everything pydantic cannot see from one field alone, one module per domain.

Each check appends `Problem(path, message)` and carries on, so a user sees every mistake in one run; `check_site`
runs them all in the order a site is read (nodes, addresses, fabric, platform), then Ceph's and serving's.
"""

from __future__ import annotations

from aisite.checks import addresses, common, credentials, fabric, kubernetes, nodes, serving
from aisite.checks.ceph import ceph_problems
from aisite.errors import Problem
from aisite.model import Site
from aisite.plan import fabric_layout

__all__ = ["check_site"]


def check_site(site: Site) -> list[Problem]:
    out: list[Problem] = []
    groups = list(common.node_groups(site))
    nodes.check_group_sizes(groups, out)
    nodes.check_control_plane(site, out)
    nodes.check_gpu_groups(site, out)
    nodes.check_names(site, groups, out)
    addresses.check_networks(site, out)
    addresses.check_addresses(site, groups, out)
    nodes.check_macs(groups, out)
    credentials.check_credentials(site, groups, out)
    credentials.check_admin_users(site, out)
    layout = fabric_layout(site)
    fabric.check_fabric(site, layout, out)
    fabric.check_tiers(site, layout, out)
    fabric.check_switch_models(site, out)
    fabric.check_access_switches(site, out)
    fabric.check_capacity(site, layout, out)
    kubernetes.check_kubernetes(site, out)
    kubernetes.check_tenants(site, out)
    kubernetes.check_exports(site, out)
    kubernetes.check_gitops(site, groups, out)
    nodes.check_provisioning(site, groups, out)
    kubernetes.check_acceptance(site, out)
    nodes.check_firmware_images(site, groups, out)
    out += ceph_problems(site)
    out += serving.serving_problems(site)
    return out
