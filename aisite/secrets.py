"""Resolving the secrets a plan references, without ever writing them down.

A secret reaches Ansible only as an environment variable of the ansible-runner process (`secret_env`); it is
not put in the inventory, the private data directory, or any log.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from aisite.errors import Problem
from aisite.plan import Plan
from aisite.render.inventory import secret_env


def referenced(plan: Plan) -> list[str]:
    """Secrets the plan uses (every BMC's credentials, then the BMC accounts), in first-use order."""
    names = [n.bmc.credentials for n in plan.nodes if n.bmc.credentials]
    return list(dict.fromkeys([*names, *(a["secret"] for a in plan.bmc_accounts)]))


def _vault_password() -> bytes | None:
    path = os.environ.get("ANSIBLE_VAULT_PASSWORD_FILE")
    return Path(path).read_bytes().strip() if path else None


def decrypt_vault_file(path: Path, vault_password: bytes) -> str:
    from ansible.constants import DEFAULT_VAULT_ID_MATCH
    from ansible.parsing.vault import VaultLib, VaultSecret

    vault = VaultLib([(DEFAULT_VAULT_ID_MATCH, VaultSecret(vault_password))])
    plain: bytes = vault.decrypt(path.read_bytes())
    return plain.decode().rstrip("\n")


def resolve(
    plan: Plan,
    environ: Mapping[str, str] | None = None,
    pulumi_lookup: Callable[[str], object | None] | None = None,
) -> tuple[dict[str, object], list[Problem]]:
    """env variable for Ansible -> secret value, and a problem for every secret that cannot be found.

    Sources are tried in order: Pulumi secret config (under `pulumi up`), the environment, an ansible-vault file.
    """
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    problems: list[Problem] = []
    for name in referenced(plan):
        src = plan.secrets.get(name, {})
        path = f"site.secrets.{name}.password_from"
        value: object | None = None
        tried: list[str] = []
        if pulumi_lookup and src.get("pulumi_config"):
            value = pulumi_lookup(str(src["pulumi_config"]))
            tried.append(f"Pulumi secret config {src['pulumi_config']}")
        if value is None and src.get("env"):
            value = env.get(str(src["env"])) or None
            tried.append(f"environment variable {src['env']}")
        if value is None and src.get("vault_file"):
            vault_file = Path(str(src["vault_file"]))
            tried.append(f"vault file {vault_file}")
            password = _vault_password()
            if not vault_file.is_file():
                problems.append(Problem(path, f"vault file {vault_file} does not exist"))
                continue
            if password is None:
                problems.append(Problem(path, "vault_file needs ANSIBLE_VAULT_PASSWORD_FILE to be set"))
                continue
            try:
                value = decrypt_vault_file(vault_file, password)
            except Exception as exc:  # ansible raises AnsibleError subclasses and ValueError alike
                problems.append(Problem(path, f"cannot decrypt {vault_file}: {exc}"))
                continue
        if value is None:
            problems.append(Problem(path, f"secret {name!r} was not found (tried {', '.join(tried) or 'nothing'})"))
        else:
            values[secret_env(name)] = value
    return values, problems
