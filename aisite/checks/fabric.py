"""The compute fabric and the access switches: ASNs, tiers, switch models and OS releases, port capacity."""

from __future__ import annotations

import itertools
import math
from ipaddress import IPv4Network

from aisite.catalog import (
    ACCESS_SWITCH_MODELS,
    SWITCH_MODELS,
    SwitchHardware,
)
from aisite.checks.common import fabric_groups, node_groups
from aisite.drivers.switch_os import mode_speeds
from aisite.drivers.switches import ACCESS, CONFIGURED, SWITCH_OS
from aisite.errors import Problem
from aisite.model import (
    AccessSwitchGroup,
    Site,
    SwitchGroup,
    SwitchGroupBase,
)
from aisite.plan import FabricLayout, fabric_capacity, rail_block_prefix
from aisite.plan.fabric import switch_port

PRIVATE_ASN_RANGES = ((64512, 65534), (4200000000, 4294967294))


def asn_problem(first: int, last: int) -> str | None:
    for lo, hi in PRIVATE_ASN_RANGES:
        if lo <= first <= hi:
            return None if last <= hi else f"ASNs {first}-{last} run past the private range {lo}-{hi}"
    return f"{first} is not a private ASN (64512-65534 or 4200000000-4294967294)"


def check_fabric(site: Site, layout: FabricLayout, out: list[Problem]) -> None:
    sw, fab = site.switches, site.fabric
    r = fab.roce
    if r.pfc_watchdog_detection_ms % r.pfc_watchdog_poll_ms:
        out.append(
            Problem(
                "site.fabric.roce.pfc_watchdog_detection_ms",
                f"{r.pfc_watchdog_detection_ms} is not a whole number of polls of {r.pfc_watchdog_poll_ms} ms "
                "(Cumulus counts detection in polls)",
            )
        )
    if layout.rails == 0:
        return
    if len(site.networks.rails) < layout.rails:
        out.append(Problem("site.networks.rails", f"{len(site.networks.rails)} subnet(s) for {layout.rails} rails"))
    if fab.leaves_per_su is not None and fab.leaves_per_su > layout.rails:
        out.append(Problem("site.fabric.leaves_per_su", f"{fab.leaves_per_su} leaves for {layout.rails} rails"))
    if sw.leaves.count < layout.leaves_needed:
        out.append(
            Problem(
                "site.switches.leaves.count",
                f"{sw.leaves.count} leaves but the fabric needs {layout.leaves_needed} "
                f"({layout.scalable_units} scalable unit(s) x {layout.leaves_per_su} leaves)",
            )
        )
    problem = asn_problem(fab.asn_base, fab.asn_base + layout.first_leaf_asn - 1 + sw.leaves.count)
    if problem:
        out.append(Problem("site.fabric.asn_base", problem))
    if fab.host_mtu > fab.switch_mtu:
        out.append(Problem("site.fabric.host_mtu", f"{fab.host_mtu} is above the switch MTU {fab.switch_mtu}"))
    r = fab.roce
    if r.ecn_min_kb >= r.ecn_max_kb:
        out.append(Problem("site.fabric.roce.ecn_min_kb", f"{r.ecn_min_kb} KB is not below ecn_max_kb {r.ecn_max_kb}"))
    if r.cnp_priority == r.pfc_priority:
        out.append(Problem("site.fabric.roce.cnp_priority", "CNPs must not share the lossless priority"))
    if r.cnp_dscp == r.roce_dscp:
        out.append(Problem("site.fabric.roce.cnp_dscp", "CNP and RoCE data must use different DSCP values"))
    check_switch_os(site, out)


