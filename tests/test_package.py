"""The package as a team installs it, apart from the tool's checkout: the wheel built from this tree, installed into
a fresh virtual environment outside it; `aisite init` makes a site repository; validate, plan, render and diff run
there, reading the Ansible content the wheel carries, and nothing of the checkout is touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from aisite.entry import site_dir_arg
from aisite.init import check_name, site_files
from aisite.roots import COLLECTION_PATH
from tests.conftest import ROOT

SITE = "newsite"


def _run(cmd: list[str], cwd: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AISITE_", "PULUMI_", "PYTHON"))}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=600, **kw)  # type: ignore[call-overload, no-any-return]


def _status() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A virtual environment outside the checkout with the wheel of this tree (its dependencies read from this
    environment's site-packages, as a team's pip would have installed them)."""
    tmp = tmp_path_factory.mktemp("package")
    before = _status()
    wheels = tmp / "wheels"
    r = _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(ROOT)],
        tmp,
    )
    assert r.returncode == 0, r.stderr
    venv = tmp / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp).returncode == 0
    (wheel,) = wheels.glob("aisite-*.whl")
    r = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            str(wheel),
        ],
        tmp,
    )
    assert r.returncode == 0, r.stderr
    purelib = Path(
        _run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp
        ).stdout.strip()
    )
    # The dependencies, not aisite: a path in a .pth is added as it is; the editable aisite there is not.
    (purelib / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    yield venv
    assert _status() == before, "building and using the package changed the checkout"


@pytest.fixture(scope="module")
def site_repo(installed: Path) -> Path:
    work = installed.parent
    r = _run([str(installed / "bin" / "aisite"), "init", "site", "--site", SITE, "--json"], work)
    assert r.returncode == 0, r.stderr
    done = json.loads(r.stdout)
    assert sorted(done["written"]) == sorted(site_files(SITE)) and not done["kept"], done
    assert done["git"].startswith("git repository made"), done
    return work / "site"


def test_the_installed_package_carries_its_content_and_finds_the_site_it_runs_in(
    installed: Path, site_repo: Path
) -> None:
    probe = "import aisite, aisite.roots as r; print(aisite.__file__); print(r.CONTENT); print(r.SITE)"
    module, content, site = _run([str(installed / "bin" / "python"), "-c", probe], site_repo / "stacks").stdout.split()
    assert Path(module).is_relative_to(installed) and Path(content) == Path(module).parent / "content"
    assert Path(site) == site_repo.resolve()  # found from a directory below it
    collection = Path(content) / COLLECTION_PATH
    for part in (
        Path(content) / "ansible.cfg",
        Path(content) / "templates/site/Pulumi.yaml",
        collection / "galaxy.yml",
        collection / "playbooks/site.yml",
        collection / "roles/roce_host/tasks/main.yml",
        collection / "plugins/cliconf/onyx.py",
    ):
        assert part.is_file(), part
    assert not list(collection.glob("roles/*/molecule")), "the roles' molecule scenarios are not shipped"
    assert not (collection / "roles" / "conftest.py").exists(), "nor their testinfra conftest"


def test_a_new_site_repository_validates_plans_and_renders_outside_the_checkout(
    installed: Path, site_repo: Path
) -> None:
    aisite = str(installed / "bin" / "aisite")
    r = _run([aisite, "validate", SITE, "--json", "--strict"], site_repo)
    assert r.returncode == 0, r.stderr + r.stdout  # the template as written: no warning either
    doc = json.loads(r.stdout)
    assert doc["warnings"] == []
    assert doc["source"] == str(site_repo.resolve() / "stacks" / f"Pulumi.{SITE}.yaml"), doc
    r = _run([aisite, "plan", SITE, "--json"], site_repo)
    assert r.returncode == 0, r.stderr
    assert {n["name"] for n in json.loads(r.stdout)["nodes"]} >= {"dgx01", "dgx04"}
    r = _run([aisite, "render", SITE, "--out", "rendered"], site_repo)
    assert r.returncode == 0, r.stderr
    assert (site_repo / "rendered" / "inventory.yml").is_file() and (site_repo / "rendered" / "plan.json").is_file()
    # The same from anywhere, naming the repository.
    r = _run([aisite, "--site-dir", str(site_repo), "validate", SITE], installed.parent)
    assert r.returncode == 0, r.stderr
    assert not (ROOT / ".aisite" / SITE).exists() and not (ROOT / "stacks" / f"Pulumi.{SITE}.yaml").exists()


def test_a_change_in_the_new_site_is_scoped_with_the_packaged_playbooks(installed: Path, site_repo: Path) -> None:
    """`aisite diff` computes each layer's hosts from the playbooks and roles the wheel carries."""
    for args in (["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q", "-m", "Site"]):
        assert _run(["git", *args], site_repo).returncode == 0
    stack = site_repo / "stacks" / f"Pulumi.{SITE}.yaml"
    text = stack.read_text()
    stack.write_text(
        text.replace(
            "        count: 4\n        name_pattern: dgx{n:02d}\n",
            "        count: 4\n        name_pattern: dgx{n:02d}\n        labels: {example.com/pool: a}\n",
        )
    )
    try:
        r = _run([str(installed / "bin" / "aisite"), "diff", SITE, "--json"], site_repo)
        assert r.returncode == 0, r.stderr
        runs = json.loads(r.stdout)["layers"]
        # The checkout's aisite (its own playbooks and roles) on the same repository scopes it the same.
        r = _run([sys.executable, "-m", "aisite", "--site-dir", str(site_repo), "diff", SITE, "--json"], ROOT)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["layers"] == runs
    finally:
        stack.write_text(text)
    dgx = ["dgx01", "dgx02", "dgx03", "dgx04"]
    assert runs == {"hosts": dgx, "cluster": dgx}, runs


def test_init_keeps_what_is_there_and_refuses_a_bad_name(installed: Path, site_repo: Path) -> None:
    readme = site_repo / "README.md"
    readme.write_text("ours\n")
    r = _run([str(installed / "bin" / "aisite"), "init", str(site_repo), "--site", SITE, "--json"], installed.parent)
    assert r.returncode == 0, r.stderr
    done = json.loads(r.stdout)
    assert done["kept"] == ["README.md"] and not done["written"] and readme.read_text() == "ours\n", done
    r = _run(
        [str(installed / "bin" / "aisite"), "init", str(installed.parent / "other"), "--site", "Bad_Name"],
        installed.parent,
    )
    assert r.returncode == 2 and r.stderr.startswith("--site: ") and not (installed.parent / "other").exists()
    assert check_name("bad_name") and check_name("ok-name") is None


def test_the_wheel_carries_its_schema_examples_and_lock_and_init_pins_it_by_digest(
    installed: Path, site_repo: Path
) -> None:
    """What a team needs from the wheel alone: the JSON Schema (`aisite schema`), the shipped stacks (`init
    --from`), the lock (the site repository's constraints.txt); and `init --wheel` names that wheel by its sha256,
    so pip installs exactly it (a wheel with another digest is refused) and asks no index for "aisite"."""
    aisite = str(installed / "bin" / "aisite")
    r = _run([aisite, "schema"], site_repo)
    assert r.returncode == 0 and json.loads(r.stdout) == json.loads(
        (ROOT / "docs" / "reference" / "stack.schema.json").read_text()
    )
    (wheel,) = (installed.parent / "wheels").glob("aisite-*.whl")
    repo = installed.parent / "gb-site"
    r = _run(
        [aisite, "init", str(repo), "--site", "gb", "--from", "gb200", "--wheel", str(wheel), "--json"], repo.parent
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["pinned_by_digest"] is True
    r = _run([aisite, "validate", "gb", "--json"], repo)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["summary"]["gpus"] == 288
    assert (repo / "constraints.txt").read_text() == (ROOT / "requirements.lock").read_text()
    assert "name: gb-site\n" in (repo / "Pulumi.yaml").read_text()  # the repository's name, not its first site's
    import hashlib

    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    lines = [ln for ln in (repo / "requirements.txt").read_text().splitlines() if not ln.startswith("#")]
    assert lines == ["-c constraints.txt", f"aisite @ {wheel.resolve().as_uri()}#sha256={digest}"]
    venv = installed.parent / "pinned-venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], repo).returncode == 0
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", "--no-deps"]
    tampered = repo / "tampered.txt"
    tampered.write_text(lines[1].replace(digest, "0" * 64) + "\n")
    r = _run([*pip, "--no-index", "-r", str(tampered)], repo)
    assert r.returncode != 0 and "THESE PACKAGES DO NOT MATCH THE HASHES" in r.stderr.upper() + r.stdout.upper()
    r = _run([*pip, "--no-index", "-r", "requirements.txt"], repo)
    assert r.returncode == 0, r.stderr
    bad = _run([aisite, "init", str(installed.parent / "x"), "--from", "nosuch", "--wheel", str(repo)], repo)
    assert bad.returncode == 2 and "--from: 'nosuch' is not a shipped stack" in bad.stderr
    assert "--wheel: " in bad.stderr and not (installed.parent / "x").exists()


def test_init_names_the_site_everywhere_and_ignores_every_render_folder_the_docs_use() -> None:
    import re

    files = site_files("acme")
    assert not [rel for rel, text in files.items() if "dc1" in text], "a template still names dc1"
    for rel in ("ci/github-actions.yml", "ci/gitlab-ci.yml"):
        assert "  STACK: acme\n" in files[rel] and '"$STACK"' in files[rel], rel
    ignored = {line.strip().rstrip("/") for line in files[".gitignore"].splitlines() if not line.startswith("#")}
    texts = [p.read_text() for p in (ROOT / "docs").rglob("*.md")] + [(ROOT / "README.md").read_text()]
    outs = {m.group(1) for t in [*texts, *files.values()] for m in re.finditer(r"aisite render \S+ --out (\S+)", t)}
    outs = {o.strip("`\"'").split("/")[0] for o in outs} - {"DIR", "$OUT", "${OUT}"}
    assert {"build", "rendered"} <= outs <= ignored, outs - ignored


def test_site_dir_is_read_from_the_options_before_the_command() -> None:
    assert site_dir_arg(["--site-dir", "/x", "validate", "lab"]) == "/x"
    assert site_dir_arg(["--site-dir=/y", "plan", "lab"]) == "/y"
    assert site_dir_arg(["validate", "--site-dir", "/x"]) is None  # a command's own words are not looked into
    assert site_dir_arg(["--site-dir"]) == ""


def test_the_packaged_playbooks_resolve_their_roles_and_collection(installed: Path, site_repo: Path) -> None:
    """ansible-playbook, in the environment aisite gives every run, finds each role and the aisite.site collection
    in the package's content (a syntax check of the whole site against the new site's inventory)."""
    probe = "import json; from aisite.deploy import ansible_env; print(json.dumps(ansible_env()))"
    env = json.loads(_run([str(installed / "bin" / "python"), "-c", probe], site_repo).stdout)
    content = Path(env["ANSIBLE_CONFIG"]).parent
    assert content.is_relative_to(installed), env
    r = _run([str(installed / "bin" / "aisite"), "render", SITE, "--out", "checked"], site_repo)
    assert r.returncode == 0, r.stderr
    playbook = Path(sys.executable).parent / "ansible-playbook"  # the dependencies' scripts are this environment's
    for name in ("site.yml", "oob.yml"):
        r = subprocess.run(
            [
                str(playbook),
                "--syntax-check",
                "-i",
                "checked/inventory.yml",
                str(content / COLLECTION_PATH / "playbooks" / name),
            ],
            cwd=site_repo,
            env=os.environ | env | {"ANSIBLE_LOCAL_TEMP": str(installed.parent / "ansible-tmp")},
            capture_output=True,
            text=True,
            check=False,
        )
        assert r.returncode == 0, (name, r.stdout[-2000:], r.stderr[-2000:])
