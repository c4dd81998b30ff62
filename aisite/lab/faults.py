"""Faults injected into a running lab, to rehearse what acceptance and health checks must find: a rail slowed on
its node's side of the veth, or a rail's MTU changed. Each is undone by `clear` (the plan's MTU back, the qdisc
removed); nothing outside the lab's own namespaces is touched."""

from __future__ import annotations

from aisite.lab.netns import in_netns
from aisite.lab.podman import LabError
from aisite.plan import Plan, Rail


def _rail(plan: Plan, node: str, interface: str) -> Rail:
    n = next((n for n in plan.nodes if n.name == node), None)
    rail = next((r for r in n.rails if r.interface == interface), None) if n else None
    if rail is None:
        raise LabError(f"{node}:{interface}: no such rail in the plan of {plan.site}")
    return rail


def slow_rail(plan: Plan, node: str, interface: str, rate_mbit: int = 500, delay_ms: int = 0) -> str:
    """Limit what the node sends on a rail: tc netem (rate, and delay if asked) where the kernel has it, else a
    token bucket (tbf: rate alone; this machine's kernel has no sch_netem). Returns the qdisc used."""
    _rail(plan, node, interface)
    netem = ["tc", "qdisc", "replace", "dev", interface, "root", "netem", "rate", f"{rate_mbit}mbit"]
    netem += ["delay", f"{delay_ms}ms"] if delay_ms else []
    try:
        in_netns(plan, node, *netem)
        return "netem"
    except LabError:
        if delay_ms:
            raise
    burst = max(32, rate_mbit // 8)  # KiB: at least one jumbo frame, about 1 ms of the rate
    in_netns(
        plan,
        node,
        "tc",
        "qdisc",
        "replace",
        "dev",
        interface,
        "root",
        "tbf",
        "rate",
        f"{rate_mbit}mbit",
        "burst",
        f"{burst}kb",
        "latency",
        "50ms",
    )
    return "tbf"


def set_mtu(plan: Plan, node: str, interface: str, mtu: int) -> None:
    _rail(plan, node, interface)
    in_netns(plan, node, "ip", "link", "set", "dev", interface, "mtu", str(mtu))


def link_down(plan: Plan, node: str, interface: str) -> None:
    """The rail's link down on the node's side (a cable pulled, as the node sees it)."""
    _rail(plan, node, interface)
    in_netns(plan, node, "ip", "link", "set", "dev", interface, "down")


def clear(plan: Plan, node: str, interface: str) -> None:
    """The rail as the plan has it: up, its MTU, no root qdisc of ours. (A link set down loses its routes: the
    hosts layer puts them back, as systemd-networkd does when the link returns on a node.)"""
    rail = _rail(plan, node, interface)
    in_netns(plan, node, "tc", "qdisc", "del", "dev", interface, "root", check=False)
    in_netns(plan, node, "ip", "link", "set", "dev", interface, "mtu", str(rail.mtu), "up")
