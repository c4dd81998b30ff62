"""A playbook run with a progress bar on stderr (one line per task where stderr is not a terminal): how every
command that runs Ansible shows it."""

from __future__ import annotations

from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from aisite.cli.common import err
from aisite.deploy import RunResult, run_playbook


def progress_runner(
    playbook: str,
    inventory: str,
    secret_env: dict[str, str],
    *,
    limit: str | None,
    check: bool,
    groups: dict[str, int],
    extravars: dict[str, Any] | None = None,
) -> RunResult:
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as progress:
        bar = progress.add_task(f"{playbook}: starting", total=None)
        state: dict[str, Any] = {"done": 0, "task": "", "hosts": None}

        def on_event(event: dict[str, Any]) -> None:
            kind = event.get("event", "")
            data = event.get("event_data", {})
            if kind == "playbook_on_play_start":
                # Simple `a:b` patterns of inventory groups give the play's host count; others stay open-ended.
                parts = str(data.get("play_pattern", "")).split(":")
                state["hosts"] = sum(groups[g] for g in parts) if all(g in groups for g in parts) else None
            elif kind == "playbook_on_task_start":
                state["task"] = data.get("task", "")
                state["done"] = 0
                if not err.is_terminal:
                    # Logs and CI get one line per task instead of a redrawn bar.
                    progress.console.print(f"{data.get('play', '')} | {state['task']}", markup=False)
                total = 1 if data.get("run_once") else state["hosts"]
                progress.update(bar, description=f"{data.get('play', '')} | {state['task']}", completed=0, total=total)
            elif kind in ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable"):
                state["done"] += 1
                progress.update(bar, completed=state["done"])
                if kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
                    progress.console.print(f"[red]{kind.split('_')[-1]}[/]: {data.get('host')}: {state['task']}")

        result = run_playbook(
            playbook, inventory, secret_env, on_event=on_event, limit=limit, check=check, extravars=extravars
        )
        progress.update(bar, description=f"{playbook}: {result.status}")
    return result
