"""The quick acceptance of the nodes a rollout gives back (the verify step of aisite.maintenance.steps): their
node checks and a pair each way on every rail with a node in service (`Acceptance.of_members`), measured as
`aisite accept` measures (a lab for real; a site through jobs on its cluster). A check that fails fails the
member; where nothing can measure (a site without its admin kubeconfig, a stack without acceptance thresholds)
it is said, not passed."""

from __future__ import annotations

from collections.abc import Callable

from aisite.accept.lab import LabRunner
from aisite.accept.site import AnsibleCluster, SiteRunner
from aisite.accept.stages import Acceptance, Options, Runner
from aisite.lab.podman import LabError
from aisite.members import store
from aisite.paths import kubeconfig_path
from aisite.plan import Plan

# Short runs, one retry: a member waits for this before it is given back.
OPTIONS = Options(level="quick", seconds=1, mbytes=8.0, iterations=3, timeout=180.0, retries=1)
# Per member why it failed; what was skipped; per member what was measured.
Accept = Callable[[list[str]], tuple[dict[str, str], list[str], list[str]]]


def for_rollout(plan: Plan) -> tuple[Accept | None, str]:
    """What accepts a rollout's members, or None and why none can."""
    if plan.acceptance is None:
        return None, "the site sets no acceptance thresholds"
    runner: Runner
    if plan.connection == "lab":
        runner = LabRunner(plan, OPTIONS)
    elif kubeconfig_path(plan.site).is_file():
        runner = SiteRunner(plan, OPTIONS, AnsibleCluster(plan, plan.acceptance.namespace))
    else:
        return None, f"no Kubernetes API server (no kubeconfig at {kubeconfig_path(plan.site)})"

    def accept(members: list[str]) -> tuple[dict[str, str], list[str], list[str]]:
        try:
            # Peers only among nodes in service: not quarantined, provisioning or out for maintenance.
            out = store.site_held_out(plan.site)
            report = Acceptance(plan, OPTIONS, runner, lambda _: None).of_members(members, out)
        except LabError as exc:
            return dict.fromkeys(members, f"quick acceptance: {exc}"), [], []
        errors: dict[str, list[str]] = {}
        for c in report.checks:
            if c.verdict != "fail":
                continue
            value = f"{c.value:.3g}" if isinstance(c.value, float) else str(c.value)
            said = f"{c.subject} {c.metric} {value}, expected {c.expected}" + (f" ({c.detail})" if c.detail else "")
            for m in [x for x in (c.node, c.peer) if x is not None and x in members]:
                errors.setdefault(m, []).append(said)
        skipped = list(report.skipped) + [
            f"{c.subject} {c.metric}: {c.detail}" for c in report.checks if c.verdict == "skipped"
        ]
        measured = []
        for m in members:
            mine = [c for c in report.checks if m in (c.node, c.peer) and c.verdict != "skipped"]
            pairs = [c.value for c in mine if c.stage == "pair" and isinstance(c.value, float)]
            lowest = f", lowest pair {min(pairs):.3g} {runner.unit}" if pairs else ""
            passed = sum(c.verdict != "fail" for c in mine)
            measured.append(f"{m}: {passed} of {len(mine)} checks passed ({len(pairs)} pairs{lowest})")
        return {m: "quick acceptance: " + "; ".join(why)[:500] for m, why in errors.items()}, skipped, measured

    return accept, ""
