"""Finding a kind's drivers: every module of a package holding its DRIVER, by name (the switch OSes' and the BMC
protocols' registries are each this over their package)."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Protocol, TypeVar


class Named(Protocol):
    @property
    def name(self) -> str: ...


D = TypeVar("D", bound=Named)


def discover(path: list[str], package: str, kind: type[D]) -> dict[str, D]:
    """Every module of the package at `path` (named `package`), each holding its DRIVER (a `kind`), by name; a
    module without one, or two naming one driver, is refused when the registry is built (at import)."""
    found: dict[str, D] = {}
    for info in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        driver = getattr(importlib.import_module(f"{package}.{info.name}"), "DRIVER", None)
        if not isinstance(driver, kind):
            raise TypeError(f"{package}.{info.name}: a driver module holds DRIVER, a {kind.__name__}")
        if driver.name in found:
            raise ValueError(f"{kind.__name__} {driver.name!r} registered twice")
        found[driver.name] = driver
    return found
