"""Switches and networks: the fabric's tiers and access switches (their OSes from the drivers), the RoCE profile."""

from __future__ import annotations

from ipaddress import IPv4Network
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from aisite.drivers.switches import CONFIGURED, SWITCH_OS
from aisite.fields import (
    IfName,
    NamePattern,
    SwitchModel,
)
from aisite.model.base import Count, Name, Percent, Ratio, Strict, member_names
from aisite.model.nodes import InterfaceSpec


def _switch_os(names: tuple[str, ...]) -> AfterValidator:
    def check(value: str) -> str:
        if value not in names:
            raise ValueError(f"{value!r} is not a switch OS aisite configures here; known: {', '.join(names)}")
        return value

    return AfterValidator(check)


# What an access switch may run: an OS aisite configures (any: the checks say which it configures access
# switches on), or `generic`.
ACCESS_CHOICES = (*CONFIGURED, *(n for n in SWITCH_OS if n not in CONFIGURED))

# The switch operating systems, from their drivers (aisite/drivers/switches): a fabric tier runs one aisite
# configures; an access switch may also be `generic` (the site's to configure).
SwitchOs = Annotated[str, _switch_os(CONFIGURED), Field(json_schema_extra={"enum": list(CONFIGURED)})]

AccessSwitchOs = Annotated[str, _switch_os((*ACCESS_CHOICES,)), Field(json_schema_extra={"enum": list(ACCESS_CHOICES)})]


class SwitchSpec(Strict):
    name: Name | None = None
    management: InterfaceSpec | None = None


class SwitchGroupBase(Strict):
    count: Count
    name_pattern: NamePattern
    os: str
    model: SwitchModel | Literal[""] = ""
    # The OS release the switches run ("5.15"): NVUE's syntax changed in Cumulus Linux 5.15, so aisite renders
    # the release's own; required for Cumulus leaves and spines.
    os_version: Annotated[str, Field(pattern=r"^[0-9]{1,2}\.[0-9]{1,2}(\.[0-9]{1,3})?$")] | None = None
    ports: Annotated[int, Field(ge=1, le=1024)]
    speed_gbps: Annotated[int, Field(ge=1, le=3200)]
    nodes: list[SwitchSpec] = []

    def switch_names(self) -> list[str]:
        return member_names(self.name_pattern, self.count, [spec.name for spec in self.nodes])


class SwitchGroup(SwitchGroupBase):
    """Fabric leaves or spines."""

    os: SwitchOs


VlanId = Annotated[int, Field(ge=2, le=4094)]


class AccessVlans(Strict):
    """The VLAN of each network on the access switches: a node's or BMC's port is an access port of its network's
    VLAN; the uplinks carry them all, tagged. Site-local numbers: match the site's core."""

    management: VlanId = 10
    storage: VlanId = 20
    oob: VlanId = 30


class AccessSwitchGroup(SwitchGroupBase):
    """Management (in-band: management and storage ports) or out-of-band (BMC and switch management ports).
    `generic`: the site configures them itself (aisite plans and checks their cables only)."""

    os: AccessSwitchOs = "generic"
    vlans: AccessVlans = AccessVlans()
    # Ports to the site's network (its core or a border pair), trunks of every VLAN above. aisite replaces the
    # switch's whole configuration, so a port not planned here or by a cable is left unconfigured.
    uplinks: Annotated[list[IfName], Field(max_length=16)] = []


class Switches(Strict):
    leaves: SwitchGroup
    spines: SwitchGroup
    # The third tier: with fabric.pod_size, each pod's leaves cable to that pod's spines alone and every spine to
    # the super-spines (of its plane: fabric.super_spine_planes).
    super_spines: SwitchGroup | None = None
    management: AccessSwitchGroup | None = None
    oob: AccessSwitchGroup | None = None


class Networks(Strict):
    """The site's networks. In the pooled ones (oob, management, storage, loopbacks) the first host address is the
    gateway and is never handed out; nodes, BMCs and switches get the next free addresses in the file's order,
    skipping every address the stack names anywhere (DNS and NTP servers, the VIP, the boot server, registries,
    addresses given by hand): `aisite plan` lists what each network keeps back. Rails and p2p are laid out by
    position and may hold no named server."""

    oob: IPv4Network
    management: IPv4Network
    loopbacks: IPv4Network
    p2p: IPv4Network
    rails: list[IPv4Network]
    storage: IPv4Network
    pods: IPv4Network
    services: IPv4Network


