"""The promotion policy's judgements and its commits: the gate and the canary on figures a node sends back (parsed as
hostile data), the stack edited in place with its comments, each step a signed commit that lands whole or not at
all, and the state machine through its three endings (the lab runs it for real: tests/lab/test_60_serving.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from aisite.payloads.serve import Metrics
from aisite.plan import Plan, ServingPlan
from aisite.plan.types import CanaryPlan, PromotionPlan
from aisite.repo import git as repo_git
from aisite.serving.auto import pending, promote_pending
from aisite.serving.commits import PromotionCommitError, Signing, commit_step, decided, edit_serving, push
from aisite.serving.policy import (
    Evaluation,
    PolicyInputError,
    gate,
    judge,
    parse_evaluation,
    parse_metrics,
    window,
    windows,
)
from aisite.serving.promote import PromoteContext, PromoteError, promote
from tests.conftest import ROOT, commit_file, git, run_cli, ssh_signer

IDENTITY = {
    "GIT_AUTHOR_NAME": "Site Admin",
    "GIT_AUTHOR_EMAIL": "admin@example.com",
    "GIT_COMMITTER_NAME": "Site Admin",
    "GIT_COMMITTER_EMAIL": "admin@example.com",
}


@pytest.fixture(autouse=True)
def _identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """Who commits: a promotion's commits name the person running it (a fresh CI machine has no git identity)."""
    for k, v in IDENTITY.items():
        monkeypatch.setenv(k, v)


POLICY = PromotionPlan("t", "eval/x", "top1_accuracy", 0.02, CanaryPlan(25, 10, 20, 0.02, 500.0, None), (), False)


def _eval(top1: float, samples: int = 300) -> Evaluation:
    line = json.dumps({"schema": "aisite.eval/v1", "samples": samples, "top1_accuracy": top1, "top5_accuracy": 1.0})
    return parse_evaluation(f"noise\n{line}\n", "test")


def test_the_gate_needs_the_margin_and_one_held_out_set() -> None:
    assert gate(POLICY, _eval(0.70), _eval(0.75)).passed
    refused = gate(POLICY, _eval(0.70), _eval(0.71))
    assert not refused.passed and "0.7100 does not beat the champion's 0.7000 by more than 0.02" in refused.reason
    with pytest.raises(PolicyInputError, match="one held-out set"):
        gate(POLICY, _eval(0.7, 300), _eval(0.9, 299))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "no result line"),
        ('{"schema": "aisite.eval/v1", "samples": 3, "top1_accuracy": 1.5, "top5_accuracy": 1}', "not an aisite"),
        ('{"schema": "aisite.eval/v1", "samples": 3, "top1_accuracy": NaN, "top5_accuracy": 1}', "NaN is not a JSON"),
        ('{"schema": "aisite.eval/v1", "samples": "3", "top1_accuracy": 0.5, "top5_accuracy": 1}', "not an aisite"),
        ('{"schema": "other", "samples": 3, "top1_accuracy": 0.5, "top5_accuracy": 1}', "not an aisite"),
        ("{" + " " * (1 << 20) + "}", "more than a payload prints"),
    ],
)
def test_an_evaluation_that_is_not_one_is_refused(text: str, words: str) -> None:
    with pytest.raises(PolicyInputError, match=words):
        parse_evaluation(text, "gpu01")


def _served(version: str, latencies: list[float], codes: list[int], confidence: float = 0.8) -> str:
    m = Metrics("classifier", version)
    for seconds, code in zip(latencies, codes, strict=True):
        m.observe(code, seconds, [confidence] if code == 200 else [])
    return m.text()


def test_the_canary_reads_the_servers_own_metrics_and_judges_each_limit() -> None:
    before = parse_metrics(_served("v2", [0.01], [200]), "s", "v2")
    after = parse_metrics(_served("v2", [0.01] + [0.02] * 18 + [0.9, 0.9], [200] * 19 + [500, 500]), "s", "v2")
    w = window(before, after)
    assert (w.requests, w.errors) == (20, 2)
    assert w.p95_ms is not None and 500 < w.p95_ms <= 1000  # the two slow ones are the top 10 %
    assert w.mean_confidence == pytest.approx(0.8)
    verdict = judge(POLICY.canary, w)
    assert not verdict.passed
    assert [c.split()[0] for c in verdict.crossed] == ["error", "p95"]
    calm = window(before, parse_metrics(_served("v2", [0.01] * 25, [200] * 25), "s", "v2"))
    assert judge(POLICY.canary, calm).passed
    few = window(before, parse_metrics(_served("v2", [0.01] * 5, [200] * 5), "s", "v2"))
    assert judge(POLICY.canary, few).crossed == ["4 requests reached it, fewer than the 20 that decide"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (_served("v1", [0.01], [200]), r"serves version\(s\) \['v1'\], not 'v2'"),
        ('aisite_serving_requests_total{version="v2",code="200"} -1\n', "not a count"),
        ("garbage {{{\n", "not Prometheus text"),
        ('aisite_serving_requests_total{version="v2",code="200"} 1\n', "missing"),
    ],
)
def test_metrics_that_are_not_the_candidates_are_refused(text: str, words: str) -> None:
    with pytest.raises(PolicyInputError, match=words):
        parse_metrics(text, "gpu02", "v2")


