"""`generic`: a management or out-of-band switch aisite does not configure (its cables are still planned and
checked); ports named portN."""

from __future__ import annotations

from aisite.drivers.switch_os import SwitchOs


def port(port: int, speed_gbps: int, split: int, lanes: int) -> str:
    return f"port{port}"


DRIVER = SwitchOs(name="generic", title="generic", role="", port=port)
