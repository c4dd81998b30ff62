"""Running playbooks against a rendered inventory with ansible-runner, with progress and a per-host recap."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import ansible_runner

from aisite.paths import deploys_dir
from aisite.playbooks import PLAYBOOKS
from aisite.render.inventory import Template, inventory_text
from aisite.roots import CONTENT, PACKAGE, SITE

EventHandler = Callable[[dict[str, Any]], None]


class PlaybookRunner(Protocol):
    """How the engines run a playbook: `run_playbook` with the caller's progress (the CLI's bars, a test's fake)."""

    def __call__(
        self,
        playbook: str,
        inventory: str,
        secret_env: dict[str, str],
        *,
        limit: str | None,
        check: bool,
        groups: dict[str, int],
        extravars: dict[str, Any] | None = None,
    ) -> RunResult: ...


@dataclass
class HostRecap:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0


@dataclass
class RunResult:
    status: str
    rc: int
    recap: dict[str, HostRecap]
    failures: list[str] = field(default_factory=list)
    # What the playbook recorded with ansible.builtin.set_stats (e.g. the cabling check's miswires).
    stats: dict[str, Any] = field(default_factory=dict)
    # Where the time went: wall seconds per play, in order; each task's seconds summed over its hosts, and its
    # wall seconds (from its start to the next task's, handlers included: what a pass waits for).
    plays: dict[str, float] = field(default_factory=dict)
    tasks: dict[str, float] = field(default_factory=dict)
    walls: dict[str, float] = field(default_factory=dict)
    # Each play's seconds per host, its tasks' durations summed: which host a play waited for.
    hosts: dict[str, dict[str, float]] = field(default_factory=dict)
    # `host: task` of every change, so a pass that should have changed nothing says what it changed.
    changes: list[str] = field(default_factory=list)

    def slowest(self, n: int = 15) -> list[tuple[str, float]]:
        return sorted(self.tasks.items(), key=lambda kv: -kv[1])[:n]

    def slowest_walls(self, n: int = 15) -> list[tuple[str, float]]:
        return sorted(self.walls.items(), key=lambda kv: -kv[1])[:n]

    def slowest_hosts(self, n: int = 3) -> dict[str, list[tuple[str, float]]]:
        """Each play's `n` slowest hosts and their seconds."""
        return {
            play: sorted(by_host.items(), key=lambda kv: (-kv[1], kv[0]))[:n] for play, by_host in self.hosts.items()
        }

    @property
    def ok(self) -> bool:
        return self.status == "successful" and self.rc == 0


def _recap(stats: Mapping[str, Any] | None) -> dict[str, HostRecap]:
    recap: dict[str, HostRecap] = {}
    if not stats:
        return recap
    for key, attr in (
        ("ok", "ok"),
        ("changed", "changed"),
        ("failures", "failed"),
        ("dark", "unreachable"),
        ("skipped", "skipped"),
    ):
        for host, count in (stats.get(key) or {}).items():
            setattr(recap.setdefault(host, HostRecap()), attr, count)
    return dict(sorted(recap.items()))


# The only extra vars Ansible may evaluate as templates: the project's own, written by aisite itself. Empty:
# nothing a caller passes needs evaluating (a value used in a template is substituted, not re-evaluated).
TEMPLATED_EXTRAVARS: frozenset[str] = frozenset()


def extravars_text(extravars: Mapping[str, Any]) -> str:
    """Extra vars as the YAML Ansible reads with `-e @file`: every string `!unsafe` (a node's, a BMC's, a
    cluster's or a report's words reach playbooks here, and ansible-core trusts extra vars as templates), except
    the allowlisted keys' own values. Keys must be the caller's names (identifiers), never foreign data."""
    for key in extravars:
        if not key.isidentifier():
            raise ValueError(f"extra var name {key!r} is not an identifier")
    tagged = {k: Template(v) if k in TEMPLATED_EXTRAVARS and isinstance(v, str) else v for k, v in extravars.items()}
    return inventory_text(tagged, header="Extra vars from aisite: every string is data (!unsafe).")