def test_the_window_sums_every_replica_and_refuses_one_that_restarted_or_went() -> None:
    """A site's candidate has several pods: their counters' differences are summed (one that came up during the
    canary counts from zero); a pod gone or restarted leaves requests unaccounted, so there is no window."""
    a0, a1 = _served("v2", [0.01] * 3, [200] * 3), _served("v2", [0.01] * 13, [200] * 12 + [500])
    b1 = _served("v2", [0.9] * 10, [200] * 10)
    before = {"pod-a": parse_metrics(a0, "a", "v2")}
    after = {"pod-a": parse_metrics(a1, "a", "v2"), "pod-b": parse_metrics(b1, "b", "v2")}
    w = windows(before, after)
    assert (w.requests, w.errors) == (20, 1)  # 10 more on pod-a (one failed), 10 on the new pod-b
    assert w.p95_ms is not None and w.p95_ms > 500  # pod-b's slow half shows in the sum
    with pytest.raises(PolicyInputError, match="pod-a: gone during the canary"):
        windows(before, {"pod-b": after["pod-b"]})
    with pytest.raises(PolicyInputError, match="pod-b: the server's counters went backwards"):
        windows(after, {"pod-a": after["pod-a"], "pod-b": parse_metrics(_served("v2", [0.01], [200]), "b", "v2")})


def test_a_restarted_server_is_not_read_as_a_window() -> None:
    before = parse_metrics(_served("v2", [0.01] * 5, [200] * 5), "s", "v2")
    after = parse_metrics(_served("v2", [0.01], [200]), "s", "v2")
    with pytest.raises(PolicyInputError, match="restarted"):
        window(before, after)


STACK = """\
# The team's comment stays.
config:
  aisite:site:
    image_packages:
      [chrony, lldpd]
    serving:
      - name: classifier   # and this one
        tenant: team-a
        champion:
          version: v1     # block style, as a team may write it
          artifact: models/classifier/v1.pt
        promotion: {training: t}
      - name: other
        champion: {version: v1, artifact: o/v1.pt}
    # A comment after the list, before the next key: it stays too.
    gitops: {repository: ssh://git@x/y.git}
"""


def test_the_stack_is_edited_in_place_keeping_every_other_line() -> None:
    canary = edit_serving(STACK, "classifier", "canary", {"version": "on", "artifact": "m/v2.pt", "share": 25})
    added = [line for line in canary.splitlines() if line not in STACK.splitlines()]
    assert added == ['        candidate: {version: "on", artifact: "m/v2.pt", share: 25}']
    assert canary.replace(added[0] + "\n", "") == STACK
    # YAML 1.1 would read a bare `on` as true: the version stays a string.
    entry = yaml.safe_load(canary)["config"]["aisite:site"]["serving"][0]
    assert entry["candidate"] == {"version": "on", "artifact": "m/v2.pt", "share": 25}
    promoted = edit_serving(canary, "classifier", "promote")
    assert promoted == STACK.replace(
        "        champion:\n          version: v1     # block style, as a team may write it\n"
        "          artifact: models/classifier/v1.pt\n",
        '        champion: {version: "on", artifact: "m/v2.pt"}\n',
    )
    assert edit_serving(canary, "classifier", "rollback") == STACK
    with pytest.raises(PromotionCommitError, match="no candidate"):
        edit_serving(STACK, "classifier", "promote")
    with pytest.raises(PromotionCommitError, match="no serving entry"):
        edit_serving(STACK, "third", "rollback")
    with pytest.raises(PromotionCommitError, match="has a candidate already"):
        edit_serving(canary, "classifier", "canary", {"version": "v3", "artifact": "m/v3.pt", "share": 25})


