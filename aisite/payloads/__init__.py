"""Benchmark payloads: the project's own code that runs inside the job containers (NGC images on a site, the lab's
nodes) and prints one result line each (result.py). Plain scripts too: a job mounts this folder and runs
`python3 resnet.py` or `python3 tools.py KIND -- COMMAND`; only resnet.py needs more than the standard library
(PyTorch)."""

from __future__ import annotations


def command_args(workload: str, kind: str, batch_size: int, nodes: int) -> list[str]:
    """This payload's arguments for a workload of `kind` (resnet50-train, ...): one definition for the jobs and the
    lab runs."""
    model, mode = kind.split("-")
    return [
        "--workload",
        workload,
        "--model",
        model,
        "--mode",
        mode,
        "--batch-size",
        str(batch_size),
        "--nodes",
        str(nodes),
    ]
