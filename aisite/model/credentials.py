"""Secrets (where each one's password comes from) and the admin users aisite keeps on the nodes."""

from __future__ import annotations

from aisite.fields import (
    AbsPath,
    Account,
    EnvName,
    PulumiKey,
    UnixUser,
)
from aisite.model.base import SshKey, Strict


class PasswordSource(Strict):
    """Where a secret's password comes from; the value itself is never in the stack file."""

    env: EnvName | None = None
    pulumi_config: PulumiKey | None = None
    vault_file: AbsPath | None = None


class Secret(Strict):
    username: Account
    password_from: PasswordSource


class AdminUser(Strict):
    """A site administrator: a local account on every node, SSH keys only, sudo when asked."""

    name: UnixUser
    ssh_keys: list[SshKey]
    sudo: bool = True
