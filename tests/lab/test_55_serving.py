"""A model trained, served and promoted by the stack's policy on the deployed lab, for real: the ResNet payload
trains on a GPU node's CPU and writes its checkpoints into the site's CephFS, the model servers run on both GPU
nodes, Debian's HAProxy weights them on the controller, and bounded requests go through it. Three candidates,
three endings, each with its signed commits in the site repository:

- v2 beats the champion at the gate, then fails live (its server fails half its requests): rolled back;
- v3 beats it and holds every limit through its canary: promoted;
- v4 (one training step) does not beat v3: refused at the gate, the figures in its commit.

Then the policy made automatic: the reconciler, after the pass that applies that commit, judges the newest checkpoint
(v5, one step: refused) by itself, pushing the signed step to the branch it pulls; its next pass finds nothing new.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from aisite.paths import serving_dir
from aisite.plan import Plan
from aisite.reconcile import state as reconcile_state
from tests.conftest import commit_file, git, make_site_repo, run_cli, ssh_signer
from tests.lab.common import BMC_ENV, SITE, reconcile, rotating

PRINCIPAL = "labadmin@aisite-lab"
# Who commits the promotions (a fresh CI machine has no git identity of its own).
IDENTITY = {
    "GIT_AUTHOR_NAME": "Site Admin",
    "GIT_AUTHOR_EMAIL": "admin@example.com",
    "GIT_COMMITTER_NAME": "Site Admin",
    "GIT_COMMITTER_EMAIL": "admin@example.com",
}


@pytest.fixture(scope="module")
def site_repo(up: subprocess.CompletedProcess[str], stack_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site's repository (this project with the lab's stack, as the reconciler runs the commit's own code), its
    allowed signer a key of this test's (the lab stack's own key's private half is nobody's)."""
    assert up.returncode == 0, up.stderr
    tmp = tmp_path_factory.mktemp("serving")
    key, line = ssh_signer(tmp, PRINCIPAL)
    text = stack_file.read_text()
    start = text.index(f'        - "{PRINCIPAL} ')
    end = text.index("\n", start)
    repo = make_site_repo(tmp / "site", {stack_file.name: text[:start] + f'        - "{line}"' + text[end:]})
    (tmp / "signing-key").symlink_to(key)
    (tmp / "allowed").write_text(line + "\n")  # to verify the commits with, as a reconciler would
    return repo