def check_switch_models(site: Site, out: list[Problem]) -> None:
    """Each tier's ports and speed against its model's front panel, where the catalog knows the model."""
    for path, group in fabric_groups(site):
        model = SWITCH_MODELS.get(group.model)
        if model is None:
            continue
        if group.speed_gbps > model.cage_gbps:
            out.append(
                Problem(
                    f"site.switches.{path}.speed_gbps",
                    f"{group.speed_gbps}: an {model.name}'s ports run at most {model.cage_gbps} Gbps",
                )
            )
        elif group.ports > model.ports_at(group.speed_gbps):
            out.append(
                Problem(
                    f"site.switches.{path}.ports",
                    f"{group.ports}: an {model.name} ({model.cages} x {model.cage_gbps}G) has at most "
                    f"{model.ports_at(group.speed_gbps)} ports at {group.speed_gbps} Gbps",
                )
            )
        elif group.ports > model.cages and SWITCH_OS[group.os].platforms:
            _check_platform_mode(path, group, model, out)
        elif group.ports > model.cages and not SWITCH_OS[group.os].breakout:
            # More ports than cages splits each cage (an SN5600's 2x400G): rendered where the OS's driver says its
            # role renders breakouts; refuse rather than configure ports the switch does not have.
            can = [SWITCH_OS[n].title for n in CONFIGURED if SWITCH_OS[n].breakout]
            can_run = " or ".join([", ".join(can[:-1]), can[-1]] if len(can) > 1 else can)
            out.append(
                Problem(
                    f"site.switches.{path}.ports",
                    f"{group.ports} ports on {model.cages} cages means splitting each {model.name} cage, and aisite "
                    f"renders no {SWITCH_OS[group.os].title} breakout yet: declare at most {model.cages} (one "
                    f"{group.speed_gbps}G port a cage) or run {can_run}",
                )
            )


def _check_platform_mode(path: str, group: SwitchGroupBase, model: SwitchHardware, out: list[Problem]) -> None:
    """A split cage where the OS names its breakout mode (SONiC's BREAKOUT_CFG): a mode the model's platform files
    define, at a speed the mode offers; anything else is a mode no such switch has."""
    driver = SWITCH_OS[group.os]
    where = f"site.switches.{path}.ports"
    platform = driver.platforms.get(model.name)
    split = model.split(group.ports)
    if platform is None:
        known = ", ".join(sorted(driver.platforms))
        out.append(
            Problem(
                where,
                f"{group.ports} ports on {model.cages} cages splits each {model.name} cage, and {driver.title} "
                f"names the breakout mode its platform files define, which aisite's catalog holds for {known} "
                f"only: declare at most {model.cages} (one port a cage)",
            )
        )
    elif split not in platform.modes:
        modes = ", ".join(platform.modes.values())
        out.append(Problem(where, f"{group.ports} ports means {split} a cage; an {model.name}'s cages offer {modes}"))
    elif group.speed_gbps not in mode_speeds(platform.modes[split])[1]:
        out.append(
            Problem(
                f"site.switches.{path}.speed_gbps",
                f"{group.speed_gbps}: an {model.name} cage broken out as {platform.modes[split]} runs none at that "
                "speed",
            )
        )


def check_access_switches(site: Site, out: list[Problem]) -> None:
    """Management and out-of-band switches aisite configures: an OS it renders them for, the release NVUE needs,
    two networks never on one VLAN, uplinks that are not a port it cables a node to."""
    for key in ("management", "oob"):
        group: AccessSwitchGroup | None = getattr(site.switches, key)
        if group is None or not group.count:
            continue
        path = f"site.switches.{key}"
        hw = ACCESS_SWITCH_MODELS.get(group.model)
        if hw is not None and group.speed_gbps > hw.port_gbps:
            out.append(
                Problem(
                    f"{path}.speed_gbps",
                    f"{group.speed_gbps}: an {hw.name}'s {hw.ports} node ports run at most {hw.port_gbps} Gbps "
                    f"({', '.join(hw.uplinks)} are its uplinks)",
                )
            )
        elif hw is not None and group.ports > hw.ports:
            out.append(Problem(f"{path}.ports", f"{group.ports}: an {hw.name} has {hw.ports} node ports"))
        if group.os == "generic":
            if group.uplinks:
                out.append(Problem(f"{path}.uplinks", "generic switches are the site's to configure: no uplinks"))
            continue
        if group.os not in ACCESS:
            out.append(
                Problem(
                    f"{path}.os",
                    f"{group.os}: aisite configures {key} switches on {', '.join(ACCESS)} only; `generic` "
                    "leaves them to the site (their cables are still planned and checked)",
                )
            )
            continue
        check_release(path, group, out)
        if key == "management" and group.vlans.management == group.vlans.storage:
            out.append(
                Problem(f"{path}.vlans.storage", f"{group.vlans.storage}: the management network's VLAN as well")
            )
        cabled = {switch_port(group, n) for n in range(1, group.ports + 1)}
        seen: set[str] = set()
        for i, port in enumerate(group.uplinks):
            if port in cabled:
                out.append(
                    Problem(
                        f"{path}.uplinks[{i}]",
                        f"{port} is one of the {group.ports} ports aisite cables nodes and BMCs to (ports: "
                        f"{group.ports}): an uplink is a port beyond them",
                    )
                )
            elif port in seen:
                out.append(Problem(f"{path}.uplinks[{i}]", f"{port} is named twice"))
            elif hw is not None and port not in hw.uplinks:
                out.append(
                    Problem(f"{path}.uplinks[{i}]", f"{port}: an {hw.name}'s uplink ports are {', '.join(hw.uplinks)}")
                )
            seen.add(port)


