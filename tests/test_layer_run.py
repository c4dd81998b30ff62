"""aisite.layer_run.apply_layer: one layer run on some of its hosts and its record, written once for a rollout's
apply step and a Pulumi layer (`aisite play`)."""

from __future__ import annotations

import shutil

from aisite.changes import LayerState
from aisite.deploy import HostRecap, RunResult, applied_hosts
from aisite.layer_run import apply_layer, host_errors
from aisite.paths import site_dir

STATE = LayerState("hosts", {"gpu01": "a" * 64, "gpu02": "b" * 64, "gpu03": "c" * 64})


def test_a_layer_run_records_each_host_it_reached_without_failing_and_says_why_the_others_failed() -> None:
    site = "t-apply-layer"
    asked: list[tuple[str, str | None]] = []

    def run(playbook: str, limit: str | None) -> RunResult:
        asked.append((playbook, limit))
        recap = {"gpu01": HostRecap(ok=3), "gpu02": HostRecap(ok=1, failed=1)}
        return RunResult("failed", 2, recap, failures=["gpu02: Hosts | Write: permission denied"])

    try:
        result, errors = apply_layer(site, STATE, ["gpu01", "gpu02", "gpu03"], run)
        # The whole layer: no --limit; two of its hosts.
        assert asked == [("hosts.yml", None)] and result.rc == 2
        assert errors == {"gpu02": "gpu02: Hosts | Write: permission denied", "gpu03": "not reached"}
        assert applied_hosts(site) == {"hosts": {"gpu01": "a" * 64}}
        # Some of its hosts: named; a successful run records each (merged with what was there).
        asked.clear()
        ok = RunResult("successful", 0, {"gpu02": HostRecap(ok=2), "gpu03": HostRecap(unreachable=1)})
        result, errors = apply_layer(site, STATE, ["gpu02", "gpu03"], lambda pb, lim: asked.append((pb, lim)) or ok)
        assert asked == [("hosts.yml", "gpu02,gpu03")] and errors == {"gpu03": "unreachable"}
        assert applied_hosts(site) == {"hosts": {"gpu01": "a" * 64, "gpu02": "b" * 64}}
    finally:
        shutil.rmtree(site_dir(site), ignore_errors=True)


def test_a_host_a_successful_run_did_not_reach_is_no_error() -> None:
    # A host a play skipped (its group empty of it) is not reached, and the run succeeded: nothing to say.
    assert host_errors(RunResult("successful", 0, {}), ["gpu01"]) == {}