def ansible_env() -> dict[str, str]:
    """The environment every ansible-playbook run of aisite gets: this interpreter's Ansible, the tool's content
    (aisite.roots: the checkout's, or the package's own), and the inventory plugin it is read with."""
    return {
        # ansible-playbook of this interpreter's environment, whatever the caller's PATH.
        "PATH": os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", ""))),
        # The tool's content (aisite.roots), wherever the package is: its ansible.cfg, roles and plugins.
        "ANSIBLE_CONFIG": str(CONTENT / "ansible.cfg"),
        # The lab's podman settings, for the containers.podman connection.
        "CONTAINERS_CONF": str(PACKAGE / "lab" / "containers.conf"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        # The inventory is always the YAML file run_playbook writes: the default `auto` plugin would parse it whole
        # first, in vain (h100pod's: 8.1 s to read against 3.4 s with yaml alone).
        "ANSIBLE_INVENTORY_ENABLED": "ansible.builtin.yaml",
    }


def run_playbook(
    playbook: str,
    inventory: str,
    secret_env: Mapping[str, str] | None = None,
    *,
    on_event: EventHandler | None = None,
    limit: str | None = None,
    check: bool = False,
    extravars: Mapping[str, Any] | None = None,
) -> RunResult:
    """Run `playbook` (a playbook of the aisite.site collection: `site.yml`) against `inventory` (YAML text).

    The private data directory is a fresh 0700 directory removed afterwards; secrets go only into the child's
    environment, so neither they nor the inventory stay on disk. `extravars` are data, never templates: every
    string in them is written `!unsafe` (see `extravars_text`), whatever its caller read it from.
    """
    work = Path(tempfile.mkdtemp(prefix="aisite-run-"))
    # SIGTERM (a reconcile or systemd stopping us) cancels Ansible, whose process group ansible-runner kills
    # within its poll interval, instead of leaving it running without us.
    stop = threading.Event()
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, lambda _s, _f: stop.set()) if main else None
    failures: list[str] = []
    custom: dict[str, Any] = {}
    plays: dict[str, float] = {}
    tasks: dict[str, float] = {}
    walls: dict[str, float] = {}
    hosts: dict[str, dict[str, float]] = {}
    changes: list[str] = []
    now = time.monotonic()
    current: dict[str, Any] = {"play": None, "since": now, "task": None, "task_since": now}

    def close_task() -> None:
        if current["task"] is not None:
            walls[current["task"]] = walls.get(current["task"], 0.0) + time.monotonic() - current["task_since"]
            current["task"] = None

    def close_play() -> None:
        close_task()
        if current["play"] is not None:
            plays[current["play"]] = round(plays.get(current["play"], 0.0) + time.monotonic() - current["since"], 2)

    def handler(event: dict[str, Any]) -> bool:
        kind = event.get("event")
        data = event.get("event_data", {})
        if kind == "playbook_on_play_start":
            close_play()
            current.update(play=data.get("play", ""), since=time.monotonic())
        elif kind in ("playbook_on_task_start", "playbook_on_handler_task_start"):
            close_task()
            current.update(task=f"{data.get('play', '')} | {data.get('task', '')}", task_since=time.monotonic())
        elif kind == "playbook_on_stats":
            close_play()
            current["play"] = None
            custom.update(data.get("artifact_data") or {})
        elif kind in ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable"):
            task = f"{data.get('play', '')} | {data.get('task', '')}"
            seconds = float(data.get("duration") or 0.0)
            tasks[task] = tasks.get(task, 0.0) + seconds
            by_host = hosts.setdefault(str(data.get("play", "")), {})
            by_host[str(data.get("host"))] = by_host.get(str(data.get("host")), 0.0) + seconds
            res = data.get("res")
            res = res if isinstance(res, dict) else {}
            if kind == "runner_on_ok" and res.get("changed"):
                changes.append(f"{data.get('host')}: {data.get('task')}")
            if kind == "runner_on_unreachable" or (kind == "runner_on_failed" and not data.get("ignore_errors")):
                failures.append(f"{data.get('host')}: {data.get('task')}: {res.get('msg') or 'failed'}")
        if on_event:
            on_event(event)
        return True

    try:
        inv = work / "inventory.yml"
        inv.touch(mode=0o600)
        inv.write_text(inventory)
        # Extra vars go in a file of our own, tagged: ansible-runner's own (JSON) file would be trusted as templates.
        args = ["--check"] if check else []
        # The site repository whose .aisite/ the plays write to (the inventory's SITE_DIR_VAR).
        extravars = {"aisite_site_dir": str(SITE)} | dict(extravars or {})
        ev = work / "extravars.yml"
        ev.touch(mode=0o600)
        ev.write_text(extravars_text(extravars))
        args += ["-e", f"@{ev}"]
        cmdline = " ".join(shlex.quote(a) for a in args) or None
        env = ansible_env()
        # ansible-runner writes `envvars` into its artifacts; the secrets are set in our own process
        # environment for the child to inherit instead.
        saved = {k: os.environ.get(k) for k in (secret_env or {})}
        os.environ.update(secret_env or {})
        try:
            r = ansible_runner.run(
                private_data_dir=str(work),
                project_dir=str(CONTENT),
                playbook=str(PLAYBOOKS / playbook),
                inventory=str(inv),
                envvars=env,
                limit=limit,
                cmdline=cmdline,
                quiet=True,
                event_handler=handler,
                artifact_dir=str(work / "artifacts"),
                rotate_artifacts=1,
                cancel_callback=stop.is_set,
            )
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        rc = int(r.rc if r.rc is not None else 1)
        if stop.is_set():
            failures.append("stopped by SIGTERM: Ansible was cancelled; what had not finished runs again next time")
        if rc != 0 and not failures:
            # Ansible stopped before any task failed (syntax error, missing executable): keep its own words.
            text = r.stdout.read() if r.stdout else ""
            failures.append(" ".join(text.split()[-60:]) or f"ansible-runner {r.status} (rc {rc})")
        close_play()
        return RunResult(
            status="canceled" if stop.is_set() else r.status,
            rc=rc,
            recap=_recap(r.stats),
            failures=failures,
            stats=custom,
            plays=plays,
            tasks={k: round(v, 2) for k, v in tasks.items()},
            walls={k: round(v, 2) for k, v in walls.items()},
            hosts={play: {h: round(s, 2) for h, s in by_host.items()} for play, by_host in hosts.items()},
            changes=changes,
        )
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(work, ignore_errors=True)


