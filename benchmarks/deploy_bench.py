"""Deploy timings (`make bench-deploy`): where a whole-site deploy of the lab spends its time.

On a copy of the lab stack named `deploybench` (10.254.0.0/15, so a running `lab` is left alone), freshly up and
its VM node provisioned (since session 16 the lab has one: its deploy is part of every run below):

1. a cold deploy (the first after `lab up`);
2. PASSES no-change deploys (default 5), each of which must report changed=0 on every host;
3. a one-host change: one setting on one GPU node changed by hand (gpu01's /etc/nccl.conf), converged by
   `deploy --limit gpu01`, which must change that host alone and put the file back.

Each run is timed as a whole and per layer (the plays of site.yml, grouped by their `Layer |` prefix), with its 15
slowest tasks summed over the hosts (from ansible-runner's per-host task durations) and the 15 a pass waited
longest for (wall seconds from a task's start to the next's). Prints a table, then one JSON document.
`--passes N` sets the no-change passes, `--keep` leaves the lab up afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "aisite" / "lab" / "containers.conf"
SITE = "deploybench"
ENV = os.environ | {"AISITE_LAB_BMC_PASSWORD": "bench-only-pw"}  # the BMC emulators' credentials, lab only
LAYERS = {"Out-of-band": "oob", "Fabric": "fabric", "Hosts": "hosts", "Cluster": "cluster", "Workloads": "workloads"}


def aisite(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aisite", *args], cwd=ROOT, env=ENV, capture_output=True, text=True, check=False
    )


def lab_stack(directory: Path, site: str = SITE, ranges: tuple[str, str] = ("10.254.", "10.255.")) -> Path:
    """The lab stack as a bench's own site (default `deploybench`) on ranges of its own (default 10.254.0.0/15),
    written into `directory`."""
    text = (ROOT / "stacks" / "Pulumi.lab.yaml").read_text()
    text = text.replace("10.250.", ranges[0]).replace("10.251.", ranges[1]).replace("name: lab\n", f"name: {site}\n")
    stack = directory / f"Pulumi.{site}.yaml"
    stack.write_text(text)
    return stack


def fresh_lab(stack: Path, site: str = SITE) -> None:
    """The bench's lab brought up from nothing (what an earlier run left is removed first)."""
    aisite("lab", "down", str(stack))
    start = time.perf_counter()
    up = aisite("lab", "up", str(stack))
    if up.returncode != 0:
        sys.exit(f"lab up failed: {up.stderr[-2000:]}")
    print(f"lab {site} up in {time.perf_counter() - start:.1f} s", file=sys.stderr)


def provision(stack: Path) -> None:
    """The lab's VM node installed over the network before anything reaches it, as `make lab` does."""
    start = time.perf_counter()
    r = aisite("provision", str(stack))
    if r.returncode != 0:
        sys.exit(f"provision failed: {(r.stdout + r.stderr)[-2000:]}")
    print(f"lab {SITE} provisioned in {time.perf_counter() - start:.1f} s", file=sys.stderr)


def podman_exec(container: str, script: str) -> str:
    env = os.environ | {"CONTAINERS_CONF": str(CONF)}
    cmd = ["podman", "exec", container, "sh", "-c", script]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout


def deploy(stack: Path, what: str, *args: str) -> dict[str, Any]:
    start = time.perf_counter()
    r = aisite("deploy", str(stack), "--json", *args)
    seconds = time.perf_counter() - start
    if not r.stdout.strip().startswith("{"):
        sys.exit(f"{what}: deploy exited {r.returncode}: {r.stderr[-2000:]}")
    doc = json.loads(r.stdout)
    layers: dict[str, float] = {}
    for play, sec in doc.get("plays", {}).items():
        layer = LAYERS.get(play.split(" | ")[0], play)
        layers[layer] = round(layers.get(layer, 0.0) + sec, 1)
    changed = {h: x["changed"] for h, x in doc["recap"].items() if x["changed"]}
    failed = {h: x["failed"] + x["unreachable"] for h, x in doc["recap"].items() if x["failed"] or x["unreachable"]}
    row = {
        "run": what,
        "seconds": round(seconds, 1),
        "status": doc["status"],
        "layers": layers,
        "hosts": len(doc["recap"]),
        "changed": changed,
        "changes": doc.get("changes", []),  # host: task, for each change
        "failed": failed,
        "failures": doc["failures"],
        "slowest_tasks": doc.get("slowest_tasks", []),
        "longest_tasks": doc.get("longest_tasks", []),
    }
    changes = ", ".join(f"{h}={n}" for h, n in changed.items()) or "none"
    print(f"  {what}: {row['seconds']} s, {doc['status']}, changed: {changes}", file=sys.stderr, flush=True)
    if what.startswith("no-change") and row["changes"]:
        print("    changes on a converged lab: " + "; ".join(row["changes"]), file=sys.stderr, flush=True)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    cols = list(LAYERS.values())
    head = f"| run | total s | {' | '.join(cols)} | hosts | changed hosts |"
    lines = [head, "|" + "---|" * (len(cols) + 4)]
    for r in rows:
        per = " | ".join(str(r["layers"].get(c, "-")) for c in cols)
        changed = ", ".join(f"{h}={n}" for h, n in r["changed"].items()) or "0"
        lines.append(f"| {r['run']} | {r['seconds']} | {per} | {r['hosts']} | {changed} |")
    return "\n".join(lines)


def slowest(row: dict[str, Any]) -> str:
    out = [f"15 slowest tasks of the {row['run']} (seconds summed over hosts):"]
    out += [f"  {t['seconds']:7.1f}  {t['task']}" for t in row["slowest_tasks"]]
    out += [f"15 tasks the {row['run']} waited longest for (wall seconds):"]
    out += [f"  {t['seconds']:7.1f}  {t['task']}" for t in row["longest_tasks"]]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=5, help="no-change deploys after the cold one")
    parser.add_argument("--keep", action="store_true", help="leave the lab up afterwards")
    args = parser.parse_args()
    stack = lab_stack(Path(tempfile.mkdtemp()))
    fresh_lab(stack)
    rows: list[dict[str, Any]] = []
    try:
        provision(stack)
        rows.append(deploy(stack, "cold deploy"))
        for i in range(1, args.passes + 1):
            rows.append(deploy(stack, f"no-change pass {i}"))
        container = f"aisite-{SITE}-gpu01"
        before = podman_exec(container, "cat /etc/nccl.conf")
        podman_exec(container, "sed -i 's/^NCCL_IB_TC=.*/NCCL_IB_TC=0/' /etc/nccl.conf")
        rows.append(deploy(stack, "one-host change (--limit gpu01)", "--limit", "gpu01"))
        restored = podman_exec(container, "cat /etc/nccl.conf") == before
    finally:
        if not args.keep:
            aisite("lab", "down", str(stack))
    print(table(rows))
    for row in (rows[0], rows[1] if len(rows) > 2 else rows[0], rows[-1]):
        print(slowest(row))
    passes = rows[1:-1]
    verdict = {
        "no_change_max_seconds": max((r["seconds"] for r in passes), default=None),
        "no_change_all_zero": all(not r["changed"] for r in passes),
        "one_host_seconds": rows[-1]["seconds"],
        "one_host_changed_only_gpu01": set(rows[-1]["changed"]) == {"gpu01"},
        "one_host_restored": restored,
        "failed": any(r["failed"] or r["status"] != "successful" for r in rows),
    }
    print(json.dumps({"site": SITE, "runs": rows, "verdict": verdict}, indent=2))


if __name__ == "__main__":
    main()
