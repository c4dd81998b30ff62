"""Scale timings (`make bench-scale`): what a pass of the host layers (hosts, cluster) costs the controller as the
site grows, pushed from the controller and pulled by the nodes themselves.

Labs of 4, 8, 16 and 32 GPU nodes (plus one control-plane and one storage node; container nodes from generated
copies of the lab stack, site `scalebench` on 10.254.0.0/15, so a running `lab` is left alone), grown one size into
the next. At each size, after the new nodes are converged:

- push: a no-change pass (`deploy --layer hosts`, then `--layer cluster`: what a full reconcile pass of those layers
  runs) and a one-node change (a label on gpu01, `deploy --layer cluster --limit gpu01`: what `--changed` picks
  for it, as the scope tests hold);
- pull: the same stack with `gitops.pull_layers: [hosts, cluster]`, committed and signed into a repository the lab's
  git mirror serves; a no-change pass (every node's aisite-pull.service at once: the worst case, the timer spreads
  them over a tenth of the interval) and a one-node change (the next label, committed and signed, then every node's
  pass again).

Each row: wall seconds; the controller's CPU seconds (push: `aisite deploy` and everything it started, Ansible and
ssh; pull: the git mirror's daemon and the fetches it served); the nodes' CPU seconds (pull: each pass's own record,
mean and max; push: not measured, the nodes' sshd and modules run in the containers). Then a least-squares slope per
node of the controller's CPU, and the extrapolation to 519 and 4,096 nodes. Prints a table, then one JSON document.
`--sizes 4,8` to measure fewer, `--keep` leaves the lab up.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aisite.lab import mirror  # noqa: E402
from aisite.lab.lab import INOTIFY_LIMIT, inotify_needed  # noqa: E402
from aisite.lab.topology import lab_topology  # noqa: E402
from aisite.loader import load_site  # noqa: E402
from aisite.paths import mirror_dir  # noqa: E402
from aisite.plan import Plan, build_plan  # noqa: E402
from aisite.render import commit as render_commit  # noqa: E402
from aisite.repo import copy_checkout  # noqa: E402

CONF = ROOT / "aisite" / "lab" / "containers.conf"
SITE = "scalebench"
ENV = os.environ | {"AISITE_LAB_BMC_PASSWORD": "bench-only-pw"}  # the BMC emulators' credentials, lab only
PULLED = ["hosts", "cluster"]
TARGETS = (519, 4096)


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def aisite(*args: str) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run the CLI; its wall seconds and the CPU seconds of it and all it started."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "aisite", *args], cwd=ROOT, env=ENV, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def stack_text(gpus: int, label: str | None, pull_url: str | None, signer: str) -> str:
    data: dict[str, Any] = yaml.safe_load((ROOT / "stacks" / "Pulumi.lab.yaml").read_text())
    site = data["config"]["aisite:site"]
    site["name"] = SITE
    gpu = site["gpu_nodes"][0]
    gpu["count"] = gpus
    # gpu01 carries the label of the one-node change; the others, the lab's own BMC protocol.
    gpu["nodes"] = [{"labels": {"example.com/pool": label}}] if label else []
    site["fabric"]["scalable_unit"] = max(4, gpus)  # one scalable unit: two leaves of enough ports
    site["switches"]["leaves"]["ports"] = 64
    site["gitops"]["allowed_signers"] = [signer]
    if pull_url:
        site["gitops"] |= {"pull_layers": PULLED, "pull_repository": pull_url, "pull_interval_seconds": 3600}
    text = yaml.safe_dump(data, sort_keys=False)
    return text.replace("10.250.", "10.254.").replace("10.251.", "10.255.")


def write_stack(directory: Path, text: str) -> Path:
    path = directory / f"Pulumi.{SITE}.yaml"
    path.write_text(text)
    return path


def git(repo: Path, *args: str) -> str:
    env = os.environ | {"GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@aisite-lab"}
    env |= {"GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "bench@aisite-lab"}
    r = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=False)
    if r.returncode:
        sys.exit(f"git {' '.join(args)}: {r.stderr}")
    return r.stdout.strip()


def commit(repo: Path, text: str, key: Path, message: str) -> str:
    """The stack and its rendered manifests/<site>/ (the nodes' inventory), committed and signed."""
    stack = write_stack(repo / "stacks", text)
    render_commit.write(repo, render_commit.rendered(build_plan(load_site(stack))))  # as `make manifests`
    git(repo, "add", "-A")
    git(repo, "-c", "gpg.format=ssh", "-c", f"user.signingkey={key}", "commit", "-q", "-S", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def site_repo(directory: Path) -> Path:
    """This project's files as a site repository (branch main)."""
    repo = directory / "repo"
    copy_checkout(ROOT, repo)
    git(repo, "init", "-q", "-b", "main")
    return repo


def deploy(stack: Path, what: str, *args: str) -> dict[str, Any]:
    r, wall, cpu = aisite("deploy", str(stack), "--json", *args)
    if not r.stdout.strip().startswith("{"):
        sys.exit(f"{what}: deploy exited {r.returncode}: {r.stderr[-2000:]}")
    doc = json.loads(r.stdout)
    failed = {h: x["failed"] + x["unreachable"] for h, x in doc["recap"].items() if x["failed"] or x["unreachable"]}
    if failed or doc["status"] != "successful":
        sys.exit(f"{what}: failed on {failed}: {doc['failures'][:5]}")
    changed = {h: x["changed"] for h, x in doc["recap"].items() if x["changed"]}
    say(f"    {what}: {wall:.1f} s wall, {cpu:.1f} CPU-s, changed: {changed or 'none'}")
    return {"wall": wall, "cpu": cpu, "changed": changed}


def daemon_cpu(site: str) -> float:
    """CPU seconds of the mirror's git-daemon and of the children it reaped (one upload-pack per fetch)."""
    pid = (mirror_dir(site) / "pid").read_text().strip()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime + cutime + cstime) / os.sysconf("SC_CLK_TCK")


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"CONTAINERS_CONF": str(CONF)}
    return subprocess.run(["podman", *args], env=env, capture_output=True, text=True, check=check)