def record_run(site: str, name: str, doc: Mapping[str, Any]) -> Path:
    """Keep the outcome of the last `deploy` of a layer (or the site) under .aisite/<site>/deploys/<name>.json.

    What a person or a later step (a test, CI) reads to know how the last run went; holds no secret (the recap,
    the failures and what was skipped)."""
    return write_json(deploys_dir(site) / f"{name}.json", doc)


def write_json(path: Path, doc: Mapping[str, Any]) -> Path:
    """Whole or not at all: a reader never sees half a record."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.new")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


def merge(results: list[RunResult]) -> RunResult:
    """Several playbook runs (the layers `deploy --changed` runs one after another) as one result."""
    recap: dict[str, HostRecap] = {}
    skipped: dict[str, dict[str, list[str]]] = {}
    tasks: dict[str, float] = {}
    walls: dict[str, float] = {}
    hosts: dict[str, dict[str, float]] = {}
    for r in results:
        for host, counts in r.recap.items():
            total = recap.setdefault(host, HostRecap())
            for key, value in vars(counts).items():
                setattr(total, key, getattr(total, key) + value)
        for host, by_role in dict(r.stats.get("skipped") or {}).items():
            for role, reasons in dict(by_role).items():
                skipped.setdefault(str(host), {}).setdefault(str(role), []).extend(reasons)
        for task, sec in r.tasks.items():
            tasks[task] = round(tasks.get(task, 0.0) + sec, 2)
        for task, sec in r.walls.items():
            walls[task] = round(walls.get(task, 0.0) + sec, 2)
        for play, by_host in r.hosts.items():
            for host, sec in by_host.items():
                hosts.setdefault(play, {})[host] = round(hosts.get(play, {}).get(host, 0.0) + sec, 2)
    ok = all(r.ok for r in results)
    return RunResult(
        status="successful" if ok else "failed",
        rc=max((r.rc for r in results), default=0),
        recap=dict(sorted(recap.items())),
        failures=[f for r in results for f in r.failures],
        stats={"skipped": skipped} if skipped else {},
        plays={play: sec for r in results for play, sec in r.plays.items()},
        tasks=tasks,
        walls=walls,
        hosts=hosts,
        changes=[c for r in results for c in r.changes],
    )


def applied_hosts(site: str) -> dict[str, dict[str, str]]:
    """layer -> host -> the state (`aisite.changes`) its last successful run of the layer applied, from this
    machine: what `deploy --changed` and `reconcile` compare with."""
    path = deploys_dir(site) / "applied.json"
    return {k: dict(v) for k, v in json.loads(path.read_text()).items()} if path.is_file() else {}


def record_applied(site: str, applied: Mapping[str, Mapping[str, str]], forget: Mapping[str, Iterable[str]]) -> None:
    """Merge what runs applied (layer -> host -> state) and drop what a check found drifted (layer -> hosts)."""
    doc = applied_hosts(site)
    for layer, hosts in applied.items():
        doc.setdefault(layer, {}).update(hosts)
    for layer, gone in forget.items():
        for host in gone:
            doc.get(layer, {}).pop(host, None)
    write_json(deploys_dir(site) / "applied.json", doc)


def forget_applied(site: str, hosts: Iterable[str] | None = None) -> None:
    """Hosts that are new again (a lab container recreated, a node reprovisioned): nothing is applied to them any
    more, in any layer; None: the whole site (its lab taken down)."""
    path = deploys_dir(site) / "applied.json"
    if hosts is None:
        path.unlink(missing_ok=True)
        return
    gone = set(hosts)
    if gone and path.is_file():
        doc = applied_hosts(site)
        write_json(path, {layer: {h: s for h, s in states.items() if h not in gone} for layer, states in doc.items()})
