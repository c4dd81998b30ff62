"""Run inside JupyterHub's hub, not by aisite: the jupyterhub release's `hub.extraConfig` holds this file's text, and
the chart's jupyterhub_config.py runs it with its `c` and `get_config` (Zero to JupyterHub 4.4.0,
files/hub/jupyterhub_config.py: "execute hub.extraConfig entries").

The site's data reaches it only as values (`custom.aisite.tenants`: each tenant's groups, namespace and
KubeSpawner profiles, rendered by platform/notebooks.py), read here as data: nothing of the site is code. A user
sees the profiles of the tenants whose groups the login provider gives them, and a server starts only in one of
those tenants' namespaces."""

from __future__ import annotations

from typing import Any


class NoTenantError(Exception):
    """A user in no tenant's groups, or a server outside the tenants' namespaces: it does not start."""


def profiles_for(tenants: list[dict[str, Any]], groups: set[str]) -> list[dict[str, Any]]:
    """The profiles of every tenant one of whose groups the user is in, in the site's order."""
    return [p for t in tenants if groups & set(t["groups"]) for p in t["profiles"]]


def allowed_namespaces(tenants: list[dict[str, Any]], groups: set[str]) -> set[str]:
    return {str(t["namespace"]) for t in tenants if groups & set(t["groups"])}


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

    c.KubeSpawner.profile_list = profile_list
    c.KubeSpawner.modify_pod_hook = modify_pod_hook


if "get_config" in globals() and "c" in globals():  # run by the hub (hub.extraConfig), not imported
    configure(globals()["c"], globals()["get_config"])
