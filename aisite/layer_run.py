"""One layer run on some of its hosts, and the record of what it applied there (`apply_layer`): what a rollout's
apply step and a Pulumi layer (`aisite play`) each do, written once. A whole deploy runs several layers in one
playbook and records them together (aisite.apply).

A Pulumi layer hands its run to `aisite play`: the same scope and the same record of what was applied as `aisite
deploy --changed`, so that `pulumi up` and `aisite deploy` (and the reconciler) run a change only where it is not
applied yet, whichever of them applied it.

The program (aisite.components.layers) computes each layer's state per host (aisite.changes) and the hosts whose
state is not the one the site repository's .aisite/ records as applied; the Command gives `aisite play` this
document on its standard input; play runs the layer on those hosts alone and records what it applied."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from aisite.changes import LayerState, run_limit
from aisite.deploy import RunResult, record_applied, record_run, run_playbook
from aisite.fields import DnsLabel

# The layers the Pulumi program runs through Ansible (the platform talks to the API itself).
PulumiLayer = Literal["oob", "fabric", "hosts", "cluster", "workloads"]
# An inventory host name (nodes, switches, BMCs, localhost), a state a sha256 in hex.
HostName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")]
Digest = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class LayerRun(BaseModel):
    """What a Pulumi layer's Command hands `aisite play` on its standard input (JSON)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    site: DnsLabel
    layer: PulumiLayer
    inventory: Annotated[str, Field(max_length=256 * 1024 * 1024)]
    # host -> its state in the layer (every host the layer targets).
    states: dict[HostName, Digest]
    # The hosts to run on: those whose state is not the one last applied (empty: nothing to run).
    pending: list[HostName]

    @model_validator(mode="after")
    def _pending_are_the_layers(self) -> LayerRun:
        stray = [h for h in self.pending if h not in self.states]
        if stray:
            raise ValueError(f"pending hosts the layer does not target: {', '.join(stray)}")
        return self

    def limit(self) -> str | None:
        return run_limit(LayerState(self.layer, dict(self.states)), list(self.pending))


def host_errors(result: RunResult, hosts: Iterable[str]) -> dict[str, str]:
    """Per host the run failed on, why (a host the run did not reach counts only when the run failed)."""
    errors = {}
    for n in hosts:
        r = result.recap.get(n)
        if r is None:
            errors[n] = "not reached" if not result.ok else ""
        elif r.unreachable:
            errors[n] = "unreachable"
        elif r.failed:
            errors[n] = "; ".join(f for f in result.failures if n in f)[:500] or "a task failed"
        else:
            errors[n] = ""
    return {n: e for n, e in errors.items() if e}


def apply_layer(
    site: str, state: LayerState, hosts: list[str], run: Callable[[str, str | None], RunResult]
) -> tuple[RunResult, dict[str, str]]:
    """Run the layer on `hosts` (some of those it targets) through `run(playbook, limit)` and record, for each host
    the run reached without failing there, the state it applied; the result and, per host that failed, why."""
    result = run(f"{state.layer}.yml", run_limit(state, hosts))
    errors = host_errors(result, hosts)
    done = {h: s for h, s in state.hosts.items() if h in hosts and h in result.recap and h not in errors}
    if done:
        record_applied(site, {state.layer: done}, {})
    return result, errors


def run_layer(run: LayerRun, secret_env: Mapping[str, str]) -> RunResult | None:
    """Run the layer on its pending hosts and record what it applied (as `deploy --changed` does); None when no
    host is pending."""
    pending = list(run.pending)
    if not pending:
        return None
    started = time.time()
    limit = run.limit()
    result, _ = apply_layer(
        run.site,
        LayerState(run.layer, dict(run.states)),
        pending,
        lambda playbook, lim: run_playbook(playbook, run.inventory, secret_env, limit=lim),
    )
    record_run(
        run.site,
        f"pulumi-{run.layer}",
        {
            "status": result.status,
            "rc": result.rc,
            "failures": result.failures,
            "layers": [run.layer],
            "runs": [{"layer": run.layer, "hosts": pending if limit else list(run.states)}],
            "recap": {h: vars(r) for h, r in result.recap.items()},
            "started": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
            "seconds": round(time.time() - started, 1),
            "by": "pulumi up",
        },
    )
    return result