def check_release(path: str, group: SwitchGroupBase, out: list[Problem]) -> None:
    """A group whose OS's role renders for some releases only (Cumulus's NVUE) names one of them."""
    driver = SWITCH_OS[group.os]
    if driver.releases is None:
        return
    low, high = driver.releases
    supported = f"{low[0]}.{low[1]} to {high[0]}.{high[1]}"
    if group.os_version is None:
        out.append(
            Problem(
                f"{path}.os_version",
                f"say which {driver.title} release the switches run ({supported}): {driver.releases_why}",
            )
        )
    elif not low <= tuple(int(p) for p in group.os_version.split(".")[:2]) <= high:
        out.append(
            Problem(f"{path}.os_version", f"{group.os_version}: aisite renders {driver.renders} for {supported}")
        )


def check_switch_os(site: Site, out: list[Problem]) -> None:
    """Each tier's OS against what its driver's role renders: its releases, peering the tier below the same way, BFD
    and the RoCE settings it can set."""
    groups = fabric_groups(site)
    for path, group in groups:
        check_release(f"site.switches.{path}", group, out)
    for (below_path, below), (path, group) in itertools.pairwise(groups):
        if SWITCH_OS[below.os].peering != SWITCH_OS[group.os].peering:
            unnumbered = sorted(n for n in CONFIGURED if SWITCH_OS[n].peering == "unnumbered")
            out.append(
                Problem(
                    f"site.switches.{path}.os",
                    f"{group.os} {path.replace('_', '-')} cannot peer with {below.os} {below_path}: aisite configures "
                    f"{', '.join(unnumbered)} with BGP unnumbered and the others with /31 addresses",
                )
            )
    drivers = [SWITCH_OS[n] for n in sorted({group.os for _, group in groups})]
    for d in drivers:
        if site.fabric.bfd is True and not d.bfd:
            out.append(
                Problem(
                    "site.fabric.bfd",
                    f"true, but {d.bfd_why or d.title + ' cannot enable BFD'}: leave it unset or false for a "
                    f"{d.title} fabric (sessions then fail over on the BGP hold time, 9 s)",
                )
            )
        r = site.fabric.roce
        for key in d.unset_roce:
            if key in r.model_fields_set:
                out.append(
                    Problem(
                        f"site.fabric.roce.{key}", f"{d.title}: the lines aisite renders cannot set it; leave it out"
                    )
                )
        for key, want in d.fixed_roce.items():
            if getattr(r, key) != want:
                out.append(
                    Problem(f"site.fabric.roce.{key}", f"{getattr(r, key)}: {d.title}'s `roce lossless` uses {want}")
                )