@pytest.fixture
def site_repo(tmp_path: Path) -> Path:
    """A site repository holding the lab's stack, with a signing key the lab's policy trusts."""
    repo = tmp_path / "site"
    (repo / "stacks").mkdir(parents=True)
    (repo / "stacks" / "Pulumi.lab.yaml").write_text((ROOT / "stacks" / "Pulumi.lab.yaml").read_text())
    git(repo, "init", "--quiet", "--initial-branch=main")
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "The site")
    return repo


def _signing(tmp: Path, principal: str, trusted: list[str]) -> Signing:
    key, line = ssh_signer(tmp, principal)
    return Signing(key, (line,), tuple(trusted))


def test_a_step_lands_signed_or_leaves_the_repository_as_it_was(site_repo: Path, tmp_path: Path) -> None:
    stack = site_repo / "stacks" / "Pulumi.lab.yaml"
    text = edit_serving(
        stack.read_text(), "classifier", "canary", {"version": "v2", "artifact": "models/classifier/v2.pt", "share": 25}
    )
    head = git(site_repo, "rev-parse", "HEAD")
    # Signed by a key the site trusts but the policy does not name among its signers: refused, nothing moved.
    admin_key, admin_line = ssh_signer(tmp_path, "labadmin@aisite-lab")
    ops_key, ops_line = ssh_signer(tmp_path, "ops@aisite-lab")
    ops = Signing(ops_key, (admin_line, ops_line), ("labadmin@aisite-lab",))
    with pytest.raises(PromotionCommitError, match="not one the policy trusts"):
        commit_step(site_repo, stack, text, "serving classifier: canary v2", ops)
    assert git(site_repo, "rev-parse", "HEAD") == head and "candidate" not in stack.read_text()
    # A change that would not validate: refused before any commit.
    bad = text.replace("share: 25", "share: 100")
    admin = Signing(admin_key, (admin_line, ops_line), ("labadmin@aisite-lab",))
    with pytest.raises(PromotionCommitError, match="would not validate"):
        commit_step(site_repo, stack, bad, "bad", admin)
    assert git(site_repo, "rev-parse", "HEAD") == head
    # The trusted signer: committed, verified, and the work tree follows it.
    commit = commit_step(site_repo, stack, text, "serving classifier: canary v2", admin)
    assert git(site_repo, "rev-parse", "HEAD") == commit and "v2" in stack.read_text()
    assert git(site_repo, "status", "--porcelain") == ""
    assert repo_git(site_repo, "cat-file", "commit", commit).stdout.count("BEGIN SSH SIGNATURE") == 1
    # Someone's uncommitted edit of the stack is never overwritten.
    stack.write_text(stack.read_text() + "# mine\n")
    with pytest.raises(PromotionCommitError, match="uncommitted changes"):
        commit_step(site_repo, stack, text, "again", admin)


class FakeRuntime:
    """The runtime's answers as a node would send them: evaluation lines, and metrics from serve.py's own counters
    (the lab's runtime runs the real programs: tests/lab/test_60_serving.py)."""

    def __init__(self, scores: dict[str, float], live: tuple[list[float], list[int]]) -> None:
        self.scores = scores
        self.live = live
        self.applied: list[list[tuple[str, str, int]]] = []
        self.reads = 0
        self.found: list[tuple[str, float]] = []  # the checkpoints in the storage: (file name stem, mtime)

    def evaluate(self, plan: Plan, s: ServingPlan, artifact: str, dataset: str) -> str:
        doc = {"schema": "aisite.eval/v1", "samples": 300, "top1_accuracy": self.scores[artifact], "top5_accuracy": 1}
        return json.dumps(doc) + "\n"

    def apply(self, plan: Plan, s: ServingPlan) -> None:
        self.applied.append([(v.role, v.version, v.share) for v in s.versions])

    def metrics(self, plan: Plan, s: ServingPlan, role: str) -> dict[str, str]:
        self.reads += 1
        version = next(v for v in s.versions if v.role == role)
        latencies, codes = self.live if self.reads > 1 else ([], [])
        return {"gpu02": _served(version.version, latencies, codes)}

    def traffic(self, plan: Plan, s: ServingPlan, seconds: float) -> dict[str, dict[str, Any]]:
        return {"v2": {"requests": len(self.live[1])}}

    def checkpoints(self, plan: Plan, s: ServingPlan) -> list[tuple[str, float]]:
        return list(self.found)


