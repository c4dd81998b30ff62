"""The lab's Redfish BMC emulator: sushy-tools' fake driver with a BIOS and firmware versions, as its libvirt
driver has them (the fake driver raises NotSupported for both). Run inside the BMC container by sushy-tools' own
Python, in place of `sushy-emulator` (it calls the same main); never imported by aisite itself.

Settings PATCHed to /BIOS/Settings wait, as a real BMC's pending settings do, until the system is next reset or
powered on; GET /BIOS shows the current ones, GET /BIOS/Settings the current with the pending over them.
SimpleUpdate (sushy-tools' own UpdateService) raises BiosVersion's minor number and ignores the image: no image is
fetched or flashed here."""

from __future__ import annotations

import sys
from typing import Any

import flask
from sushy_tools import error
from sushy_tools.emulator.resources.systems import fakedriver

# The libvirt driver's defaults (sushy_tools.emulator.resources.systems.libvirtdriver), so the emulated BIOS
# offers the same attributes whichever driver a lab uses.
DEFAULT_BIOS = {
    "BootMode": "Uefi",
    "EmbeddedSata": "Raid",
    "L2Cache": "10x256 KB",
    "NicBoot1": "NetworkBoot",
    "NumCores": "10",
    "QuietBoot": "true",
    "ProcTurboMode": "Enabled",
    "SecureBootStatus": "Enabled",
    "SerialNumber": "QPX12345",
    "SysPassword": "",
}
DEFAULT_VERSIONS = {"BiosVersion": "1.0.0"}


class LabDriver(fakedriver.FakeDriver):  # type: ignore[misc]
    def get_bios(self, identity: str) -> dict[str, Any]:
        system = self._get(identity)
        current = dict(system.get("bios") or DEFAULT_BIOS)
        if flask.has_request_context() and flask.request.path.rstrip("/").endswith("/BIOS/Settings"):
            return current | dict(system.get("bios_pending") or {})
        return current

    def set_bios(self, identity: str, attributes: dict[str, Any]) -> None:
        system = self._get(identity)
        known = dict(system.get("bios") or DEFAULT_BIOS)
        unknown = sorted(set(attributes or {}) - set(known))
        if not isinstance(attributes, dict) or not attributes or unknown:
            raise error.BadRequest(f"unknown BIOS attributes: {', '.join(unknown) or 'none given'}")
        self._update(system, bios_pending=dict(system.get("bios_pending") or {}) | attributes)

    def reset_bios(self, identity: str) -> None:
        self._update(identity, bios_pending=dict(DEFAULT_BIOS))

    def get_versions(self, identity: str) -> dict[str, str]:
        return dict(self._get(identity).get("versions") or DEFAULT_VERSIONS)

    def set_versions(self, identity: str, firmware_versions: dict[str, str]) -> None:
        system = self._get(identity)
        self._update(system, versions=self.get_versions(identity) | dict(firmware_versions))

    def set_power_state(self, identity: str, state: str) -> None:
        was = self._get(identity)["power_state"]
        super().set_power_state(identity, state)
        system = self._get(identity)
        pending = system.get("bios_pending")
        starts = "Restart" in state or state == "PowerCycle" or (state in ("On", "ForceOn") and was == "Off")
        if starts and pending:
            self._update(system, bios=dict(system.get("bios") or DEFAULT_BIOS) | pending, bios_pending=None)


fakedriver.FakeDriver = LabDriver

if __name__ == "__main__":
    from sushy_tools.emulator import main

    sys.exit(main.main())
