"""The apply engine: what a deploy runs (which layers, on which hosts, what it holds back for a rollout, and why)
and running it with a record. `aisite deploy` is its options and its printing; the reconciler runs `aisite deploy
--json` from the commit it applies and reads `Applied.doc` (CONTRACT names its version; docs/gitops.md).

One definition of "changed" with reconcile, diff and the Pulumi layers (aisite.changes.layer_states): each host's
state per layer, against what its last successful run applied from this machine (aisite.deploy.applied_hosts)."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aisite.changes import LayerState, layer_states, resolve_pattern, run_limit, site_layer_inputs
from aisite.deploy import PlaybookRunner, RunResult, applied_hosts, forget_applied, merge, record_applied, record_run
from aisite.maintenance.hold import HoldBack, applied_plan, hold_back, record_applied_stack
from aisite.maintenance.roll import Rolled, begin, maintenance_lock, roll
from aisite.maintenance.run import start
from aisite.maintenance.state import load as load_rollout
from aisite.maintenance.steps import MEMBER_LAYERS
from aisite.members import store
from aisite.paths import maintenance_dir
from aisite.plan import Plan
from aisite.platform.serving import retired_ids
from aisite.playbooks import LAYERS, OPTIONAL_LAYERS
from aisite.render.bundle import write_bundle
from aisite.render.inventory import group_sizes, inventory_text
from aisite.render.manifests import layer_files, manifest_files
from aisite.repo import GitError, verified_tip

# The version of `Applied.doc`, the JSON `aisite deploy --json` prints and the reconciler reads: a key removed or
# changing meaning is a new version; keys added are not.
CONTRACT = "aisite.deploy/v1"

Run = tuple[list[str], str | None]  # layers of one playbook run, its --limit


class ApplyInputError(ValueError):
    """A request that cannot run as asked (`path: message` for the option at fault); nothing was run."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path, self.message = path, message


class ApplyFailedError(RuntimeError):
    """Something outside the site file stopped the deploy before any run (no trusted floor for the nodes' pull)."""


@dataclass(frozen=True, slots=True)
class Request:
    layer: str | None = None
    limit: str | None = None
    check: bool = False
    one_time_boot: str | None = None  # pxe | cd
    boot_media: str | None = None
    changed: bool = False

    def problems(self) -> list[tuple[str, str]]:
        """(option, message) for every option that does not fit the others."""
        out = []
        if self.one_time_boot is not None and self.one_time_boot not in ("pxe", "cd"):
            out.append(("--one-time-boot", f"{self.one_time_boot!r} is not pxe or cd"))
        media = self.boot_media
        if media is not None and (self.one_time_boot != "cd" or not media.startswith(("http://", "https://"))):
            out.append(("--boot-media", f"{media!r} needs --one-time-boot cd and an http(s) URL"))
        if self.layer is not None and self.layer not in (*LAYERS, *OPTIONAL_LAYERS):
            out.append(("--layer", f"unknown layer {self.layer!r}; known: {', '.join((*LAYERS, *OPTIONAL_LAYERS))}"))
        if self.changed and (self.layer or self.one_time_boot or self.check):
            out.append(("--changed", "it picks the layers itself: not with --layer, --one-time-boot or --check"))
        return out

    @property
    def whole_site(self) -> bool:
        return self.layer is None and self.limit is None and not self.check and not self.one_time_boot


@dataclass
class Scope:
    """What a deploy runs: the inventory, each layer's state per host, the runs, and what is held back."""

    plan: Plan
    inv: dict[str, Any]
    platform: dict[str, str]
    applies: dict[str, dict[str, str]]
    states: dict[str, LayerState]
    runs: list[Run]
    hold: HoldBack
    compared: str  # why the held-back members were not compared with the applied stack ("" when they were)

    @property
    def playbooks(self) -> list[str]:
        return [f"{names[0] if len(names) == 1 else 'site'}.yml" for names, _ in self.runs]


@dataclass
class Applied:
    """A deploy's outcome: the merged result, what it rolled, and `doc` (CONTRACT's JSON)."""

    result: RunResult
    scope: Scope
    rolled: Rolled | None
    doc: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        rolled = self.rolled is None or self.rolled.state.status == "done"
        return self.result.ok and not self.scope.hold.problems and rolled


def select_runs(  # noqa: PLR0917
    states: dict[str, LayerState],
    inv: dict[str, Any],
    req: Request,
    applied: dict[str, dict[str, str]],
    pulled: tuple[str, ...] = (),
    held: frozenset[str] = frozenset(),
) -> list[Run]:
    """The playbook runs of a deploy: the whole site in one (or one layer); with --changed each layer on its
    pending hosts; with --check each layer on its own, so drift is known per layer. The layers the nodes pull
    (gitops.pull_layers) are theirs: left out unless asked for by name (--layer), each other layer run alone.
    Members held back for a rollout (`held`) are left out of every run: then each layer runs on its own hosts."""
    layer, limit = req.layer, req.limit
    if not req.changed and not held:
        if layer:
            return [([layer], limit)]
        if req.check or pulled:
            return [([name], limit) for name in LAYERS if name not in pulled]
        return [(list(LAYERS), limit)]
    among = resolve_pattern(limit, inv) if limit else None
    if limit and among is None:
        why = "with --changed" if req.changed else "while members are held back for a rollout"
        raise ApplyInputError("--limit", f"{limit!r}: {why}, give host and group names (a:b or a,b)")
    runs: list[Run] = []
    for name, state in states.items():
        if (layer and name != layer) or (not layer and name in pulled):
            continue
        chosen = state.pending(applied.get(name, {})) if req.changed else list(state.hosts)
        pending = [h for h in chosen if (among is None or h in among) and h not in held]
        if pending:
            runs.append(([name], run_limit(state, pending)))
    return runs


