"""Pulumi ComponentResources, one per layer of a site, wired in order by `SiteDeployment`."""

from aisite.components.layers import Cluster, Fabric, Hosts, LayerArgs, OutOfBand, Workloads
from aisite.components.site import SiteArgs, SiteDeployment

__all__ = ["Cluster", "Fabric", "Hosts", "LayerArgs", "OutOfBand", "SiteArgs", "SiteDeployment", "Workloads"]