def _subjects(repo: Path, n: int) -> list[str]:
    return git(repo, "log", f"-{n}", "--format=%s").splitlines()[::-1]


@pytest.mark.parametrize(
    ("scores", "live", "state", "steps", "final"),
    [
        ({"models/classifier/v1.pt": 0.5, "models/classifier/v2.pt": 0.8}, ([0.02] * 30, [200] * 30), "promoted",
         ["canary v2 at 25 %", "v2 promoted"], [("champion", "v2", 100)]),
        ({"models/classifier/v1.pt": 0.5, "models/classifier/v2.pt": 0.51}, ([], []), "refused",
         ["v2 refused at the gate"], None),
        ({"models/classifier/v1.pt": 0.5, "models/classifier/v2.pt": 0.8}, ([0.02] * 30, [500] * 30), "rolled-back",
         ["canary v2 at 25 %", "v2 rolled back: error rate 1.0000 over 0.02 (30 of 30)"], [("champion", "v1", 100)]),
    ],
)  # fmt: skip
def test_the_three_endings_each_leave_their_commits(  # noqa: PLR0917 - the cases' columns
    site_repo: Path,
    tmp_path: Path,
    scores: dict[str, float],
    live: tuple[list[float], list[int]],
    state: str,
    steps: list[str],
    final: list[tuple[str, str, int]] | None,
) -> None:
    stack = site_repo / "stacks" / "Pulumi.lab.yaml"
    runtime = FakeRuntime(scores, live)
    admin = _signing(tmp_path, "labadmin@aisite-lab", ["labadmin@aisite-lab"])
    out = promote(
        stack, "classifier", "v2", "models/classifier/v2.pt", PromoteContext(site_repo, runtime, admin, lambda _: None)
    )
    assert out.state == state
    assert [c["subject"] for c in out.commits] == [f"serving classifier: {s}" for s in steps]
    assert _subjects(site_repo, len(steps)) == [f"serving classifier: {s}" for s in steps]
    if final is None:
        assert runtime.applied == [] and "candidate" not in stack.read_text()
        assert "does not beat" in git(site_repo, "log", "-1", "--format=%b")
    else:
        assert runtime.applied[0] == [("champion", "v1", 75), ("candidate", "v2", 25)]
        assert runtime.applied[-1] == final


class BrokenServer(FakeRuntime):
    """A candidate whose server never comes up."""

    def apply(self, plan: Plan, s: ServingPlan) -> None:
        super().apply(plan, s)
        if len(self.applied) == 1:
            raise OSError("gpu02: connection refused")


def test_a_canary_that_cannot_run_is_rolled_back_not_left_running(site_repo: Path, tmp_path: Path) -> None:
    stack = site_repo / "stacks" / "Pulumi.lab.yaml"
    runtime = BrokenServer({"models/classifier/v1.pt": 0.5, "models/classifier/v2.pt": 0.8}, ([], []))
    admin = _signing(tmp_path, "labadmin@aisite-lab", ["labadmin@aisite-lab"])
    out = promote(
        stack, "classifier", "v2", "models/classifier/v2.pt", PromoteContext(site_repo, runtime, admin, lambda _: None)
    )
    assert out.state == "rolled-back" and "candidate" not in stack.read_text()
    assert _subjects(site_repo, 1) == [
        "serving classifier: v2 rolled back: the canary could not be judged: gpu02: connection refused"
    ]
    assert runtime.applied[-1] == [("champion", "v1", 100)]


def test_promote_refuses_a_bad_request_before_anything_runs(site_repo: Path, tmp_path: Path) -> None:
    stack = site_repo / "stacks" / "Pulumi.lab.yaml"
    runtime = FakeRuntime({}, ([], []))
    head = git(site_repo, "rev-parse", "HEAD")
    for version, artifact, words in (
        ("v1", "models/classifier/v1b.pt", "the champion's version"),
        ("V 2", "../../etc/shadow", "--version: .*; --artifact: .*not a relative path"),
    ):
        with pytest.raises(PromoteError, match=words):
            promote(stack, "classifier", version, artifact, PromoteContext(site_repo, runtime, None, print))
    with pytest.raises(PromoteError, match="give --signing-key"):
        promote(stack, "classifier", "v2", "m/v2.pt", PromoteContext(site_repo, runtime, None, print))
    assert git(site_repo, "rev-parse", "HEAD") == head and runtime.applied == []