def scope(p: Plan, req: Request) -> Scope:
    """What `req` runs on the site now: pure but for reading this machine's records (applied states, the stack last
    applied, the rollout and the member store)."""
    # The platform's charts and objects, rendered for the platform play (and part of its layer's state: the same
    # inputs as every other reader of the layers' states, aisite.changes.site_layer_inputs).
    platform = manifest_files(p)
    applies = layer_files(platform)
    inv, contents = site_layer_inputs(p, applies)
    names = (*LAYERS, req.layer) if req.layer in OPTIONAL_LAYERS else LAYERS
    states = layer_states(names, inv, contents)
    # Disruptive changes are rolled, not applied at once: against the stack the last whole-site deploy applied,
    # the members a change needs out of service (and those of a rollout under way) are left out of these runs.
    applied_before = applied_hosts(p.site)
    hold, compared = HoldBack(), "--check, --one-time-boot and the controller's layers hold nothing back"
    if not req.check and not req.one_time_boot and (req.layer is None or req.layer in MEMBER_LAYERS):
        old, compared = applied_plan(p.site)
        current = load_rollout(maintenance_dir(p.site) / "rollout.json")
        # A member with nothing applied from here (new, reinstalled, a lab container made afresh) is not in
        # service: it takes the change at once.
        in_service = {h for name, hosts in applied_before.items() if name in MEMBER_LAYERS for h in hosts}
        held_out = store.site_held_out(p.site, but="maintenance")
        hold = hold_back(old, p, current, held_out, in_service=in_service)
        if hold.rollout is not None and (req.layer or req.limit):
            # Rolling is the whole change's business: a run narrowed to a layer or some hosts leaves it waiting.
            hold.rollout = None
            hold.problems.append("a deploy narrowed by --layer or --limit does not roll: deploy the whole site")
    runs = select_runs(states, inv, req, applied_before, p.pulled_layers, frozenset(hold.members))
    return Scope(p, inv, platform, applies, states, runs, hold, compared)


def _hosts_of(state: LayerState, inv: dict[str, Any], limit: str | None) -> list[str]:
    if limit is None:
        return list(state.hosts)
    chosen = resolve_pattern(limit, inv)
    return [h for h in state.hosts if chosen is None or h in chosen]


def _outcome(
    states: dict[str, LayerState], runs: list[Run], results: list[RunResult], check: bool
) -> tuple[dict[str, dict[str, str]], dict[str, list[str]]]:
    """What the runs applied (layer -> host -> state: every host a successful run reached) and, for a check, what
    it found drifted (layer -> hosts that would change, whose applied state is then forgotten so that the next
    --changed run converges them)."""
    applied: dict[str, dict[str, str]] = {}
    drifted: dict[str, list[str]] = {}
    for (names, _), r in zip(runs, results, strict=False):
        for name in names:
            if check:
                hosts = sorted({c.split(": ", 1)[0] for c in r.changes} & set(states[name].hosts))
                if hosts:
                    drifted[name] = hosts
            elif r.ok:
                applied[name] = {h: s for h, s in states[name].hosts.items() if h in r.recap}
    return applied, drifted


def _extravars(s: Scope, req: Request, platform_dir: str) -> dict[str, Any]:
    p = s.plan
    extravars: dict[str, Any] = {
        "platform_dir": platform_dir,
        "platform_files": json.dumps([name for name in s.applies["platform"] if not name.startswith("charts/")]),
        "workload_files": json.dumps(list(s.applies["workloads"])),
        # A candidate's objects once its canary ended: applying the files never deletes them.
        "workload_removals": json.dumps(retired_ids(p)),
    }
    if req.layer == "pull" and p.gitops and p.pulled_layers and not req.check:
        # The floor a node's first pass must descend from: the branch's tip as this controller fetched and
        # verified it now (a signed commit by an allowed signer), never one a node is served later.
        try:
            extravars["pull_floor"] = verified_tip(p.gitops.pull_repository, p.gitops.branch, p.gitops.allowed_signers)
        except GitError as exc:
            raise ApplyFailedError(f"--layer pull: no trusted floor for the nodes' first pass: {exc}") from None
    if req.one_time_boot:
        extravars["bmc_one_time_boot"] = req.one_time_boot
    if req.boot_media:
        extravars["bmc_boot_media_url"] = req.boot_media
    return extravars


