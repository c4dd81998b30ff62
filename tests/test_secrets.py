"""Secrets are resolved from Pulumi config, the environment or an ansible-vault file, and never written out."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.constants import DEFAULT_VAULT_ID_MATCH
from ansible.parsing.vault import VaultLib, VaultSecret

from aisite.loader import parse_site
from aisite.plan import build_plan
from aisite.secrets import resolve
from tests.conftest import stack_data


def lab_plan(password_from: dict[str, str]):  # type: ignore[no-untyped-def]
    data = stack_data("lab")
    data["secrets"]["lab-bmc"]["password_from"] = password_from
    return build_plan(parse_site(data))


def test_environment_source() -> None:
    values, problems = resolve(lab_plan({"env": "LAB_PW"}), environ={"LAB_PW": "pw-from-env"})
    assert problems == []
    assert values == {"AISITE_SECRET_LAB_BMC": "pw-from-env"}


def test_pulumi_config_wins_over_environment() -> None:
    plan = lab_plan({"env": "LAB_PW", "pulumi_config": "aisite:labPw"})
    seen: list[str] = []

    def lookup(key: str) -> str:
        seen.append(key)
        return "pw-from-pulumi"

    values, problems = resolve(plan, environ={"LAB_PW": "pw-from-env"}, pulumi_lookup=lookup)
    assert problems == []
    assert values == {"AISITE_SECRET_LAB_BMC": "pw-from-pulumi"} and seen == ["aisite:labPw"]


def test_vault_file_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vault_pw = tmp_path / "vault-pass"
    vault_pw.write_text("vault-key\n")
    secret_file = tmp_path / "bmc.vault"
    vault = VaultLib([(DEFAULT_VAULT_ID_MATCH, VaultSecret(b"vault-key"))])
    secret_file.write_bytes(vault.encrypt("pw-from-vault\n"))
    assert b"pw-from-vault" not in secret_file.read_bytes()
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(vault_pw))
    values, problems = resolve(lab_plan({"vault_file": str(secret_file)}), environ={})
    assert problems == [] and values == {"AISITE_SECRET_LAB_BMC": "pw-from-vault"}
    vault_pw.write_text("wrong-key\n")
    values, problems = resolve(lab_plan({"vault_file": str(secret_file)}), environ={})
    assert values == {} and "cannot decrypt" in problems[0].message


def test_missing_secret_names_every_source_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    values, problems = resolve(lab_plan({"env": "NOPE_PW", "vault_file": "/nonexistent"}), environ={})
    assert values == {}
    assert [str(p) for p in problems] == ["site.secrets.lab-bmc.password_from: vault file /nonexistent does not exist"]
    values, problems = resolve(lab_plan({"env": "NOPE_PW"}), environ={"NOPE_PW": ""})
    assert "environment variable NOPE_PW" in problems[0].message


def test_bmc_account_secrets_are_resolved_too() -> None:
    data = stack_data("lab")
    data["secrets"]["ops"] = {"username": "ops", "password_from": {"env": "OPS_PW"}}
    data["oob"]["accounts"] = [{"secret": "ops", "role": "ReadOnly"}]
    p = build_plan(parse_site(data, "test"))
    values, problems = resolve(p, environ={"AISITE_LAB_BMC_PASSWORD": "x"})
    assert [str(q).split(":")[0] for q in problems] == ["site.secrets.ops.password_from"], problems
    assert "OPS_PW" in str(problems[0])
    values, problems = resolve(p, environ={"AISITE_LAB_BMC_PASSWORD": "x", "OPS_PW": "y"})
    assert not problems and sorted(values.values()) == ["x", "y"]
