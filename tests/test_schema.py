"""The JSON Schema (`aisite schema`) and the validator agree: both come from one model, and the loader reads a stack
strictly as JSON is read, so every document aisite accepts the schema accepts (and what the schema refuses, aisite
refuses). The schema cannot say everything aisite checks (a name's pattern, cross-key checks): the other way round
holds only for the types and literals the examples below try."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aisite.errors import SiteError
from aisite.loader import load_site, parse_site
from aisite.schema import SCHEMA_ID, schema, site_schema
from tests.conftest import ROOT, run_cli, stack_data

VALIDATOR = jsonschema.Draft202012Validator(site_schema())
LAB = stack_data("lab")


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at] if at else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*at, i))
    return out


PATHS = _paths(LAB)
VALUES = st.one_of(
    st.integers(-3, 200_000),
    st.integers(0, 100).map(str),
    st.booleans(),
    st.sampled_from(["on", "off", "yes", "no", "true", "64", "dgx-h100", "dgx-h999", "10.250.1.7", ""]),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=12),
    st.lists(st.integers(0, 9), max_size=3),
    st.dictionaries(st.sampled_from(["count", "name", "x"]), st.integers(0, 9), max_size=2),
)


def _aisite_accepts(data: dict[str, Any]) -> bool:
    try:
        parse_site(data)
    except SiteError:
        return False
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
@given(path=st.sampled_from(PATHS), value=VALUES)
def test_every_document_aisite_accepts_the_schema_accepts(path: tuple[Any, ...], value: Any) -> None:
    data = copy.deepcopy(LAB)
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    if _aisite_accepts(data):
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in VALIDATOR.iter_errors(data)]
        assert not errors, errors


@pytest.mark.parametrize(
    ("path", "value", "said"),
    [
        (("gpu_nodes", 0, "count"), "2", "a number or boolean is written without quotes"),
        (("gpu_nodes", 0, "model"), "dgx-h999", "unknown GPU server model"),
        (("control_plane", "count"), True, "Input should be a valid integer"),
        (("oob", "tls_verify"), "yes", "a number or boolean is written without quotes"),
        (("gpu_nodes", 0, "name_pattern"), True, "quote it"),
    ],
)
def test_what_the_schema_refuses_by_type_or_literal_aisite_refuses_saying_why(
    path: tuple[Any, ...], value: Any, said: str
) -> None:
    data = copy.deepcopy(LAB)
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    assert list(VALIDATOR.iter_errors(data)), "the schema accepts it"
    with pytest.raises(SiteError) as caught:
        parse_site(data)
    where = "site." + ".".join(f"[{k}]" if isinstance(k, int) else k for k in path).replace(".[", "[")
    assert any(p.path == where and said in p.message for p in caught.value.problems), caught.value.problems


def test_yaml_reads_on_and_off_as_text_as_pulumi_does(tmp_path: Path) -> None:
    """`power: on` unquoted: YAML 1.1 made it a boolean; the stack is read as YAML 1.2 (Pulumi's reader, the
    schema's validators), so it is the text "on"."""
    text = (ROOT / "stacks" / "Pulumi.lab.yaml").read_text()
    assert "    oob:\n" in text
    stack = tmp_path / "Pulumi.lab.yaml"
    stack.write_text(text.replace("    oob:\n", "    oob:\n      power: on\n", 1))
    assert load_site(stack).oob.power == "on"
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text(text.replace("    oob:\n", "    oob:\n      power: true\n", 1))
    r = run_cli("validate", str(bad))
    assert r.returncode == 2 and "site.oob.power: Input should be 'on' or 'off' (got True)" in r.stderr
    assert "quote it" in r.stderr


def test_aisite_schema_prints_the_documented_schema_with_a_stable_id() -> None:
    r = run_cli("schema")
    assert r.returncode == 0, r.stderr
    printed = json.loads(r.stdout)
    assert printed == schema() == json.loads((ROOT / "docs" / "reference" / "stack.schema.json").read_text())
    assert printed["$id"] == SCHEMA_ID
    models = printed["$defs"]["GpuGroup"]["properties"]["model"]
    assert {"dgx-h100", "generic"} <= set(models["enum"])


def test_yaml_1_2_numbers_dates_and_tags(tmp_path: Path) -> None:
    """YAML 1.1 read a MAC of digits as a sexagesimal number and a date as a date; 1.2 (Pulumi's reader) reads both
    as text. A value JSON cannot hold (an explicit !!binary) is a problem with its path, not a traceback."""
    from aisite.loader import read_site_config

    text = (ROOT / "stacks" / "Pulumi.lab.yaml").read_text()
    stack = tmp_path / "Pulumi.lab.yaml"
    stack.write_text(
        text.replace(
            "    oob:\n",
            "    oob:\n      asn_probe: 0x10\n      mac: 10:20:30:40:50:55\n      when: 2026-12-07\n      mode: 0755\n",
            1,
        )
    )
    oob = read_site_config(stack)["oob"]
    assert (oob["mac"], oob["when"], oob["mode"], oob["asn_probe"]) == ("10:20:30:40:50:55", "2026-12-07", 755, 16)
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text(text.replace("    oob:\n", "    oob:\n      power: !!binary aGVsbG8=\n", 1))
    r = run_cli("validate", str(bad))
    assert r.returncode == 2 and "site.oob.power: a bytes is not a stack value" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
