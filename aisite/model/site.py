"""The whole site: the typed form of a stack file's `aisite:site` config."""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Annotated

from pydantic import Field

from aisite.catalog import RACK_POWER_KW, Cooling
from aisite.fields import (
    Hostname,
    NtpServer,
    SecretName,
    Text,
)
from aisite.model.base import Name, Strict
from aisite.model.credentials import AdminUser, Secret
from aisite.model.fabric import Fabric, Networks, Switches
from aisite.model.kubernetes import Kubernetes, Workload
from aisite.model.nodes import ControlPlane, GpuGroup, Nvidia, Provisioning
from aisite.model.oob import OobDefaults
from aisite.model.operations import Acceptance, AnsibleSettings, Gitops, Health, Maintenance
from aisite.model.serving import Serving
from aisite.model.storage import StorageNodes


class Facility(Strict):
    """The data hall's racks: what each may draw and how it is cooled. With it, the plan places the GPU nodes in
    racks (gpu_nodes[].per_rack, else as many as a rack's power allows) and refuses a rack over its budget."""

    rack_power_kw: Annotated[float, Field(gt=0, le=2000)] = RACK_POWER_KW
    rack_cooling: Cooling = "air"


class Site(Strict):
    """One site: a stack file's `config: aisite:site:`. Every other key is read from here, and only from here."""

    # The site's name: it names its lab containers, its state under .aisite/ and its Pulumi resources.
    name: Name
    description: Text = ""
    # The DNS domain its nodes are named under (<node>.<domain>).
    domain: Hostname
    # Time servers every node and switch follows (chrony).
    ntp_servers: list[NtpServer] = []
    dns_servers: list[IPv4Address] = []
    # How Ansible reaches the hosts.
    ansible: AnsibleSettings = AnsibleSettings()
    # The people who log in to the nodes: their accounts and SSH keys, exactly those declared.
    admin_users: list[AdminUser] = []
    # Named secrets, each from where its value comes (never the value itself).
    secrets: dict[SecretName, Secret] = {}
    # The management, out-of-band, storage and rail address ranges the plan allocates from.
    networks: Networks
    # The BMCs' defaults: protocol, credentials, power, TLS and the accounts aisite keeps on them.
    oob: OobDefaults = OobDefaults()
    # The three-node control plane (Kubernetes, etcd).
    control_plane: ControlPlane
    # Groups of GPU nodes, each of one server model (DGX H100 to GB200 NVL72 trays).
    gpu_nodes: list[GpuGroup] = []
    # The storage nodes: NFS exports, or a Ceph cluster.
    storage_nodes: StorageNodes | None = None
    # Leaf, spine, super-spine, management and out-of-band switches.
    switches: Switches
    # The RoCE fabric: topology, ASNs, MTUs, scalable units, oversubscription and the lossless profile.
    fabric: Fabric = Fabric()
    # The NVIDIA driver branch and repository of the GPU nodes.
    nvidia: Nvidia = Nvidia()
    # The cluster: version, CNI, add-ons, tenants and their quotas, monitoring, etcd backups.
    kubernetes: Kubernetes = Kubernetes()
    # Jobs and services the site runs, by kind, each in a tenant.
    workloads: list[Workload] = []
    # Models served over HTTP, each in a tenant, and how new checkpoints are promoted to them.
    serving: list[Serving] = []
    # The site's Git repository the reconciler (and pulling nodes) follow, and whose signatures they trust.
    gitops: Gitops | None = None
    # Network installs of nodes from the site's boot server.
    provisioning: Provisioning | None = None
    # The racks' power and cooling budget; None: nothing is placed in racks but rack-scale systems' own.
    facility: Facility | None = None
    # What `aisite accept` holds the nodes, rails and NVLink domains to.
    acceptance: Acceptance = Acceptance()
    # The nodes' health check and the quarantine.
    health: Health = Health()
    # The site's one disruption budget for maintenance, upgrades, firmware and the quarantine.
    maintenance: Maintenance = Maintenance()