def check_tiers(site: Site, layout: FabricLayout, out: list[Problem]) -> None:
    """A third tier's shape (pods, planes), each tier's oversubscription and the bisection bandwidth."""
    sw, fab = site.switches, site.fabric
    supers = sw.super_spines.count if sw.super_spines else 0
    if supers and fab.pod_size is None:
        out.append(
            Problem("site.fabric.pod_size", "super-spines need pods: set how many scalable units each pod holds")
        )
    if fab.pod_size is not None and not supers:
        out.append(Problem("site.switches.super_spines", f"pods of {fab.pod_size} scalable unit(s) need super-spines"))
    if fab.pod_size is not None and not sw.spines.count:
        out.append(Problem("site.switches.spines.count", "pods need spines: 0 declared"))
    if layout.three_tier:
        if sw.spines.count % layout.pods:
            out.append(
                Problem(
                    "site.switches.spines.count",
                    f"{sw.spines.count} spines do not split evenly over {layout.pods} pod(s) "
                    f"({max(sw.leaves.count, layout.leaves_needed)} leaves, {layout.leaves_per_pod} per pod)",
                )
            )
        planes = fab.super_spine_planes
        if supers % planes:
            out.append(
                Problem("site.switches.super_spines.count", f"{supers} super-spines do not split into {planes} planes")
            )
        if layout.spines_per_pod % planes:
            out.append(
                Problem(
                    "site.fabric.super_spine_planes",
                    f"{planes} planes for {layout.spines_per_pod} spines per pod: each pod needs the same number "
                    "of spines in every plane",
                )
            )
    # ECMP: a route up has a next hop per uplink; each tier's role installs at most its driver's max_paths.
    leaf_width = layout.uplinks(sw.leaves.count) if sw.spines.count else 0
    widths = [("site.fabric.uplinks_per_spine", "a leaf", leaf_width, sw.leaves.os)]
    if layout.three_tier:
        widths.append(("site.fabric.uplinks_per_super_spine", "a spine", layout.spine_uplinks, sw.spines.os))
    for path, who, width, os in widths:
        most = SWITCH_OS[os].max_paths
        if width > most:
            out.append(
                Problem(
                    path,
                    f"{who}'s routes up would have {width} equal-cost next hops; its {SWITCH_OS[os].title} role "
                    f"installs at most {most} (BGP maximum-paths): fewer, faster links",
                )
            )
    capacity = fabric_capacity(site, layout)
    if capacity is None:
        return
    limits = {"leaves": fab.oversubscription.leaves, "spines": fab.oversubscription.spines}
    # A leaf mesh (no spines) has no tier above the leaves to oversubscribe: its bisection is what counts.
    for tier in capacity.tiers if sw.spines.count else ():
        limit = limits[tier.name]
        if tier.oversubscription > limit:
            out.append(
                Problem(
                    f"site.fabric.oversubscription.{tier.name}",
                    f"the {tier.name} are {tier.oversubscription:.3g}:1 oversubscribed ({tier.down_gbps} Gbps down, "
                    f"{tier.up_gbps} Gbps up each) but at most {limit:g}:1 is allowed",
                )
            )
    floor = fab.min_bisection_gbps_per_gpu
    if floor is not None and capacity.bisection_gbps_per_gpu < floor:
        out.append(
            Problem(
                "site.fabric.min_bisection_gbps_per_gpu",
                f"the fabric's bisection bandwidth is {capacity.bisection_gbps_per_gpu:.4g} Gbps per GPU, below "
                f"{floor:g}",
            )
        )


def port_budget(path: str, group: SwitchGroup, need: int, what: str, out: list[Problem]) -> None:
    if need > group.ports:
        out.append(Problem(path, f"needs {need} ports ({what}) but {group.ports} are declared"))


def access_budget(path: str, group: AccessSwitchGroup | None, need: int, what: str, out: list[Problem]) -> None:
    if group is not None and need > group.count * group.ports:
        out.append(Problem(path, f"{need} cables ({what}) but {group.count} x {group.ports} ports are declared"))