class RoceProfile(Strict):
    """Lossless RoCE; defaults are NVIDIA's reference values: PFC on priority 3, trust DSCP, RoCE data DSCP 26
    (ToS 106) to traffic class 3, CNP DSCP 48 to priority 6, ECN on class 3 (Cumulus and Onyx defaults)."""

    pfc_priority: Annotated[int, Field(ge=0, le=7)] = 3
    trust: Literal["dscp"] = "dscp"
    roce_dscp: Annotated[int, Field(ge=0, le=63)] = 26
    cnp_dscp: Annotated[int, Field(ge=0, le=63)] = 48
    cnp_priority: Annotated[int, Field(ge=0, le=7)] = 6
    ecn_min_kb: Annotated[int, Field(ge=1, le=1_000_000)] = 150
    ecn_max_kb: Annotated[int, Field(ge=1, le=1_000_000)] = 1500
    ets_roce_percent: Percent = 50
    # ECN marking probability at the maximum threshold (marking rises to it linearly from the minimum).
    ecn_probability_percent: Annotated[int, Field(ge=1, le=100)] = 100
    pfc_watchdog: bool = True
    # The PFC watchdog polls every poll_ms; a queue paused for detection_ms (a whole number of polls) is stormed
    # and its packets dropped; restoration_ms after the storm ends, PFC is honoured again.
    pfc_watchdog_poll_ms: Annotated[int, Field(ge=10, le=1000)] = 100
    pfc_watchdog_detection_ms: Annotated[int, Field(ge=10, le=5000)] = 300
    pfc_watchdog_restoration_ms: Annotated[int, Field(ge=10, le=60000)] = 300
    gid_index: Annotated[int, Field(ge=0, le=255)] = 3


class Oversubscription(Strict):
    """The most a tier may be oversubscribed: bandwidth down to what it serves over bandwidth up, as N for N:1."""

    leaves: Ratio = 1
    spines: Ratio = 1  # three tiers only: a pod's spines, down to its leaves and up to the super-spines


class Fabric(Strict):
    topology: Literal["rail-optimised"] = "rail-optimised"
    asn_base: Annotated[int, Field(ge=64512, le=4294967294)] = 4200000000
    switch_mtu: Annotated[int, Field(ge=1500, le=9216)] = 9216
    host_mtu: Annotated[int, Field(ge=1500, le=9216)] = 9000
    # GPU nodes per scalable unit: NIC position N of each node in one unit cables to the unit's leaf for rail N.
    scalable_unit: Annotated[int, Field(ge=1, le=100_000)] = 32
    # Leaves per scalable unit; rails are spread evenly over them (one leaf per rail by default).
    leaves_per_su: Annotated[int, Field(ge=1, le=1024)] | None = None
    uplinks_per_spine: Annotated[int, Field(ge=1, le=16)] = 1
    # Three tiers: scalable units per pod (with switches.super_spines); spines.count is split evenly over the pods.
    pod_size: Annotated[int, Field(ge=1, le=100_000)] | None = None
    uplinks_per_super_spine: Annotated[int, Field(ge=1, le=16)] = 1
    # Super-spines in planes: spine i of every pod cables to each super-spine of plane i mod planes (1: every
    # spine to every super-spine). A fat tree of fixed-radix switches has one plane per spine of a pod.
    super_spine_planes: Annotated[int, Field(ge=1, le=1024)] = 1
    oversubscription: Oversubscription = Oversubscription()
    # Refuse a fabric whose bisection bandwidth per GPU (as `aisite plan` prints it) is below this.
    min_bisection_gbps_per_gpu: Annotated[float, Field(gt=0, le=3200)] | None = None
    # Addresses per GPU node, in each leaf's block of each rail, for pods' rail interfaces (macvlan pods are the
    # leaf's neighbours, so they must be in its block). 0: no pod rail networks; the block holds the hosts alone.
    rail_pod_addresses: Annotated[int, Field(ge=0, le=64)] = 0
    # BFD on the fabric's BGP sessions; None: on, except on SONiC (whose BGP_NEIGHBOR table has no BFD field).
    bfd: bool | None = None
    roce: RoceProfile = RoceProfile()
