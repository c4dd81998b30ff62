"""The BMCs: a node's BMC, the site's defaults and the local accounts kept on them (protocols from their drivers)."""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from aisite.drivers.bmcs import BMC_PROTOCOLS
from aisite.fields import (
    Mac,
    SecretName,
)
from aisite.model.base import Strict


def _bmc_protocol(value: str) -> str:
    if value not in BMC_PROTOCOLS:
        raise ValueError(f"{value!r} is not a BMC protocol aisite drives; known: {', '.join(_BMC_NAMES)}")
    return value


# The BMC protocols, from their drivers (aisite/drivers/bmcs), in the order discovery asks them.
_BMC_NAMES = [d.name for d in sorted(BMC_PROTOCOLS.values(), key=lambda d: d.rank)]

BmcProtocolName = Annotated[str, AfterValidator(_bmc_protocol), Field(json_schema_extra={"enum": _BMC_NAMES})]


class BmcSpec(Strict):
    protocol: BmcProtocolName | None = None
    address: IPv4Address | None = None
    mac: Mac | None = None
    credentials: SecretName | None = None
    port: Annotated[int, Field(ge=1, le=65535)] | None = None
    power: Literal["on", "off"] | None = None


class BmcAccount(Strict):
    """A local account the BMC role keeps on every Redfish BMC: user name and password from the named secret."""

    secret: SecretName
    role: Literal["Administrator", "Operator", "ReadOnly"] = "Operator"


class OobDefaults(Strict):
    protocol: BmcProtocolName = "redfish"
    credentials: SecretName | None = None
    # The power state the BMC role holds every node in (a node's or group's bmc.power overrides it).
    power: Literal["on", "off"] = "on"
    # Check the BMCs' Redfish TLS certificates; many ship self-signed ones, so a site may turn this off.
    tls_verify: bool = True
    # Accounts kept on every Redfish BMC (besides the one in credentials); NTP comes from site.ntp_servers.
    accounts: list[BmcAccount] = []