def pull_pass(plan: Plan, tip: str, what: str) -> dict[str, Any]:
    """Every node's pass at once; wall until the last ends, the mirror's CPU, each node's record."""
    before = daemon_cpu(plan.site)
    start = time.perf_counter()
    threads = [
        threading.Thread(
            target=podman,
            args=("exec", f"aisite-{SITE}-{n.name}", "systemctl", "start", "aisite-pull.service"),
            kwargs={"check": False},
        )
        for n in plan.nodes
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    time.sleep(0.5)  # the daemon reaps its last upload-pack
    cpu = daemon_cpu(plan.site) - before
    recs = {
        n.name: json.loads(podman("exec", f"aisite-{SITE}-{n.name}", "cat", "/var/lib/aisite-pull/state.json").stdout)
        for n in plan.nodes
    }
    bad = {n: r["message"] for n, r in recs.items() if r["status"] != "applied" or r["applied_commit"] != tip}
    if bad:
        sys.exit(f"{what}: passes not applied at {tip[:12]}: {bad}")
    node_cpu = [float(r["cpu_seconds"]) for r in recs.values()]
    changed = {n: r["changed"] for n, r in recs.items() if r["changed"]}
    row = {
        "wall": wall,
        "cpu": cpu,
        "changed": changed,
        "node_cpu_mean": sum(node_cpu) / len(node_cpu),
        "node_cpu_max": max(node_cpu),
        "node_seconds_mean": sum(float(r["seconds"]) for r in recs.values()) / len(recs),
    }
    say(
        f"    {what}: {wall:.1f} s wall, mirror {cpu:.2f} CPU-s, nodes {row['node_cpu_mean']:.1f} CPU-s each"
        f" (max {row['node_cpu_max']:.1f}), changed: {changed or 'none'}"
    )
    return row


def nodes_status(stack: Path, tip: str) -> dict[str, Any]:
    r, wall, cpu = aisite("reconcile", "nodes", str(stack), "--tip", tip, "--json")
    states = {row["state"] for row in json.loads(r.stdout)["nodes"]}
    if r.returncode or states != {"converged"}:
        sys.exit(f"reconcile nodes: {states}: {r.stderr[-1000:]}")
    say(f"    reconcile nodes: {wall:.1f} s wall, {cpu:.1f} CPU-s, all converged")
    return {"wall": wall, "cpu": cpu}


@dataclass
class Bench:
    work: Path  # the stacks written per size
    repo: Path  # the site repository the mirror serves
    key: Path  # signs its commits
    signer: str  # its allowed-signers line
    labels: list[str]  # gpu01's next labels, one per one-node change


def measure(size: int, b: Bench) -> dict[str, Any]:
    say(f"{size} GPU nodes")
    push0 = write_stack(b.work / "push0", stack_text(size, None, None, b.signer))
    plan = build_plan(load_site(push0))
    url = mirror.url(plan)
    r, wall, _ = aisite("lab", "up", str(write_stack(b.work / "pull0", stack_text(size, None, url, b.signer))))
    if r.returncode:
        sys.exit(f"lab up: {r.stderr[-2000:]}")
    say(f"  lab up: {wall:.1f} s ({len(plan.nodes)} nodes)")
    # The new nodes converged (the others found so): the host layers pushed, the pull layer installed.
    pull0 = b.work / "pull0" / f"Pulumi.{SITE}.yaml"
    for layer in ("hosts", "cluster"):
        deploy(push0, f"converge ({layer})", "--layer", layer)
    deploy(pull0, "install the pull layer", "--layer", "pull")
    row: dict[str, Any] = {"gpu_nodes": size, "nodes": len(plan.nodes)}
    say("  push")
    hosts = deploy(push0, "no-change pass: hosts", "--layer", "hosts")
    cluster = deploy(push0, "no-change pass: cluster", "--layer", "cluster")
    row["notes"] = []
    if hosts["changed"] or cluster["changed"]:
        row["notes"].append(f"push no-change pass changed {hosts['changed']} {cluster['changed']}")
    row["push_no_change"] = {k: hosts[k] + cluster[k] for k in ("wall", "cpu")}
    label = b.labels.pop(0)
    push1 = write_stack(b.work / "push1", stack_text(size, label, None, b.signer))
    one = deploy(push1, "one-node change: cluster --limit gpu01", "--layer", "cluster", "--limit", "gpu01")
    if set(one["changed"]) != {"gpu01"}:
        row["notes"].append(f"push one-node change changed {one['changed']}")
    row["push_one_node"] = {"wall": one["wall"], "cpu": one["cpu"]}
    say("  pull")
    with mirror.serving(plan, b.repo):
        tip = commit(b.repo, stack_text(size, label, url, b.signer), b.key, f"{size} GPU nodes, gpu01 in {label}")
        row["pull_no_change"] = pull_pass(plan, tip, "no-change pass")
        if row["pull_no_change"]["changed"]:
            row["notes"].append(f"pull no-change pass changed {row['pull_no_change']['changed']}")
        label = b.labels.pop(0)
        tip = commit(b.repo, stack_text(size, label, url, b.signer), b.key, f"gpu01 in {label}")
        row["pull_one_node"] = pull_pass(plan, tip, "one-node change")
        if set(row["pull_one_node"]["changed"]) != {"gpu01"}:
            row["notes"].append(f"pull one-node change changed {row['pull_one_node']['changed']}")
        row["reconcile_nodes"] = nodes_status(b.work / "pull0" / f"Pulumi.{SITE}.yaml", tip)
    return row


def slope(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """Least-squares line through (x, y): (per x, at 0)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    return b, my - b * mx


def report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    head = (
        "| GPU nodes | nodes | push no-change s / ctl CPU-s | push one-node s / ctl CPU-s "
        "| pull no-change s / mirror CPU-s / node CPU-s | pull one-node s / mirror CPU-s / node CPU-s "
        "| reconcile nodes s / CPU-s |"
    )
    lines = [head, "|" + "---|" * 7]
    for r in rows:
        p0, p1, q0, q1, rn = (
            r[k] for k in ("push_no_change", "push_one_node", "pull_no_change", "pull_one_node", "reconcile_nodes")
        )
        lines.append(
            f"| {r['gpu_nodes']} | {r['nodes']} | {p0['wall']:.1f} / {p0['cpu']:.1f}"
            f" | {p1['wall']:.1f} / {p1['cpu']:.1f}"
            f" | {q0['wall']:.1f} / {q0['cpu']:.2f} / {q0['node_cpu_mean']:.1f} (max {q0['node_cpu_max']:.1f})"
            f" | {q1['wall']:.1f} / {q1['cpu']:.2f} / {q1['node_cpu_mean']:.1f} (max {q1['node_cpu_max']:.1f})"
            f" | {rn['wall']:.1f} / {rn['cpu']:.1f} |"
        )
    print("\n".join(lines))
    xs = [r["nodes"] for r in rows]
    fits: dict[str, Any] = {}
    for key, label in (
        ("push_no_change", "push, no-change pass: controller CPU-s"),
        ("push_one_node", "push, one-node change: controller CPU-s"),
        ("pull_no_change", "pull, no-change pass: controller (mirror) CPU-s"),
        ("pull_one_node", "pull, one-node change: controller (mirror) CPU-s"),
        ("reconcile_nodes", "reconcile nodes (status over SSH): controller CPU-s"),
    ):
        per, at0 = slope(xs, [r[key]["cpu"] for r in rows]) if len(rows) > 1 else (0.0, rows[0][key]["cpu"])
        fits[key] = {"per_node": per, "at_zero": at0, **{str(n): at0 + per * n for n in TARGETS}}
        print(
            f"{label}: {per:.3f} per node + {at0:.1f}; at "
            + ", ".join(f"{n} nodes {at0 + per * n:.0f} CPU-s" for n in TARGETS)
        )
    node = [r["pull_no_change"]["node_cpu_mean"] for r in rows]
    print(f"pull, each node's own no-change pass: {min(node):.1f}..{max(node):.1f} CPU-s (the node's own)")
    for r in rows:
        for note in r["notes"]:
            print(f"note ({r['gpu_nodes']} GPU nodes): {note}")
    return fits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4,8,16,32", help="GPU node counts, ascending (default 4,8,16,32)")
    parser.add_argument("--keep", action="store_true", help="leave the lab up afterwards")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="scalebench-"))
    for sub in ("push0", "push1", "pull0", "stacks"):
        (work / sub).mkdir()
    key = work / "signer"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bench@aisite-lab", "-f", str(key)], check=True
    )
    signer = f"bench@aisite-lab {(work / 'signer.pub').read_text().strip()}"
    repo = site_repo(work)
    labels = [f"l{i}" for i in range(2 * len(sizes))]
    first = write_stack(work / "stacks", stack_text(sizes[0], None, None, signer))
    aisite("lab", "down", str(first))
    # The largest lab's systemd containers need more inotify instances than Debian's default 128 (`lab up` says so
    # and stops): raised for the bench, put back after.
    largest_stack = write_stack(work / "push1", stack_text(sizes[-1], None, None, signer))
    largest = lab_topology(build_plan(load_site(largest_stack)))
    limit = int(INOTIFY_LIMIT.read_text())
    if limit < inotify_needed(largest):
        INOTIFY_LIMIT.write_text(f"{inotify_needed(largest)}\n")
        say(f"fs.inotify.max_user_instances {limit} -> {inotify_needed(largest)} for the bench")
    rows: list[dict[str, Any]] = []
    try:
        for size in sizes:
            rows.append(measure(size, Bench(work, repo, key, signer, labels)))
    finally:
        if not args.keep:
            aisite("lab", "down", str(first))
            INOTIFY_LIMIT.write_text(f"{limit}\n")
    fits = report(rows)
    print(json.dumps({"site": SITE, "rows": rows, "fits": fits}, indent=2))


if __name__ == "__main__":
    main()
