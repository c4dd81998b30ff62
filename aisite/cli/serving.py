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
from rich.table import Table

from aisite.cli.common import EXIT_FAILED, EXIT_INVALID, JsonOpt, StackArg, err, out
from aisite.cli.lab import lab_plan
from aisite.lab.podman import LabError
from aisite.loader import resolve_stack
from aisite.plan import Plan, ServingPlan
from aisite.repo import GitError, toplevel
from aisite.serving import lab as servelab
from aisite.serving.commits import PromotionCommitError, Signing
from aisite.serving.policy import PolicyInputError
from aisite.serving.promote import PromoteError, check_candidate, promote

serve_app = typer.Typer(no_args_is_help=True, help="Served models on the lab: data, training, servers, requests.")
ServingArg = Annotated[str, typer.Argument(help="A served model's name under site.serving.")]
_FAILURES = (servelab.ServingLabError, LabError, PolicyInputError, PromotionCommitError, GitError, OSError)


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
    return artifact or f"models/{name}/{version}.pt"


def promote_command(  # noqa: PLR0917 - Typer passes every option positionally
    stack: StackArg,
    name: ServingArg,
    version: Annotated[str, typer.Option(help="The candidate's version.")],
    artifact: Annotated[
        str | None, typer.Option(help="Its checkpoint in the tenant's storage (default models/NAME/VERSION.pt).")
    ] = None,
    repo: Annotated[
        Path | None, typer.Option(help="The site repository to commit to (default: the one holding the stack file).")
    ] = None,
    signing_key: Annotated[
        Path | None, typer.Option(help="The SSH key that signs the steps (a principal the policy's signers name).")
    ] = None,
    inject_latency_ms: Annotated[float, typer.Option(min=0, help="Lab only: slow the candidate's server.")] = 0,
    inject_error_rate: Annotated[float, typer.Option(min=0, max=1, help="Lab only: fail its requests.")] = 0,
    as_json_: JsonOpt = False,
) -> None:
    """Evaluate a candidate checkpoint against the champion, refuse it with the figures or run its canary, and
    promote or roll it back: each step a signed commit to the site repository."""
    # On a site the evaluation would run as its cluster's jobs and the canary read its proxy's metrics, which this
    # machine cannot reach: this version promotes on lab stacks.
    plan = lab_plan(stack, as_json_)
    stack_file = resolve_stack(stack).resolve()
    faults = servelab.fault_flags(inject_latency_ms, inject_error_rate)
    runtime = servelab.LabRuntime(_say, faults={version: faults} if faults else None)
    try:
        site_repo = repo or toplevel(stack_file)
        signing = None
        if signing_key is not None:
            allowed = plan.gitops.allowed_signers if plan.gitops else ()
            s = next((x for x in plan.serving if x.name == name), None)
            signers = s.promotion.signers if s and s.promotion else ()
            signing = Signing(signing_key, tuple(allowed), tuple(signers))
        outcome = promote(
            stack_file,
            name,
            version,
            _artifact(name, version, artifact),
            repo=site_repo,
            runtime=runtime,
            signing=signing,
            say=_say,
        )
    except PromoteError as exc:
        print(f"error: promote: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_INVALID) from None
    except _FAILURES as exc:
        print(f"error: promote: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_FAILED) from None
    if as_json_:
        print(json.dumps(asdict(outcome), indent=2))
        return
    t = Table(title=f"{plan.site}: {name} {version}: {outcome.state}")
    for col in ("step", "commit", "subject"):
        t.add_column(col)
    for c in outcome.commits:
        t.add_row(c["step"], c["commit"][:12], c["subject"])
    out.print(t)
    out.print(f"gate: {outcome.gate['reason']}", markup=False)
    for version_, f in outcome.traffic.items():
        out.print(f"requests answered by {version_}: {f}", markup=False)
    if outcome.canary and outcome.canary["crossed"]:
        out.print("limits crossed: " + "; ".join(outcome.canary["crossed"]), markup=False)
