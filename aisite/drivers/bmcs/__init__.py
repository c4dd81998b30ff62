"""The BMC protocols aisite drives (Redfish, IPMI): each a module of this package holding its `DRIVER` (an
aisite.drivers.bmc.BmcProtocol), found here, so a new protocol is one module (plus its tasks in the bmc role)."""

from __future__ import annotations

from aisite.drivers.bmc import BmcProtocol
from aisite.drivers.registry import discover

BMC_PROTOCOLS: dict[str, BmcProtocol] = discover(__path__, __name__, BmcProtocol)