def _promote(repo: Path, stack: Path, version: str, *extra: str) -> dict[str, object]:
    key = repo.parent / "signing-key"
    r = run_cli(
        "promote", str(stack), "classifier", "--version", version, "--signing-key", str(key), "--json", *extra,
        env=BMC_ENV | IDENTITY,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    doc: dict[str, object] = json.loads(r.stdout)
    print(f"promote {version}:", json.dumps(doc, indent=1))
    return doc


# 341 s in a fresh-clone CI rehearsal (2026-11-29): with the faults, whose turn is the lightest (its failing canary is
# a fault injected live too).
@rotating("faults")
def test_three_candidates_rolled_back_promoted_and_refused_each_with_its_commits(
    site_repo: Path, stack_file: Path, plan: Plan
) -> None:
    stack = site_repo / "stacks" / stack_file.name
    try:
        r = run_cli("serve", "up", str(stack), "classifier", "--steps", "3", env=BMC_ENV)
        assert r.returncode == 0, r.stdout + r.stderr
        for version, steps in (("v2", 40), ("v3", 40), ("v4", 1)):  # 40 steps: 0.44 to 0.76 top-1 here
            r = run_cli("serve", "train", str(stack), "classifier", "--version", version, "--steps", str(steps))
            assert r.returncode == 0, r.stdout + r.stderr
        # The champion alone answers before any canary.
        r = run_cli("serve", "load", str(stack), "classifier", "--seconds", "5", "--requests", "40", "--json")
        assert r.returncode == 0, r.stderr
        before = json.loads(r.stdout)
        assert set(before) == {"v1"} and before["v1"]["errors"] == 0, before

        failed = _promote(site_repo, stack, "v2", "--inject-error-rate", "0.5")
        assert failed["state"] == "rolled-back", failed
        assert failed["gate"]["passed"] is True  # type: ignore[index]
        traffic = failed["traffic"]
        assert isinstance(traffic, dict) and set(traffic) == {"v1", "v2"}, traffic  # both answered, by weight
        assert traffic["v2"]["errors"] > 0 and traffic["v1"]["errors"] == 0, traffic
        assert traffic["v1"]["requests"] > traffic["v2"]["requests"], traffic  # 75 % against 25 %

        promoted = _promote(site_repo, stack, "v3")
        assert promoted["state"] == "promoted", promoted
        canary = promoted["canary"]
        assert isinstance(canary, dict) and canary["crossed"] == [] and canary["window"]["requests"] >= 20

        refused = _promote(site_repo, stack, "v4")
        assert refused["state"] == "refused", refused
        assert refused["gate"]["champion"] > refused["gate"]["candidate"]  # type: ignore[index]

        subjects = git(site_repo, "log", "--format=%s", "-5").splitlines()[::-1]
        assert subjects[0] == "serving classifier: canary v2 at 25 %", subjects
        assert subjects[2:] == [
            "serving classifier: canary v3 at 25 %",
            "serving classifier: v3 promoted",
            "serving classifier: v4 refused at the gate",
        ], subjects
        assert subjects[1].startswith("serving classifier: v2 rolled back: error rate"), subjects
        # Every step signed by the key the policy trusts, and the stack says what now runs.
        signers = site_repo.parent / "allowed"
        for commit in git(site_repo, "log", "--format=%H", "-5").splitlines():
            git(site_repo, "-c", f"gpg.ssh.allowedSignersFile={signers}", "verify-commit", commit)
        (entry,) = yaml.safe_load(stack.read_text())["config"]["aisite:site"]["serving"]
        assert entry["champion"] == {"version": "v3", "artifact": "models/classifier/v3.pt"}, entry
        assert "candidate" not in entry, entry
        # Only v3 answers now, through the proxy, and HAProxy counted the versions it weighted.
        r = run_cli("serve", "load", str(stack), "classifier", "--seconds", "5", "--requests", "40", "--json")
        after = json.loads(r.stdout)
        assert set(after) == {"v3"} and after["v3"]["errors"] == 0, after
        with urllib.request.urlopen("http://127.0.0.1:28405/metrics", timeout=10) as resp:
            proxy = resp.read().decode()
        assert 'haproxy_server_http_responses_total{proxy="classifier",server="champion",code="2xx"}' in proxy
        print("before:", before, "after:", after)
        _reconciler_promotes(site_repo, stack)
    finally:
        r = run_cli("serve", "down", str(stack))
        assert r.returncode == 0, r.stderr
    assert not list(serving_dir(SITE).glob("*.json"))


def _reconciler_promotes(site_repo: Path, stack: Path) -> None:
    """The policy made automatic by a signed commit; v5 (one training step) the newest checkpoint. The reconciler's
    pass applies the commit, then judges v5 by itself: refused, its signed step pushed to the branch it pulls (a
    bare repository, as a site's is). The next pass applies that step and finds nothing new."""
    key, allowed = site_repo.parent / "signing-key", site_repo.parent / "allowed"
    path = f"stacks/{stack.name}"
    policy = "          training: resnet50-train\n"
    text = stack.read_text()
    assert policy in text
    commit_file(site_repo, path, text.replace(policy, policy + "          automatic: true\n"), "Automatic", key)
    r = run_cli("serve", "train", str(stack), "classifier", "--version", "v5", "--steps", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    bare = site_repo.parent / "site.git"
    git(site_repo.parent, "clone", "--quiet", "--bare", str(site_repo), str(bare))
    shutil.rmtree(reconcile_state.workdir(SITE), ignore_errors=True)
    try:
        args = ("--allowed-signers", str(allowed), "--signing-key", str(key))
        rc, rec = reconcile(bare, *args, env=IDENTITY)
        print("reconcile:", json.dumps(rec, indent=1))
        assert rc == 0 and rec["outcome"] == "applied" and rec["errors"] == [], rec
        (promotion,) = rec["promotions"]
        assert (promotion["serving"], promotion["candidate"], promotion["state"]) == ("classifier", "v5", "refused")
        (step,) = promotion["commits"]
        assert git(bare, "rev-parse", "main") == step  # pushed to the branch the reconciler pulls
        assert git(bare, "log", "-1", "--format=%s", step) == "serving classifier: v5 refused at the gate"
        git(bare, "-c", f"gpg.ssh.allowedSignersFile={allowed}", "verify-commit", step)
        rc, rec = reconcile(bare, *args, env=IDENTITY)
        assert rc == 0 and rec["commit"] == step and rec["outcome"] in ("applied", "unchanged"), rec
        assert [(p["candidate"], p["state"]) for p in rec["promotions"]] == [("", "idle")], rec
        status = json.loads(run_cli("reconcile", "status", SITE, "--json").stdout)
        assert status["promotions_total"] == {"refused": 1}, status
    finally:
        shutil.rmtree(reconcile_state.workdir(SITE), ignore_errors=True)