@pytest.mark.parametrize(
    ("found", "judged", "expected"),
    [
        ([("v2", 10.0), ("v3", 20.0)], set(), "v3"),  # the newest
        ([("v2", 10.0), ("v3", 20.0)], {"v3"}, None),  # the newest judged: an older one is not taken
        ([("v1", 30.0), ("v2", 10.0)], set(), None),  # nor when the newest is the champion
        ([("v2", 10.0)], {"v2"}, None),
        ([("../v9", 50.0), ("V9", 50.0), ("-x", 50.0), ("v2", 10.0)], set(), "v2"),  # names that are no version
        ([("b", 10.0), ("a", 10.0)], set(), "b"),  # a tie goes by name, the same each pass
        ([], set(), None),
    ],
)
def test_the_candidate_is_the_newest_checkpoint_unless_judged(
    found: list[tuple[str, float]], judged: set[str], expected: str | None
) -> None:
    assert pending(found, judged, "v1") == expected


def _origin(site_repo: Path, tmp_path: Path) -> Path:
    """The site's shared repository: a bare one the work repository pushes each step to."""
    bare = tmp_path / "origin.git"
    git(tmp_path, "clone", "--quiet", "--bare", str(site_repo), str(bare))
    git(site_repo, "remote", "add", "origin", str(bare))
    return bare


def test_unnamed_promotions_judge_each_checkpoint_once_and_publish_each_step(site_repo: Path, tmp_path: Path) -> None:
    """Without a version: the newest checkpoint no step was committed for, so the second pass finds nothing new
    and a refused checkpoint is not tried again; each step is on the shared branch before it acts."""
    stack = site_repo / "stacks" / "Pulumi.lab.yaml"
    bare = _origin(site_repo, tmp_path)
    scores = {f"models/classifier/{v}.pt": s for v, s in (("v1", 0.5), ("v2", 0.8), ("v3", 0.6), ("v4", 0.9))}
    runtime = FakeRuntime(scores, ([0.02] * 30, [200] * 30))
    runtime.found = [("v1", 1.0), ("v2", 2.0), ("Draft_2", 9.0)]  # a file name that is no version is not one
    admin = _signing(tmp_path, "labadmin@aisite-lab", ["labadmin@aisite-lab"])
    published: list[tuple[str, int]] = []  # each step's commit, and how many times the runtime had applied then

    def publish(commit: str) -> None:
        push(site_repo, "main", commit)
        assert git(bare, "rev-parse", "main") == commit
        published.append((commit, len(runtime.applied)))

    def run() -> list[tuple[str, str, str]]:
        outs = promote_pending(
            stack, ["classifier"], PromoteContext(site_repo, runtime, admin, lambda _: None, publish)
        )
        return [(o.serving, o.candidate, o.state) for o in outs]

    assert run() == [("classifier", "v2", "promoted")]
    # On the shared branch before the step acts: the canary's before the canary ran, the promotion's before the
    # champion changed.
    assert [n for _, n in published] == [0, 1] and len(runtime.applied) == 2
    assert decided(site_repo, stack, "classifier") == {"v2"}
    assert run() == [("classifier", "", "idle")]  # v2 is the champion now, and judged
    runtime.found += [("v3", 3.0)]
    assert run() == [("classifier", "v3", "refused")]  # 0.6 does not beat v2's 0.8
    assert run() == [("classifier", "", "idle")]  # and is not tried again
    runtime.found += [("v4", 4.0)]
    runtime.reads = 0  # a new candidate's server: its counters start again
    assert run() == [("classifier", "v4", "promoted")]
    assert git(bare, "rev-parse", "main") == git(site_repo, "rev-parse", "HEAD") == published[-1][0]
    assert decided(site_repo, stack, "classifier") == {"v2", "v3", "v4"}
    # The lab's policy is not automatic: `--automatic` finds nothing to do in it.
    assert promote_pending(stack, None, PromoteContext(site_repo, runtime, admin, print)) == []


def test_a_step_the_shared_branch_does_not_take_does_not_act(site_repo: Path, tmp_path: Path) -> None:
    """Someone pushed meanwhile: the canary's commit is not published, so the canary does not start."""
    stack = site_repo / "stacks" / "Pulumi.lab.yaml"
    bare = _origin(site_repo, tmp_path)
    other = tmp_path / "other"
    git(tmp_path, "clone", "--quiet", str(bare), str(other))
    commit_file(other, "README", "theirs\n", "Someone else's change")
    git(other, "push", "--quiet", "origin", "main")
    runtime = FakeRuntime({"models/classifier/v1.pt": 0.5, "models/classifier/v2.pt": 0.8}, ([], []))
    runtime.found = [("v2", 2.0)]
    admin = _signing(tmp_path, "labadmin@aisite-lab", ["labadmin@aisite-lab"])
    with pytest.raises(PromotionCommitError, match="was not published and did not act"):
        promote_pending(
            stack,
            ["classifier"],
            PromoteContext(site_repo, runtime, admin, lambda _: None, lambda c: push(site_repo, "main", c)),
        )
    assert runtime.applied == []  # no canary ran
    assert "Someone else's change" in git(bare, "log", "-1", "--format=%s", "main")


