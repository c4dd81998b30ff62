"""Hostile stack files: hypothesis mutates every shipped stack (types, sizes, duplicates, template, shell, newline
and path payloads in every string field, format specs in name patterns, YAML bombs) and runs each mutant through
validate, plan and render in this one process. Every run must end as the CLI would with exit 0 or exit 2
(`SiteError`, every problem with its path), never with another exception; no site string may be evaluated as a
template (the rendered inventory is read and templated by Ansible's own loader and Templar, and a canary file
must not appear); render writes nothing outside its output directory.

Each failure found so far stays below as a regression case (REGRESSIONS), run on every stack before the random
examples."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.parsing.yaml.loader import AnsibleLoader
from ansible.template import Templar, trust_as_template
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from aisite.cli import app
from aisite.errors import SiteError
from aisite.loader import parse_site, read_site_config
from aisite.plan import build_plan
from aisite.render.bundle import bundle, render_into
from tests.conftest import stack_data

# Fixed (not per process): test ids carry the payloads, and xdist workers must collect the same ones.
CANARY = Path(tempfile.gettempdir()) / "aisite-fuzz-canary"
ESCAPE = "../../../escape"
PAYLOADS: list[Any] = [
    "{{ lookup('pipe', 'touch " + str(CANARY) + "') }}",
    "{% set x = lookup('pipe', 'touch " + str(CANARY) + "') %}x",
    "$(touch " + str(CANARY) + ")",
    "`touch " + str(CANARY) + "`",
    "a\nip route 0.0.0.0/0 192.0.2.66\n!",
    'x"\nauthorization-mode: AlwaysAllow\n',
    "team-a\n",
    "a\r\x1b[2J",
    ESCAPE + "/leaf{n:02d}",
    "/etc/../" + ESCAPE,
    "gpu{n:c}",
    "gpu{n:0999999999d}",
    "gpu{n[0]}",
    "gpu{n.x}",
    "gpu{{n}}",
    "gpu{n!r}",
    "gpu{m}",
    "{n:>64}",
    "x" * 70 + "{n}",
    "",
    " ",
    "x" * 5000,
    "\u2028",
    "é",
    0,
    -1,
    2**63,
    10**40,
    1e308,
    float("inf"),
    float("nan"),
    True,
    None,
    [],
    {},
    [None],
    {"": None},
    {"{{ x }}": "y"},
]


def _paths(value: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [here]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*here, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _paths(item, (*here, i))
    return found


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _mutate(doc: dict[str, Any], path: tuple[Any, ...], op: str, payload: Any) -> None:
    """One mutation at `path`: replace the value, delete it, duplicate a list's item, add a key, or (for a
    YAML-bomb-like document) share one large value many times."""
    if not path:
        doc["x_unknown"] = payload
        return
    parent = _get(doc, path[:-1])
    key = path[-1]
    if op == "replace":
        parent[key] = payload
    elif op == "delete":
        del parent[key]
    elif op == "duplicate" and isinstance(parent, list):
        parent.append(copy.deepcopy(parent[key]))
    elif op == "add_key" and isinstance(_get(doc, path), dict):
        _get(doc, path)[str(payload)[:40] if not isinstance(payload, (dict, list)) else "k"] = payload
    elif op == "bomb":
        # Aliases in YAML build shared references: a list of 10 lists of 10 ... many values from a few lines.
        shared: Any = ["x"] * 10
        for _ in range(7):
            shared = [shared] * 10
        parent[key] = shared
    elif op == "deep":
        nested: Any = "x"
        for _ in range(1000):
            nested = [nested]
        parent[key] = nested
    else:
        parent[key] = payload


COUNTS: Counter[str] = Counter()
# The same examples on every run, so CI judges a commit and not a draw; AISITE_FUZZ_EXPLORE=1 draws new ones (what
# they find goes into REGRESSIONS).
DERANDOMIZE = os.environ.get("AISITE_FUZZ_EXPLORE") != "1"


def _run(stack: str, data: dict[str, Any], out_root: Path) -> str:
    """validate + plan + render, as the CLI does them; the outcome: 'ok' (exit 0) or 'invalid' (exit 2)."""
    try:
        plan = build_plan(parse_site(data, f"fuzz:{stack}"))
    except SiteError as exc:
        assert exc.problems and all(p.path and p.message for p in exc.problems)
        return "invalid"
    files = bundle(plan)
    out = out_root / "out"
    written = render_into(out, files)
    # Nothing outside --out: the output root holds the output directory alone (no stage left, no escape).
    assert sorted(p.name for p in out_root.iterdir()) == ["out"], list(out_root.iterdir())
    assert all(p.resolve().is_relative_to(out.resolve()) for p in written)
    # The inventory as Ansible reads it (its own loader, the file trusted as inventory files are), every variable
    # templated by Ansible's Templar: a site string that were a template would run here.
    inv = AnsibleLoader(trust_as_template(files["inventory.yml"])).get_single_data()
    templar = Templar(loader=DataLoader(), variables={"playbook_dir": "/p", "ansible_playbook_python": "/py"})
    templar.template(inv["all"])
    return "ok"


RUNNER = CliRunner()


def _cli(data: dict[str, Any], tmp: Path) -> int | None:
    """`aisite validate`, `plan --json` and `render` of the mutant as a stack file, in this process (typer's
    runner): each exits 0 or 2, and all three alike. The exit code, or None where the file does not hold the same
    data (YAML folds some characters, such as NEL, into line breaks: the CLI then judges other data)."""
    tmp.mkdir()
    stack = tmp / "Pulumi.fuzz.yaml"
    text = yaml.safe_dump({"config": {"aisite:site": data}}, allow_unicode=True)
    stack.write_text(text)
    same = yaml.safe_load(text)["config"]["aisite:site"] == data
    codes = set()
    for args in (
        ["validate", str(stack)],
        ["plan", str(stack), "--json"],
        ["render", str(stack), "--out", str(tmp / "r")],
    ):
        r = RUNNER.invoke(app, args)
        assert r.exception is None or isinstance(r.exception, SystemExit), (args, r.exception)
        assert r.exit_code in (0, 2), (args, r.exit_code, r.output[-2000:])
        codes.add(r.exit_code)
    assert len(codes) == 1, codes
    return codes.pop() if same else None


def _check(
    stack: str, path: tuple[Any, ...], op: str, payload: Any, *, data: dict[str, Any] | None = None, label: str = ""
) -> None:
    if data is None:
        data = stack_data(stack)
        _mutate(data, path, op, payload)
    CANARY.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="aisite-fuzz-") as tmp:
        outcome = _run(stack, data, Path(tmp))
        if op not in ("bomb", "deep"):  # a YAML file of those is tested in test_a_stack_file_over_the_limits...
            code = _cli(data, Path(tmp) / "cli")
            assert code in (None, 0 if outcome == "ok" else 2), (code, outcome)
    assert not CANARY.exists(), f"a site string was evaluated: {path} {op} {payload!r}"
    COUNTS[f"{label or stack}:{outcome}"] += 1


# Failures the fuzzer (and the review that filed issue 22) found: kept as regression cases on every stack.
REGRESSIONS: list[tuple[tuple[Any, ...], str, Any]] = [
    (("switches", "leaves", "model"), "replace", PAYLOADS[0]),
    (("switches", "leaves", "name_pattern"), "replace", ESCAPE + "/leaf{n:02d}"),
    (("switches", "leaves", "name_pattern"), "replace", "leaf{n}\nip route 0.0.0.0/0 192.0.2.66\n!"),
    (("switches", "spines", "name_pattern"), "replace", "spine{n:c}"),
    (("gpu_nodes", 0, "name_pattern"), "replace", "gpu{n:0999999999d}"),
    (("gpu_nodes", 0, "name_pattern"), "replace", "gpu{n[0]}"),
    (("gpu_nodes", 0, "name_pattern"), "replace", "gpu{n.x}"),
    (("gpu_nodes", 0, "name_pattern"), "replace", "gpu{{n}}"),
    (("gpu_nodes", 0, "count"), "replace", 0),
    (("gpu_nodes", 0, "labels"), "replace", {"a": "b\nauthorization-mode: AlwaysAllow"}),
    (("kubernetes", "tenants", 0, "name"), "replace", "team-a\n"),
    (("secrets",), "add_key", {"username": "x", "password_from": {"env": "X"}}),
    (("storage_nodes", "exports", 0), "duplicate", None),
    (("description",), "deep", None),
    (("description",), "bomb", None),
    (("domain",), "replace", PAYLOADS[0]),
    (("description",), "replace", PAYLOADS[0]),
    (("description",), "replace", "\x85"),  # NEL: a control character here, a line break to YAML (found in CI)
    (("admin_users", 0, "ssh_keys", 0), "replace", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 " + PAYLOADS[0]),
    (("gitops", "allowed_signers", 0), "replace", "a@b ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 " + PAYLOADS[1]),
    (("ntp_servers", 0), "replace", PAYLOADS[1]),
]
STACKS = ["lab", "dc1", "h100pod"]


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize(("path", "op", "payload"), REGRESSIONS)
def test_regressions(stack: str, path: tuple[Any, ...], op: str, payload: Any) -> None:
    data = stack_data(stack)
    try:
        _get(data, path[:-1] if op in ("replace", "deep", "bomb", "duplicate") else path)
    except (KeyError, IndexError):
        pytest.skip(f"{stack} has no {'.'.join(map(str, path))} to mutate")
    if op == "add_key" and path == ("secrets",):
        name = next(iter(data["secrets"]))
        payload_path: tuple[Any, ...] = ("secrets", name.replace("-", "_"))
        data["secrets"][payload_path[1]] = payload
        with pytest.raises(SiteError, match="rename one"):
            parse_site(data)
        return
    _check(stack, path, op, payload)


def _examples(stack: str, n: int) -> Any:
    paths = _paths(stack_data(stack))

    @settings(
        max_examples=n,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
        derandomize=DERANDOMIZE,
    )
    @given(
        path=st.sampled_from(paths),
        op=st.sampled_from(["replace"] * 6 + ["delete", "duplicate", "add_key", "bomb", "deep"]),
        payload=st.sampled_from(PAYLOADS) | st.text(max_size=40) | st.integers() | st.floats(),
    )
    def run(path: tuple[Any, ...], op: str, payload: Any) -> None:
        _check(stack, path, op, payload)

    return run


# Examples per stack: at least 500 in all, within about two minutes on 2 cores (h100pod's render is the costly one).
EXAMPLES = {"lab": 400, "dc1": 250, "h100pod": 50}


@pytest.mark.parametrize("stack", STACKS)
def test_mutants_exit_0_or_2_and_evaluate_nothing(stack: str) -> None:
    _examples(stack, EXAMPLES[stack])()


# Fields whose type admits free text (a description, an SSH key's and a signer's comment): most mutants of them are
# valid, so they reach the inventory and Ansible's Templar with the payloads in them.
FREE_TEXT: list[tuple[Any, ...]] = [
    ("description",),
    ("admin_users", 0, "ssh_keys", 0),
    ("gitops", "allowed_signers", 0),
]


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
    derandomize=DERANDOMIZE,
)
@given(
    field=st.sampled_from(FREE_TEXT),
    text=st.sampled_from([p for p in PAYLOADS if isinstance(p, str)]) | st.text(min_size=1, max_size=60),
)
def test_free_text_reaches_ansible_inert(field: tuple[Any, ...], text: str) -> None:
    data = stack_data("lab")
    parent = _get(data, field[:-1])
    parent[field[-1]] = text if field == ("description",) else f"{parent[field[-1]]} {text}"
    _check("lab", field, "keep", None, data=data, label="lab-free-text")


def test_the_fuzzer_ran_its_examples() -> None:
    """Runs after the mutants (one file stays on one worker, in order): what they came to, per stack."""
    total = sum(COUNTS.values())
    print(f"fuzz: {total} runs: " + ", ".join(f"{k} {v}" for k, v in sorted(COUNTS.items())))
    if total == 0:
        pytest.skip("run with the mutant tests (this file as a whole) to count them")
    wanted = EXAMPLES | {"lab-free-text": 150}
    for name, n in wanted.items():
        ran = sum(v for k, v in COUNTS.items() if k.split(":")[0] == name)
        assert ran == 0 or ran >= n, (name, ran)  # 0: that test was not selected
    assert any(k.endswith(":ok") for k in COUNTS) and any(k.endswith(":invalid") for k in COUNTS)


def test_a_stack_file_over_the_limits_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.big.yaml"
    path.write_text("config:\n  aisite:site:\n    description: " + "[" * 100 + "]" * 100 + "\n")
    with pytest.raises(SiteError, match="nested deeper than 24 levels"):
        read_site_config(path)
    lines = ["config:", "  a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(9):
        ref = "*a" if i == 0 else f"*b{i - 1}"
        lines.append(f"  b{i}: &b{i} [{', '.join([ref] * 10)}]")
    lines += ["  aisite:site:", "    name: lab", "    bomb: *b8"]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SiteError, match="more than 1000000 values"):
        parse_site(read_site_config(path))
    path.write_text("config:\n  aisite:site:\n    secrets:\n      bmc: {username: a}\n      bmc: {username: b}\n")
    with pytest.raises(SiteError, match="key 'bmc' is given twice in one mapping"):
        read_site_config(path)
    path.write_bytes(b"config:\n  aisite:site:\n    name: \xff\n")
    with pytest.raises(SiteError, match="not UTF-8"):
        read_site_config(path)


def test_site_text_stays_inert_in_a_real_ansible_run(tmp_path: Path) -> None:
    """The fields that take free text (a description, an SSH key's or a signer's comment) carry a command in
    template syntax; real ansible-playbook templates every host's variables (hostvars as JSON) from the rendered
    inventory: the text comes out literally, and the command never runs."""
    data = stack_data("lab")
    data["description"] = PAYLOADS[0]
    data["admin_users"][0]["ssh_keys"][0] += " " + PAYLOADS[0]
    data["gitops"]["allowed_signers"][0] += " " + PAYLOADS[1]
    inv = tmp_path / "inventory.yml"
    inv.write_text(bundle(build_plan(parse_site(data)))["inventory.yml"])
    play = tmp_path / "vars.yml"
    play.write_text(
        "- hosts: all\n  gather_facts: false\n  connection: local\n  tasks:\n"
        '    - ansible.builtin.debug:\n        msg: "{{ hostvars[inventory_hostname] | to_json }}"\n'
    )
    CANARY.unlink(missing_ok=True)
    r = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), str(play)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=os.environ | {"ANSIBLE_PYTHON_INTERPRETER": sys.executable, "ANSIBLE_NOCOLOR": "1"},
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert not CANARY.exists(), "a site string was evaluated by Ansible"
    assert f"touch {CANARY}" in r.stdout and "ok=1" in r.stdout  # the text itself, literally
