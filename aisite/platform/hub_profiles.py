"""Run inside JupyterHub's hub, not by aisite: the jupyterhub release's `hub.extraConfig` holds this file's text, and
the chart's jupyterhub_config.py runs it with its `c` and `get_config` (Zero to JupyterHub 4.4.0,
files/hub/jupyterhub_config.py: "execute hub.extraConfig entries").

The site's data reaches it only as values (`custom.aisite.tenants`: each tenant's groups, namespace and
KubeSpawner profiles, rendered by platform/notebooks.py), read here as data: nothing of the site is code. A user
sees the profiles of the tenants whose groups the login provider gives them, and a server starts only in one of
those tenants' namespaces."""

from __future__ import annotations

import copy
from typing import Any


class NoTenantError(Exception):
    """A user in no tenant's groups, or a server outside the tenants' namespaces: it does not start."""


def profiles_for(tenants: list[dict[str, Any]], groups: set[str]) -> list[dict[str, Any]]:
    """The profiles of every tenant one of whose groups the user is in, in the site's order."""
    return [p for t in tenants if groups & set(t["groups"]) for p in t["profiles"]]


def allowed_namespaces(tenants: list[dict[str, Any]], groups: set[str]) -> set[str]:
    return {str(t["namespace"]) for t in tenants if groups & set(t["groups"])}


def overridden(tenants: list[dict[str, Any]]) -> list[str]:
    """Every KubeSpawner setting a profile or one of its options' choices overrides."""
    keys: set[str] = set()
    for t in tenants:
        for p in t["profiles"]:
            keys |= set(p.get("kubespawner_override", {}))
            for option in p.get("profile_options", {}).values():
                for choice in option.get("choices", {}).values():
                    keys |= set(choice.get("kubespawner_override", {}))
    return sorted(keys)


def reset_profile(spawner: Any, keys: list[str]) -> None:
    """KubeSpawner applies a profile by setting (and merging dicts into) the spawner's own settings, and JupyterHub
    keeps one spawner per server across its starts: without this, an earlier profile's settings stay (after an 8-GPU
    profile, a CPU profile's pod asked 8 GPUs with the GPU image and node selector). The first time a spawner
    starts, its settings as configured are kept; each later start puts them back before the chosen profile
    applies."""
    baseline = getattr(spawner, "_aisite_baseline", None)
    if baseline is None:
        spawner._aisite_baseline = {k: copy.deepcopy(getattr(spawner, k)) for k in keys}
        return
    for k, v in baseline.items():
        setattr(spawner, k, copy.deepcopy(v))


def configure(c: Any, get_config: Any) -> None:
    tenants: list[dict[str, Any]] = get_config("custom.aisite.tenants", [])

    def groups(spawner: Any) -> set[str]:
        return {g.name for g in spawner.user.groups}

    def profile_list(spawner: Any) -> list[dict[str, Any]]:
        return profiles_for(tenants, groups(spawner))

    def modify_pod_hook(spawner: Any, pod: Any) -> Any:
        # Called once the chosen profile applies (KubeSpawner 7.0.0's _start: load_user_options, then the pod).
        # KubeSpawner falls back to the hub's own namespace when no profile applies: never start a server there.
        if spawner.namespace not in allowed_namespaces(tenants, groups(spawner)):
            raise NoTenantError(f"{spawner.user.name}: no tenant of theirs has the namespace {spawner.namespace}")
        return pod

    keys = overridden(tenants)

    def pre_spawn_hook(spawner: Any) -> None:
        # JupyterHub runs it before KubeSpawner's start, which applies the chosen profile (load_user_options).
        reset_profile(spawner, keys)

    c.KubeSpawner.profile_list = profile_list
    c.KubeSpawner.modify_pod_hook = modify_pod_hook
    c.KubeSpawner.pre_spawn_hook = pre_spawn_hook


if "get_config" in globals() and "c" in globals():  # run by the hub (hub.extraConfig), not imported
    configure(globals()["c"], globals()["get_config"])
