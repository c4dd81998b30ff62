"""What each command does to the world, said first in its help: a person who only wants to look can tell, before
running it, whether a command reaches a host or changes anything. One table; registering a command without an
entry here fails at import (tests/test_cli.py runs the table against every registered command)."""

from __future__ import annotations

import inspect

import typer

LOOKS = "Reads files on this machine only; reaches no host, changes nothing."
WRITES = "Writes files on this machine only; reaches no host."
PROBES = "Reaches hosts to read them; changes nothing on them."
ACTS = "Reaches the site's hosts and changes them."
LAB = "Acts on this machine's lab only (its containers, networks and VM); reaches no site host."

EFFECTS: dict[str, str] = {
    "init": WRITES,
    "validate": LOOKS,
    "schema": "Prints the JSON Schema; reads no site, reaches no host.",
    "plan": LOOKS,
    "render": WRITES,
    "images": LOOKS,
    "provision": ACTS + " --dry-run says which nodes it would install and changes nothing.",
    "deploy": ACTS + " --check (Ansible's check mode) changes nothing.",
    "cabling": PROBES,
    "diff": "Reads the stack at two revisions; reaches no host but the BMCs with --firmware (read only); changes "
    "nothing.",
    "promote": ACTS + " Each step is a commit to the site repository.",
    "accept": "Reaches the nodes and loads them with tests (GPUs, links, collectives); changes no setting.",
    "health": "Reaches every node over SSH and may quarantine (taint, cordon, drain); --dry-run changes nothing. "
    "To look only: `aisite status STACK --health`.",
    "status": LOOKS,
    "play": ACTS,
    "reconcile status": LOOKS,
    "reconcile nodes": PROBES,
    "reconcile hook": "Prints a file; reaches no host, changes nothing.",
    "maintenance start": ACTS + " --dry-run prints the waves it would run and changes nothing.",
    "maintenance resume": ACTS + " `aisite maintenance status` shows first what it would go on with.",
    "maintenance status": LOOKS,
    "maintenance pause": WRITES,
    "maintenance skip": WRITES,
    "oob discover": PROBES,
    "oob firmware": PROBES,
    "lab up": LAB,
    "lab image": LAB,
    "lab status": LOOKS,
    "lab down": LAB,
    "bench run": LAB,
    "bench report": LOOKS,
    "serve up": LAB,
    "serve train": LAB,
    "serve load": LAB,
    "serve down": LAB,
}


def state_effects(app: typer.Typer, prefix: str = "") -> None:
    """Lead every command's help with its entry in EFFECTS; a command without one is a KeyError naming it."""
    for info in app.registered_commands:
        callback = info.callback
        assert callback is not None
        name = prefix + (info.name or callback.__name__.replace("_", "-"))
        info.help = f"{EFFECTS[name]}\n\n{info.help or inspect.getdoc(callback) or ''}"
    for group in app.registered_groups:
        assert group.typer_instance is not None and group.name
        state_effects(group.typer_instance, f"{prefix}{group.name} ")
