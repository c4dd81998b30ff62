"""Secrets are resolved from Pulumi config, the environment or an ansible-vault file, and never written out."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.constants import DEFAULT_VAULT_ID_MATCH
from ansible.parsing.vault import VaultLib, VaultSecret

from aisite.errors import SiteError
from aisite.lab import password
from aisite.loader import parse_site
from aisite.plan import build_plan
from aisite.secrets import Use, limit_problems, resolve, uses
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


def test_an_ipmi_password_over_20_bytes_names_the_secret_its_bmcs_and_the_limit() -> None:
    plan = lab_plan({"env": "LAB_PW"})
    _, problems = resolve(plan, environ={"LAB_PW": "x" * 24})
    assert [str(p) for p in problems] == [
        "site.secrets.lab-bmc: the password is 24 bytes; IPMI 2.0 BMCs accept at most 20 "
        "(used by gpu02-bmc (10.250.0.4), infer01-bmc (10.250.0.240), stor01-bmc (10.250.0.5), "
        "stor02-bmc (10.250.0.6), stor03-bmc (10.250.0.7))"
    ]
    assert resolve(plan, environ={"LAB_PW": "x" * 20})[1] == []
    # Bytes, not characters: a non-ASCII password is also refused for its characters.
    found = [str(p) for p in resolve(plan, environ={"LAB_PW": "é" * 11})[1]]
    assert any("22 bytes" in p for p in found) and any("outside ASCII" in p for p in found), found


def test_bmc_limits_every_problem_at_once() -> None:
    used = [Use("n1-bmc", "ipmi", "10.0.0.1"), Use("n2-bmc", "redfish", "10.0.0.2")]
    found = [p.message for p in limit_problems("s", "operator:with-a-colon", "line\nbreak", used)]
    assert len(found) == 3, found
    assert any("password contains a control character" in m for m in found)
    assert any("user name 'operator:with-a-colon' is 21 bytes; IPMI BMCs accept at most 16" in m for m in found)
    assert any("contains ':'" in m and "n2-bmc (10.0.0.2)" in m for m in found)
    # Redfish alone: no IPMI length limits apply.
    assert limit_problems("s", "admin", "y" * 40, used[1:]) == []


def test_an_account_secret_is_held_to_redfish_rules_only() -> None:
    data = stack_data("lab")
    data["secrets"]["ops"] = {"username": "ops.team", "password_from": {"env": "OPS_PW"}}
    data["oob"]["accounts"] = [{"secret": "ops", "role": "ReadOnly"}]
    p = build_plan(parse_site(data, "test"))
    assert [u.host for u in uses(p)["ops"]] == ["cp01-bmc", "gpu01-bmc"]  # the Redfish BMCs keep accounts
    _, problems = resolve(p, environ={"AISITE_LAB_BMC_PASSWORD": "x", "OPS_PW": "z" * 30})
    assert problems == []
    # ':' cannot travel in HTTP Basic authentication: a user name is an account name, which has none.
    data["secrets"]["ops"]["username"] = "ops:team"
    with pytest.raises(SiteError) as exc:
        parse_site(data, "test")
    assert [str(q) for q in exc.value.problems] == [
        "site.secrets.ops.username: 'ops:team' is not an account name (letters, digits, '.', '_', '@', '-')",
        "site: cross-key checks not run: site.secrets.ops.username is required",
    ]


def test_the_lab_password_is_generated_kept_and_replaced_when_refused(tmp_path: Path) -> None:
    path = tmp_path / "lab" / "bmc-password"
    assert "generated" in str(password.ensure(path))
    value = path.read_text().strip()
    assert len(value) == 16 and (path.stat().st_mode & 0o777) == 0o600
    assert password.refusals("lab", value) == []
    assert password.ensure(path) is None and path.read_text().strip() == value  # kept
    path.write_text("A" * 24 + "\n")  # what an earlier make lab generated
    said = password.ensure(path)
    assert said is not None and "replaced" in said and "24 bytes" in said and "at most 20" in said
    assert len(path.read_text().strip()) == 16 and (path.stat().st_mode & 0o777) == 0o600
