"""Served models: `promote` (a new checkpoint through the gate and the canary, each step a commit) and, on the
lab, `serve` (its data, training, servers and proxy, requests through it)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from pydantic import TypeAdapter
from rich.table import Table

from aisite.cli.common import EXIT_FAILED, EXIT_INVALID, JsonOpt, StackArg, err, load_plan, out
from aisite.cli.lab import lab_plan
from aisite.fields import GitBranch, field_problem
from aisite.lab import serving as servelab
from aisite.lab.podman import LabError
from aisite.loader import resolve_stack
from aisite.paths import kubeconfig_path
from aisite.plan import Plan, ServingPlan
from aisite.repo import GitError, toplevel
from aisite.serving.auto import checkpoint, promote_pending
from aisite.serving.cluster import ClusterError, KubeRuntime
from aisite.serving.commits import PromotionCommitError, Signing
from aisite.serving.commits import push as push_step
from aisite.serving.policy import PolicyInputError
from aisite.serving.promote import (
    Outcome,
    PromoteContext,
    PromoteError,
    Runtime,
    check_candidate,
    end_canary,
    ending_problem,
    promote,
)

serve_app = typer.Typer(no_args_is_help=True, help="Served models on the lab: data, training, servers, requests.")
ServingArg = Annotated[str, typer.Argument(help="A served model's name under site.serving.")]
_FAILURES = (
    servelab.ServingLabError,
    ClusterError,
    LabError,
    PolicyInputError,
    PromotionCommitError,
    GitError,
    OSError,
)


def _lab_serving(stack: str, name: str, as_json: bool) -> tuple[Plan, ServingPlan]:
    plan = lab_plan(stack, as_json)
    s = next((x for x in plan.serving if x.name == name), None)
    if s is None or s.promotion is None:
        known = ", ".join(x.name for x in plan.serving if x.promotion) or "none"
        print(
            f"error: site.serving: no served model {name!r} with a promotion policy (known: {known})", file=sys.stderr
        )
        raise typer.Exit(EXIT_INVALID)
    return plan, s


def _say(message: str) -> None:
    err.print(message, markup=False, highlight=False)


@contextlib.contextmanager
def _failing(what: str) -> Iterator[None]:
    """A step's failure as `error: WHAT: why` and exit 1 (a bad request is exit 2, before any step)."""
    try:
        yield
    except _FAILURES as exc:
        print(f"error: {what}: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_FAILED) from None


@serve_app.command("up")
def serve_up(stack: StackArg, name: ServingArg, steps: Annotated[int, typer.Option(min=1)] = 2) -> None:
    """Generate the held-out and training sets into the site's storage, train the champion's checkpoint where it
    is missing (STEPS steps), and start the servers and the proxy the stack describes."""
    plan, s = _lab_serving(stack, name, False)
    assert s.promotion is not None
    with _failing("serve up"):
        servelab.prepare_data(plan, s, s.promotion.dataset, _say)
        champion = s.versions[0]
        node = servelab.hosts(plan)["champion"]
        if not servelab.on_node(plan, node, champion.artifact).is_file():
            servelab.train(plan, s, champion.artifact, steps, _say)
        servelab.apply(plan, s, _say)


@serve_app.command("train")
def serve_train(
    stack: StackArg,
    name: ServingArg,
    version: Annotated[str, typer.Option(help="The new checkpoint's version (a DNS label).")],
    steps: Annotated[int, typer.Option(min=1, help="Training steps: more, a better model.")] = 40,
) -> None:
    """Train a new checkpoint of the served network (CPU, on the first GPU node) into models/NAME/VERSION.pt."""
    plan, s = _lab_serving(stack, name, False)
    try:
        check_candidate(version, _artifact(name, version, None))
    except PromoteError as exc:
        print(f"error: serve train: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID) from None
    with _failing("serve train"):
        servelab.train(plan, s, _artifact(name, version, None), steps, _say)


@serve_app.command("load")
def serve_load(
    stack: StackArg,
    name: ServingArg,
    seconds: Annotated[float, typer.Option(min=1, max=3600)] = 10,
    requests: Annotated[int, typer.Option(min=1, max=100_000)] = 200,
    as_json_: JsonOpt = False,
) -> None:
    """Send bounded requests through the proxy from the controller: per answering version, requests, errors and
    latency."""
    plan, s = _lab_serving(stack, name, as_json_)
    assert s.promotion is not None
    with _failing("serve load"):
        figures = servelab.load(plan, s, s.promotion.dataset, seconds=seconds, max_requests=requests)
    if as_json_:
        print(json.dumps(figures, indent=2))
        return
    t = Table(title=f"{plan.site}: {name}")
    for col in ("version", "requests", "errors", "p50 ms", "p95 ms"):
        t.add_column(col)
    for version, f in figures.items():
        t.add_row(version, *(str(f[k]) for k in ("requests", "errors", "p50_ms", "p95_ms")))
    out.print(t)


@serve_app.command("down")
def serve_down(stack: StackArg) -> None:
    """Stop the servers and proxies this lab started (and nothing else)."""
    plan = lab_plan(stack)
    stopped = servelab.stop_all(plan.site)
    _say(f"stopped: {', '.join(stopped) or 'nothing was running'}")


def _artifact(name: str, version: str, artifact: str | None) -> str:
    return artifact or checkpoint(name, version)


_BRANCH: TypeAdapter[str] = TypeAdapter(GitBranch)


def _request_problems(  # noqa: PLR0917 - the options being checked together
    name: str | None,
    version: str | None,
    artifact: str | None,
    automatic: bool,
    push: str | None,
    faults: bool,
    end: str | None,
) -> list[str]:
    """Every problem of a promote request's options at once (exit 2 before anything runs)."""
    problems = []
    if end is not None and (bad := ending_problem(end)):
        problems.append(f"--end: {bad}")
    if end is not None and (automatic or version is not None or faults):
        problems.append("--end: it ends the running canary of SERVING; not with --automatic, --version or faults")
    if (name is None) == (not automatic):
        problems.append("SERVING or --automatic: give one")
    if automatic and version is not None:
        problems.append("--version: not with --automatic (each model's newest checkpoint is taken, unless judged)")
    if artifact is not None and version is None:
        problems.append("--artifact: only with --version")
    if faults and version is None:
        problems.append("--inject-latency-ms and --inject-error-rate: only with --version (the version made to fail)")
    if push is not None and (why := field_problem(_BRANCH, push)):
        problems.append(f"--push: {why}")
    return problems


def _print_outcome(plan: Plan, o: Outcome) -> None:
    if o.state == "idle":
        out.print(f"{o.serving}: nothing to promote: {o.note}", markup=False)
        return
    t = Table(title=f"{plan.site}: {o.serving} {o.candidate}: {o.state}")
    for col in ("step", "commit", "subject"):
        t.add_column(col)
    for c in o.commits:
        t.add_row(c["step"], c["commit"][:12], c["subject"])
    out.print(t)
    if o.gate:
        out.print(f"gate: {o.gate['reason']}", markup=False)
    if o.note:
        out.print(o.note, markup=False)
    for version_, f in o.traffic.items():
        out.print(f"requests answered by {version_}: {f}", markup=False)
    if o.canary and o.canary["crossed"]:
        out.print("limits crossed: " + "; ".join(o.canary["crossed"]), markup=False)


def _site_problems(plan: Plan, faults: bool, push: str | None) -> list[str]:
    """What a site (not the lab) refuses: every step must reach the branch the reconciler applies before it acts
    (one acted on from a local commit would be undone by its next pass); the fault flags are the lab's."""
    if plan.connection == "lab":
        return []
    problems = []
    if faults:
        problems.append("--inject-latency-ms and --inject-error-rate: the lab's, not a site's")
    if push is None:
        problems.append(
            f"--push BRANCH: {plan.site} is reconciled from Git, so each step goes to the branch its reconciler "
            "applies before it acts (a step acted on from a local commit would be undone by the next pass)"
        )
    return problems


def _runtime(plan: Plan, version: str | None, faults: list[str]) -> Runtime:
    """The lab's processes, or the site's cluster (its kubeconfig)."""
    if plan.connection == "lab":
        return servelab.LabRuntime(_say, faults={version: faults} if faults and version else None)
    return KubeRuntime(kubeconfig_path(plan.site), _say)


def _print_problems(problems: list[str]) -> None:
    for p in problems:
        print(f"error: promote: {p}", file=sys.stderr)


def promote_command(  # noqa: PLR0917 - Typer passes every option positionally
    stack: StackArg,
    name: Annotated[
        str | None, typer.Argument(help="A served model's name under site.serving (or --automatic).")
    ] = None,
    version: Annotated[
        str | None,
        typer.Option(help="The candidate's version (default: the newest checkpoint in models/NAME/, unless judged)."),
    ] = None,
    artifact: Annotated[
        str | None, typer.Option(help="Its checkpoint in the tenant's storage (default models/NAME/VERSION.pt).")
    ] = None,
    automatic: Annotated[
        bool, typer.Option("--automatic", help="Every served model whose policy is automatic (the reconciler's call).")
    ] = False,
    push: Annotated[
        str | None,
        typer.Option(help="Push each step to this branch of the repository's origin before the step acts."),
    ] = None,
    repo: Annotated[
        Path | None, typer.Option(help="The site repository to commit to (default: the one holding the stack file).")
    ] = None,
    signing_key: Annotated[
        Path | None, typer.Option(help="The SSH key that signs the steps (a principal the policy's signers name).")
    ] = None,
    inject_latency_ms: Annotated[float, typer.Option(min=0, help="Lab only: slow the candidate's server.")] = 0,
    inject_error_rate: Annotated[float, typer.Option(min=0, max=1, help="Lab only: fail its requests.")] = 0,
    end: Annotated[
        str | None,
        typer.Option(
            help="End SERVING's running canary by hand, without its verdict: rollback or promote (one cut short)."
        ),
    ] = None,
    as_json_: JsonOpt = False,
) -> None:
    """Evaluate a candidate checkpoint against the champion, refuse it with the figures or run its canary, and
    promote or roll it back: each step a signed commit to the site repository. Without --version, the newest
    checkpoint, unless a promotion judged it already (the repository's history says which were); with --automatic,
    that of every served model whose policy is automatic. On a site (not the lab) --push is required, and the
    steps run through the cluster's API server (the kubeconfig the cluster layer fetched)."""
    faults = servelab.fault_flags(inject_latency_ms, inject_error_rate)
    problems = _request_problems(name, version, artifact, automatic, push, bool(faults), end)
    _print_problems(problems)  # before the stack is read: one that does not load exits 2 with its own problems
    plan = load_plan(stack, as_json_)
    if not problems and automatic and not any(s.promotion and s.promotion.automatic for s in plan.serving):
        _say(f"{plan.site}: no served model's promotion is automatic")
        if as_json_:
            print(json.dumps({"outcomes": []}))
        return
    site_problems = _site_problems(plan, bool(faults), push)
    _print_problems(site_problems)
    if problems or site_problems:
        raise typer.Exit(EXIT_INVALID)
    stack_file = resolve_stack(stack).resolve()
    try:
        runtime = _runtime(plan, version, faults)
        site_repo = repo or toplevel(stack_file)
        signing = None
        if signing_key is not None:
            # The signers each model's policy names are promote's to apply.
            signing = Signing(signing_key, tuple(plan.gitops.allowed_signers if plan.gitops else ()), ())

        def publish(commit: str) -> None:
            assert push is not None
            push_step(site_repo, push, commit)

        ctx = PromoteContext(site_repo, runtime, signing, _say, publish if push else None)
        if end is not None:
            assert name is not None
            outcomes = [end_canary(stack_file, name, end, ctx)]
        elif version is not None:
            assert name is not None
            outcomes = [promote(stack_file, name, version, _artifact(name, version, artifact), ctx)]
        else:
            outcomes = promote_pending(stack_file, [name] if name else None, ctx)
    except PromoteError as exc:
        print(f"error: promote: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID) from None
    except _FAILURES as exc:
        print(f"error: promote: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_FAILED) from None
    if as_json_:
        docs = [asdict(o) for o in outcomes]
        print(json.dumps({"outcomes": docs} if automatic else docs[0], indent=2))
        return
    for o in outcomes:
        _print_outcome(plan, o)
