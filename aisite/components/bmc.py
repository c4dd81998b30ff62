"""A node's BMC state as a Pulumi dynamic resource: power (and a one-time boot device) held as declared, read back
so `pulumi refresh` shows a node powered off by hand, and `pulumi up` then puts it back. The provider talks to
the BMC itself (aisite.oob: sushy for Redfish, pyghmi for IPMI); its methods are plain functions of their
inputs, tested against the lab's emulators without the engine.

Deleting the resource leaves the node as it is: forgetting a node in Pulumi must not power it off. New
resources are protected (`protect=True`) unless the caller says otherwise."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from aisite import oob

# Inputs whose change means another BMC: replace rather than update.
REPLACE_ON = ("node", "protocol", "address", "port")


def _target(props: dict[str, Any]) -> oob.Target:
    return oob.Target(
        protocol=str(props["protocol"]),
        address=str(props["address"]),
        port=int(props["port"]),
        username=str(props["username"]),
        password=str(props["password"]),
        tls_verify=bool(props.get("tls_verify", True)),
        timeout=float(props.get("timeout", 10)),
    )


def _observed(props: dict[str, Any], facts: oob.Facts) -> dict[str, Any]:
    """The inputs, with `power` as the BMC reports it, and what it says about the node."""
    return props | {
        "power": facts.power,
        "serial": facts.serial,
        "manufacturer": facts.manufacturer,
        "model": facts.model,
        "uuid": facts.uuid,
        "macs": list(facts.macs),
    }


class BmcStateProvider(ResourceProvider):
    def _apply(self, props: dict[str, Any], current: oob.Facts | None) -> oob.Facts:
        t = _target(props)
        boot = props.get("one_time_boot")
        if boot:
            oob.set_one_time_boot(t, str(boot))
        if current is None or current.power != props["power"]:
            oob.set_power(t, str(props["power"]))
        return oob.wait_for_power(t, str(props["power"]), float(props.get("power_timeout", 120)))

    def create(self, props: dict[str, Any]) -> CreateResult:
        t = _target(props)
        facts = self._apply(props, oob.facts(t))
        return CreateResult(id_=f"{props['node']}-bmc", outs=_observed(props, facts))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        return ReadResult(id_=id_, outs=_observed(props, oob.facts(_target(props))))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = [k for k in REPLACE_ON if olds.get(k) != news.get(k)]
        # `power` in olds is what the BMC reported at the last create, update or refresh: a node switched off by
        # hand shows here after `pulumi refresh`.
        changed = [
            k for k in ("power", "one_time_boot", "username", "password", "tls_verify") if olds.get(k) != news.get(k)
        ]
        return DiffResult(
            changes=bool(replaces or changed),
            replaces=replaces,
            stables=[k for k in REPLACE_ON if k not in replaces],
            delete_before_replace=False,
        )

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        t = _target(news)
        facts = self._apply(news, oob.facts(t))
        return UpdateResult(outs=_observed(news, facts))

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        # The node stays as it is: removing it from the site must not power it off.
        return None


@dataclass(frozen=True)
class BmcStateArgs:
    node: str
    protocol: str
    address: str
    port: int
    username: str
    password: pulumi.Input[str]
    power: str = "on"
    tls_verify: bool = True
    one_time_boot: str | None = None


class BmcState(pulumi.dynamic.Resource):
    """Power (and an optional one-time boot) of one node, held through its BMC."""

    power: pulumi.Output[str]
    serial: pulumi.Output[str | None]
    macs: pulumi.Output[list[str]]

    def __init__(self, name: str, args: BmcStateArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        props: dict[str, Any] = {
            "node": args.node,
            "protocol": args.protocol,
            "address": args.address,
            "port": args.port,
            "username": args.username,
            "password": pulumi.Output.secret(args.password),
            "power": args.power,
            "tls_verify": args.tls_verify,
            "one_time_boot": args.one_time_boot,
            "serial": None,
            "manufacturer": None,
            "model": None,
            "uuid": None,
            "macs": None,
        }
        opts = pulumi.ResourceOptions.merge(pulumi.ResourceOptions(protect=True), opts)
        super().__init__(BmcStateProvider(), name, props, opts)