def check_capacity(site: Site, layout: FabricLayout, out: list[Problem]) -> None:
    sw, nets = site.switches, site.networks
    n_nodes = sum(g.size for _, g in node_groups(site))
    with_storage = sum(g.size for g in site.gpu_nodes) + (site.storage_nodes.size if site.storage_nodes else 0)
    fabric_switches = sum(group.count for _, group in fabric_groups(site))
    managed = fabric_switches + (sw.management.count if sw.management else 0)  # switches cabled to OOB ports
    oob_addresses = managed + (sw.oob.count if sw.oob else 0)

    # Cables: leaves carry a unit's rails and the uplinks; spines one link per leaf and uplink.
    if layout.rails and sw.leaves.count >= layout.leaves_needed:
        uplinks = layout.uplinks(sw.leaves.count)
        for su in range(layout.scalable_units):
            down = layout.downlinks(su, site.fabric.scalable_unit)
            if down + uplinks > sw.leaves.ports:
                out.append(
                    Problem(
                        "site.switches.leaves.ports",
                        f"leaves of scalable unit {su} need {down + uplinks} ports ({down} to nodes, {uplinks} to "
                        f"the fabric) but have {sw.leaves.ports}",
                    )
                )
                break
    up = site.fabric.uplinks_per_spine
    if layout.three_tier and sw.super_spines:
        pod_leaves, supers_up = layout.leaves_per_pod, layout.spine_uplinks
        port_budget(
            "site.switches.spines.ports",
            sw.spines,
            layout.spine_downlinks + supers_up,
            f"{pod_leaves} leaves of a pod x {up} uplinks + {supers_up} to the super-spines of its plane",
            out,
        )
        port_budget(
            "site.switches.super_spines.ports",
            sw.super_spines,
            layout.super_spine_downlinks,
            f"{layout.pods} pods x {layout.super_spine_downlinks // layout.pods} links from the spines of its plane",
            out,
        )
    elif sw.spines.count:
        port_budget(
            "site.switches.spines.ports",
            sw.spines,
            sw.leaves.count * up,
            f"{sw.leaves.count} leaves x {up} uplinks",
            out,
        )
    access_budget(
        "site.switches.management",
        sw.management,
        n_nodes + with_storage,
        f"{n_nodes} management + {with_storage} storage",
        out,
    )
    access_budget(
        "site.switches.oob",
        sw.oob,
        n_nodes + managed,
        f"{n_nodes} BMCs + {managed} switch management ports",
        out,
    )

    # Addresses: gateway, network and broadcast are not handed out.
    def fits(path: str, net: IPv4Network, need: int, what: str) -> None:
        hosts = net.num_addresses - (3 if net.prefixlen < 31 else 0)
        if need > hosts:
            out.append(
                Problem(
                    path, f"{net} has {hosts} usable addresses but {need} are needed ({what}): {need - hosts} missing"
                )
            )

    boot = 1 if site.provisioning else 0
    fits(
        "site.networks.management",
        nets.management,
        n_nodes + 1 + boot,
        f"{n_nodes} nodes + the API VIP" + (" + the boot server" if boot else ""),
    )
    fits(
        "site.networks.oob",
        nets.oob,
        n_nodes + oob_addresses,
        f"{n_nodes} BMCs + {oob_addresses} switches",
    )
    fits("site.networks.storage", nets.storage, with_storage, f"{with_storage} nodes on the storage network")
    fits(
        "site.networks.loopbacks",
        nets.loopbacks,
        fabric_switches,
        f"a loopback for each of {fabric_switches} fabric switches",
    )
    links = layout.links
    if nets.p2p.num_addresses < 2 * links:
        missing = links - nets.p2p.num_addresses // 2
        out.append(Problem("site.networks.p2p", f"{nets.p2p} holds fewer than {links} /31 links: {missing} missing"))
    if layout.rails:
        block = rail_block_prefix(site.fabric.scalable_unit, site.fabric.rail_pod_addresses)
        need_prefix = block - math.ceil(math.log2(max(layout.scalable_units, 1)))
        for i, net in enumerate(nets.rails[: layout.rails]):
            if net.prefixlen > need_prefix:
                out.append(
                    Problem(
                        f"site.networks.rails[{i}]",
                        f"{net} is too small: {layout.scalable_units} scalable unit(s) of /{block} need a "
                        f"/{need_prefix} or larger; it holds {1 << max(0, block - net.prefixlen)}",
                    )
                )
