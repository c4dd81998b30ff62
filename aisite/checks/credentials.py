"""Credentials and admin users: secrets named, never written in the stack."""

from __future__ import annotations

from aisite.errors import Problem
from aisite.fields import secret_env
from aisite.model import (
    BmcSpec,
    NodeGroup,
    Site,
)


def check_admin_users(site: Site, out: list[Problem]) -> None:
    seen: dict[str, int] = {}
    for i, user in enumerate(site.admin_users):
        if user.name in seen:
            out.append(
                Problem(f"site.admin_users[{i}].name", f"{user.name!r} is already site.admin_users[{seen[user.name]}]")
            )
        seen.setdefault(user.name, i)
        if user.name == "root":
            out.append(
                Problem(f"site.admin_users[{i}].name", "root is not an admin user: keys for root are the deploy's")
            )
        if not user.ssh_keys:
            out.append(Problem(f"site.admin_users[{i}].ssh_keys", "no key: admin users log in with SSH keys only"))


def check_credentials(site: Site, groups: list[tuple[str, NodeGroup]], out: list[Problem]) -> None:
    envs: dict[str, str] = {}
    for name, secret in site.secrets.items():
        env = secret_env(name)
        if env in envs:
            out.append(
                Problem(
                    f"site.secrets.{name}",
                    f"reaches Ansible as {env}, as secret {envs[env]!r} does: one would get the other's password; "
                    "rename one",
                )
            )
        envs.setdefault(env, name)
        src = secret.password_from
        if not (src.env or src.pulumi_config or src.vault_file):
            out.append(
                Problem(f"site.secrets.{name}.password_from", "names no source: set env, pulumi_config or vault_file")
            )

    def ref(where: str, value: str) -> None:
        if value not in site.secrets:
            known = ", ".join(sorted(site.secrets)) or "none"
            out.append(Problem(where, f"secret {value!r} is not declared under site.secrets (declared: {known})"))

    if site.oob.credentials:
        ref("site.oob.credentials", site.oob.credentials)
    seen: set[str] = set()
    for i, account in enumerate(site.oob.accounts):
        ref(f"site.oob.accounts[{i}].secret", account.secret)
        user = site.secrets[account.secret].username if account.secret in site.secrets else None
        if user is not None and user in seen:
            out.append(Problem(f"site.oob.accounts[{i}].secret", f"user {user!r} is already an account above"))
        if user is not None:
            seen.add(user)
    for path, group in groups:
        gspec: BmcSpec | None = group.bmc
        if gspec and gspec.credentials:
            ref(f"{path}.bmc.credentials", gspec.credentials)
        group_has = bool(site.oob.credentials or (gspec and gspec.credentials))
        missing = 0
        for i in range(group.size):
            spec = group.nodes[i].bmc if i < len(group.nodes) else None
            if spec and spec.credentials:
                ref(f"{path}.nodes[{i}].bmc.credentials", spec.credentials)
            elif not group_has:
                missing += 1
        if missing:
            out.append(
                Problem(
                    f"{path}.bmc.credentials",
                    f"{missing} BMC(s) have no credentials: set site.oob.credentials, {path}.bmc.credentials or "
                    "each node's bmc.credentials to a secret under site.secrets",
                )
            )