def test_promote_options_are_checked_together_before_anything_runs() -> None:
    r = run_cli("promote", "lab", "--automatic", "--version", "v2", "--push", "ma..in")
    assert r.returncode == 2, r.stderr
    for words in ("--version: not with --automatic", "--push: "):
        assert words in r.stderr, r.stderr
    r = run_cli("promote", "lab", "--artifact", "m/x.pt", "--inject-error-rate", "0.5")
    assert r.returncode == 2
    for words in ("SERVING or --automatic: give one", "--artifact: only with --version", "only with --version (the"):
        assert words in r.stderr, r.stderr
    r = run_cli("promote", "lab", "classifier", "--end", "abandon", "--version", "v2")
    assert r.returncode == 2
    for words in ("--end: 'abandon' is not one of rollback, promote", "--end: it ends the running canary of SERVING"):
        assert words in r.stderr, r.stderr
    # A real site with no automatic policy: nothing to do, and no refusal for not being the lab.
    r = run_cli("promote", "h100pod", "--automatic", "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == {"outcomes": []}, r.stderr


def test_validate_names_the_promotions_the_reconciler_runs(tmp_path: Path) -> None:
    """The reconciler learns from the commit's own `aisite validate` which served models it promotes."""
    text = (ROOT / "stacks" / "Pulumi.lab.yaml").read_text()
    policy = "          training: resnet50-train\n"
    assert policy in text
    stack = tmp_path / "Pulumi.lab.yaml"
    for automatic, names in (("", []), ("          automatic: true\n", ["classifier"])):
        stack.write_text(text.replace(policy, policy + automatic))
        r = run_cli("validate", str(stack), "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["summary"]["automatic_promotions"] == names


def test_only_steps_the_policy_trusts_say_what_was_judged(site_repo: Path, tmp_path: Path) -> None:
    """Issue 64: `decided` read `Aisite-Version:` trailers from any commit in HEAD's history, so an unsigned commit
    merged under a signed tip could mark a checkpoint judged (never tried) with a trailer. Where the site verifies
    its commits, only steps signed by a key the policy trusts count."""
    stack = site_repo / "stacks" / "Pulumi.lab.yaml"
    admin_key, admin_line = ssh_signer(tmp_path, "labadmin@aisite-lab")
    admin = Signing(admin_key, (admin_line,), ("labadmin@aisite-lab",))
    text = edit_serving(
        stack.read_text(), "classifier", "canary", {"version": "v2", "artifact": "models/classifier/v2.pt", "share": 25}
    )
    commit_step(site_repo, stack, text, "serving classifier: canary v2", admin, about=("classifier", "v2"))
    # A side branch with an unsigned commit carrying a step's trailers, merged under a signed merge commit.
    git(site_repo, "checkout", "--quiet", "-b", "side", "HEAD~1")
    (site_repo / "notes.txt").write_text("x\n")
    git(site_repo, "add", "notes.txt")
    rel = "stacks/Pulumi.lab.yaml"
    forged = f"notes\n\nAisite-Stack: {rel}\nAisite-Serving: classifier\nAisite-Version: v9\n"
    git(site_repo, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "--quiet", "-m", forged)
    git(site_repo, "checkout", "--quiet", "main")
    sign = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={admin_key}", "-c", "user.name=a", "-c", "user.email=a@a"]
    git(site_repo, *sign, "merge", "--quiet", "-S", "--no-edit", "side")
    trust = ((admin_line,), ("labadmin@aisite-lab",))
    assert decided(site_repo, stack, "classifier") == {"v2", "v9"}, "without trust every trailer counts (the bug)"
    assert decided(site_repo, stack, "classifier", trust) == {"v2"}
    # A key the site allows but the policy does not name: its steps are not the policy's either.
    _, ops_line = ssh_signer(tmp_path, "ops@aisite-lab")
    assert decided(site_repo, stack, "classifier", ((admin_line, ops_line), ("ops@aisite-lab",))) == set()