def apply(  # noqa: PLR0917
    p: Plan,
    req: Request,
    stack: Path,
    secret_env: dict[str, Any],
    play: PlaybookRunner,
    note: Callable[[str], None],
) -> Applied:
    """Run `req` on the site: its runs in order (stopping at the first failure), what they applied recorded, then
    what it held back rolled member by member (`note` hears the drains' word), the stack recorded as applied once
    every member took it or a rollout owns it, and the run recorded under .aisite/SITE/deploys/. Raises
    ApplyInputError (nothing run) and ApplyFailedError (nothing run); SiteError from a rollout that cannot read
    the site's secrets."""
    problems = req.problems()
    if problems:
        raise ApplyInputError(*problems[0])
    s = scope(p, req)
    text, groups = inventory_text(s.inv), group_sizes(s.inv)
    started = time.time()
    results: list[RunResult] = []
    with tempfile.TemporaryDirectory(prefix="aisite-platform-") as platform_dir:
        write_bundle(s.platform, Path(platform_dir))
        extravars = _extravars(s, req, platform_dir)
        env = {k: str(v) for k, v in secret_env.items()}
        for playbook, (_, limit) in zip(s.playbooks, s.runs, strict=True):
            results.append(play(playbook, text, env, limit=limit, check=req.check, groups=groups, extravars=extravars))
            if not results[-1].ok:
                break
    result = merge(results)
    applied, drifted = _outcome(s.states, s.runs, results, req.check)
    record_applied(p.site, applied, drifted)
    # Then what it held back rolls, member by member; the stack is recorded once every member took it or is
    # owned by a rollout.
    rolled = _roll_held(p, s.hold, str(stack), play, note) if result.ok and s.hold.rollout is not None else None
    if result.ok and s.hold.settled and req.whole_site:
        record_applied_stack(p.site, stack.read_text())
    if req.one_time_boot and not req.check:
        # The nodes asked to boot from the network or a CD are being reinstalled: nothing stays applied to them.
        forget_applied(p.site, [h.removesuffix("-bmc") for h in result.recap if h.endswith("-bmc")])
    out = Applied(result, s, rolled)
    out.doc = _doc(s, req, results, result, rolled)
    record_run(
        p.site,
        "changed" if req.changed else req.layer or "site",
        out.doc
        | {
            "playbook": " ".join(s.playbooks),
            "limit": req.limit,
            "check": req.check,
            "started": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
            "seconds": round(time.time() - started, 1),
        },
    )
    return out


def _doc(s: Scope, req: Request, results: list[RunResult], result: RunResult, rolled: Rolled | None) -> dict[str, Any]:
    # What a host could not do and said so (a BMC without NTP, a node without a GPU): host -> role -> reasons.
    skipped = {
        str(h): {str(role): [str(x) for x in reasons] for role, reasons in dict(by_role).items()}
        for h, by_role in dict(result.stats.get("skipped") or {}).items()
    }
    done = s.runs[: len(results)]
    return {
        "contract": CONTRACT,
        "status": result.status,
        "rc": result.rc,
        "failures": result.failures,
        "skipped": skipped,
        "recap": {h: vars(r) for h, r in result.recap.items()},
        "layers": [n for names, _ in done for n in names],
        # Layers the nodes converge themselves (gitops.pull_layers), not run from here unless asked by --layer.
        "pulled_by_nodes": [n for n in s.plan.pulled_layers if n != req.layer],
        # Each layer run and the hosts it ran on (every host the layer targets, or those --changed/--limit chose).
        "runs": [{"layer": n, "hosts": _hosts_of(s.states[n], s.inv, limit)} for names, limit in done for n in names],
        "changes": result.changes,
        # What this deploy left to a rollout (members, why, the waves; why a change cannot roll now).
        "held_back": s.hold.to_dict() | {"compared_with_applied": not s.compared, "why_not": s.compared},
        "rollout": rolled.doc() if rolled else None,
        # Where the time went: wall seconds per play, the slowest tasks summed over their hosts, and the tasks
        # a pass waited longest for.
        "plays": result.plays,
        "slowest_tasks": [{"task": t, "seconds": sec} for t, sec in result.slowest()],
        "longest_tasks": [{"task": t, "seconds": sec} for t, sec in result.slowest_walls()],
        # Each play's slowest hosts, their tasks' seconds summed: the host a play waited for.
        "slowest_hosts": {
            play: [{"host": h, "seconds": sec} for h, sec in top] for play, top in result.slowest_hosts().items()
        },
    }


def _roll_held(p: Plan, hold: HoldBack, stack: str, play: PlaybookRunner, note: Callable[[str], None]) -> Rolled | None:
    """Roll the members deploy held back, in their waves, as `aisite maintenance start` would (resumable the same
    way); None, with why in the hold's problems, where it cannot start. MaintenanceBusyError where another
    maintenance command of the site runs."""
    assert hold.rollout is not None
    with maintenance_lock(p.site):
        current = load_rollout(maintenance_dir(p.site) / "rollout.json")
        state, why = start(hold.rollout, p.site, f"deploy of {stack} (held back from it)", store.timestamp())
        if state is None:
            hold.problems += why
            return None
        begin(p.site, state, current)
        return roll(p, state, play, note)
