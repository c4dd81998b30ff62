"""BMCs from Python: facts, power and one-time boot through each BMC's protocol driver (aisite/drivers/bmcs:
Redfish with sushy, IPMI with pyghmi), and the discovery of a site's out-of-band range. The bmc Ansible role drives
the BMCs during a deploy; this module serves `aisite oob discover`, provisioning, firmware and the Pulumi BMC
provider."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from aisite.drivers.bmc import ONE_TIME_BOOT, BmcError, Facts, PowerState, Target
from aisite.drivers.bmcs import BMC_PROTOCOLS

# The BMCs' facade for the rest of aisite: the drivers' types beside what this module does with them.
__all__ = [
    "NO_CREDENTIALS",
    "ONE_TIME_BOOT",
    "BmcError",
    "Discovery",
    "Facts",
    "Found",
    "PowerState",
    "Target",
    "answers",
    "discover",
    "facts",
    "may_send_credentials",
    "node_target",
    "probe",
    "route_to",
    "set_one_time_boot",
    "set_power",
    "wait_for_power",
]
from aisite.fields import secret_env
from aisite.foreign import clean
from aisite.plan import Node, Plan


def facts(t: Target) -> Facts:
    return BMC_PROTOCOLS[t.protocol].facts(t)


def node_target(plan: Plan, node: Node, secrets: Mapping[str, object]) -> Target:
    """How to reach a node's BMC: the plan's address and secret, the password from the resolved secrets."""
    bmc = node.bmc
    username = str(plan.secrets.get(bmc.credentials, {}).get("username") or "")
    password = str(secrets.get(secret_env(bmc.credentials), ""))
    return Target(bmc.protocol, bmc.address, bmc.port, username, password, bmc.tls_verify)


def set_power(t: Target, state: PowerState) -> None:
    if state not in ("on", "off"):
        raise BmcError(f"{t.address}: power {state!r} is not on or off")
    BMC_PROTOCOLS[t.protocol].power(t, state)


def wait_for_power(t: Target, state: PowerState, timeout: float = 120.0, poll: float = 2.0) -> Facts:
    """Poll until the BMC reports `state` (BMCs apply power changes after a delay); the facts then."""
    deadline = time.monotonic() + timeout
    while True:
        now = facts(t)
        if now.power == state:
            return now
        if time.monotonic() > deadline:
            raise BmcError(
                f"{t.protocol} BMC {t.address}:{t.port} still reports power {now.power} after {timeout:.0f} s"
            )
        time.sleep(poll)


def set_one_time_boot(t: Target, device: str) -> None:
    if device not in ONE_TIME_BOOT:
        raise BmcError(f"{t.address}: one-time boot {device!r} is not one of {', '.join(ONE_TIME_BOOT)}")
    BMC_PROTOCOLS[t.protocol].boot(t, device)


def answers(protocol: str, address: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something at address:port speaks the protocol (no credentials sent)."""
    return BMC_PROTOCOLS[protocol].answers(address, port, timeout)


# ------------------------------------------------------------------------------------------ discovery
def route_to(network: str) -> dict[str, Any]:
    """How this machine reaches a network (`ip route get` of its first host): dev, and gateway if routed."""
    host = str(next(ipaddress.IPv4Network(network).hosts()))
    r = subprocess.run(["ip", "-j", "route", "get", host], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        return {}
    routes: list[dict[str, Any]] = json.loads(r.stdout or "[]")
    return routes[0] if routes else {}


@dataclass(frozen=True, slots=True)
class Found:
    address: str
    protocol: str | None  # redfish | ipmi | None (nothing answered)
    node: str | None  # the declared node, if any
    facts: Facts | None = None
    error: str | None = None  # it answered, but refused the credentials or the read


@dataclass(frozen=True, slots=True)
class Discovery:
    network: str
    declared: tuple[Found, ...]  # declared BMCs that answered
    missing: tuple[Found, ...]  # declared BMCs that did not answer
    undeclared: tuple[Found, ...]  # BMCs that answered at addresses the plan does not declare

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def may_send_credentials(address: str, declared: Iterable[str], probe: ipaddress.IPv4Network | None = None) -> bool:
    """Whether discovery may try the site's BMC credentials at `address`: a declared BMC's own address, or one
    inside the range the operator named to probe. Anything else answering on the network (a rogue Redfish server
    collecting passwords, say) is only seen to answer."""
    if address in set(declared):
        return True
    return probe is not None and ipaddress.IPv4Address(address) in probe


NO_CREDENTIALS = "answers; not declared, so no credentials were sent (--probe-credentials to read it)"


def probe(
    address: str,
    node: str | None,
    target_for: Callable[[str, str], Target | None],
    protocols: Iterable[tuple[str, int]],
    timeout: float,
) -> Found:
    """What answers at one address: Redfish (HTTPS port open) or IPMI (channel capabilities answered). Its facts
    are read only where `target_for` gives credentials for that address (None: liveness alone)."""
    for protocol, port in protocols:
        if not answers(protocol, address, port, timeout):
            continue
        target = target_for(address, protocol)
        if target is None:
            return Found(address, protocol, node, error=NO_CREDENTIALS)
        try:
            return Found(address, protocol, node, facts(target))
        except BmcError as exc:
            return Found(address, protocol, node, error=clean(str(exc), 300))
        except Exception as exc:  # whatever else a hostile answer raises is that address's error
            return Found(address, protocol, node, error=clean(f"{type(exc).__name__}: {exc}", 300))
    return Found(address, None, node)


def discover(
    network: str,
    declared: dict[str, tuple[str, str, int]],
    target_for: Callable[[str, str], Target | None],
    *,
    timeout: float = 1.0,
    workers: int = 128,
) -> Discovery:
    """Probe every host address of `network`. `declared` maps BMC address -> (node, protocol, port);
    `target_for(address, protocol)` gives the credentials to try there (None: send none, see what answers)."""
    net = ipaddress.IPv4Network(network)
    gateway = net.network_address + 1
    addresses = [str(a) for a in net.hosts() if a != gateway]

    def one(address: str) -> Found:
        if address in declared:
            node, protocol, port = declared[address]
            return probe(address, node, target_for, [(protocol, port)], timeout)
        return probe(
            address,
            None,
            target_for,
            [(d.name, d.port) for d in sorted(BMC_PROTOCOLS.values(), key=lambda d: d.rank)],
            timeout,
        )

    with ThreadPoolExecutor(max_workers=workers) as pool:
        found = list(pool.map(one, addresses))
    return Discovery(
        network=str(net),
        declared=tuple(f for f in found if f.node and f.protocol),
        missing=tuple(f for f in found if f.node and not f.protocol),
        undeclared=tuple(f for f in found if not f.node and f.protocol),
    )
