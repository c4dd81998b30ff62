"""Resolving the secrets a plan references, without ever writing them down.

A secret reaches Ansible only as an environment variable of the ansible-runner process (`secret_env`); it is
not put in the inventory, the private data directory, or any log.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from aisite.drivers.bmcs import BMC_PROTOCOLS
from aisite.errors import Problem
from aisite.fields import secret_env
from aisite.plan import Plan

# What BMCs accept. IPMI 2.0 (RAKP) carries a password of at most 20 bytes and a user name of at most 16; ipmitool
# refuses longer ones before it sends anything. HTTP Basic authentication (Redfish) splits `user:password` at the
# first colon (RFC 7617), and BMCs differ in how they decode bytes outside printable ASCII.


@dataclass(frozen=True, slots=True)
class Use:
    """One place a secret is used: a BMC's credentials, or an account kept on the Redfish BMCs."""

    host: str  # the inventory host, `<node>-bmc`
    protocol: str
    address: str


def uses(plan: Plan) -> dict[str, list[Use]]:
    """secret name -> where it is used: every BMC's credentials, then the accounts kept on the Redfish BMCs."""
    out: dict[str, list[Use]] = {}
    for n in plan.nodes:
        if n.bmc.credentials:
            out.setdefault(n.bmc.credentials, []).append(Use(f"{n.name}-bmc", n.bmc.protocol, n.bmc.address))
    keeping = [n for n in plan.nodes if BMC_PROTOCOLS[n.bmc.protocol].accounts]
    for a in plan.bmc_accounts:
        out.setdefault(a["secret"], []).extend(Use(f"{n.name}-bmc", n.bmc.protocol, n.bmc.address) for n in keeping)
    return out


def referenced(plan: Plan) -> list[str]:
    """Secrets the plan uses, in first-use order."""
    return list(uses(plan))


def username_of(plan: Plan, name: str) -> str:
    return str(plan.secrets.get(name, {}).get("username") or "")


def _hosts(used: list[Use], protocol: str | None = None) -> str:
    hosts = list(dict.fromkeys(f"{u.host} ({u.address})" for u in used if protocol in (None, u.protocol)))
    return ", ".join(hosts[:5]) + (f" and {len(hosts) - 5} more" if len(hosts) > 5 else "")


def limit_problems(name: str, username: str, password: str, used: list[Use]) -> list[Problem]:
    """What keeps the BMCs that use secret `name` from accepting it: every problem, each naming the BMCs."""
    path = f"site.secrets.{name}"
    out: list[Problem] = []
    protocols = {u.protocol for u in used}
    for what, value in (("user name", username), ("password", password)):
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
            out.append(Problem(path, f"the {what} contains a control character (a newline, a tab...): no BMC takes it"))
        elif not value.isascii():
            out.append(
                Problem(
                    path,
                    f"the {what} has characters outside ASCII, which BMCs decode differently (used by {_hosts(used)})",
                )
            )
    for protocol in sorted(protocols):
        d = BMC_PROTOCOLS[protocol]
        hosts = _hosts(used, protocol)
        size = len(password.encode())
        if d.password_max is not None and size > d.password_max:
            out.append(
                Problem(
                    path,
                    f"the password is {size} bytes; {d.password_who or d.title + ' BMCs'} accept at most "
                    f"{d.password_max} (used by {hosts})",
                )
            )
        if d.username_max is not None and len(username.encode()) > d.username_max:
            out.append(
                Problem(
                    path,
                    f"the user name {username!r} is {len(username.encode())} bytes; {d.title} BMCs accept at most "
                    f"{d.username_max} (used by {hosts})",
                )
            )
        if d.username_forbids is not None and d.username_forbids[0] in username:
            out.append(
                Problem(
                    path,
                    f"the user name {username!r} contains {d.username_forbids[0]!r}, {d.username_forbids[1]} "
                    f"(used by the {d.title} BMCs {hosts})",
                )
            )
    return out


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
    missing: list[str] | None = None,
) -> tuple[dict[str, object], list[Problem]]:
    """env variable for Ansible -> secret value, and a problem for every secret that cannot be found.

    Sources are tried in order: Pulumi secret config (under `pulumi up`), the environment, an ansible-vault file.
    A value found is checked against what the BMCs using it accept (`limit_problems`); a Pulumi output, whose
    value is not known yet, is left to the caller to check. With `missing`, a secret found nowhere is named there
    instead of being a problem.
    """
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    problems: list[Problem] = []
    used = uses(plan)
    for name in used:
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
        if value is None and missing is not None:
            missing.append(name)  # the caller can do without it (a preview): told, not a problem
        elif value is None:
            problems.append(Problem(path, f"secret {name!r} was not found (tried {', '.join(tried) or 'nothing'})"))
        else:
            if isinstance(value, str):
                problems += limit_problems(name, username_of(plan, name), value, used[name])
            values[secret_env(name)] = value
    return values, problems
