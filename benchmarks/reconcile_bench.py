"""Reconcile timings (`make bench-reconcile`): what a commit to the site repository costs until the lab has it.

On a copy of the lab stack named `deploybench` (10.254.0.0/15, so a running `lab` is left alone), freshly up and
deployed once, with a site repository made from this checkout (a bare one with the post-receive hook that
`aisite reconcile hook` prints, and a clone to commit in):

1. a reconcile with nothing to change (PASSES times): `aisite reconcile --once` on the commit already applied;
2. a full pass with nothing to change (once): every layer on every host, what the reconciler's periodic
   drift-reverting pass costs;
3. commit-to-converged of a one-host change (PASSES times): a label on gpu01 committed and pushed; the hook runs
   the pass, so the push returns when the lab has converged (timed from the commit to the push's return), and
   the pass must have run on gpu01 alone.

Prints a table, then one JSON document. `--passes N` sets the repetitions, `--keep` leaves the lab up.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from deploy_bench import ENV, ROOT, SITE, aisite, lab_stack, provision

sys.path.insert(0, str(ROOT))
from aisite.reconcile import state
from aisite.reconcile.hook import post_receive
from tests.conftest import commit_file, git, make_site_repo


def reconcile(repo: Path, *extra: str) -> dict[str, Any]:
    r = aisite("reconcile", SITE, "--repo", str(repo), "--once", "--json", *extra)
    if not r.stdout.strip().startswith("{"):
        sys.exit(f"reconcile exited {r.returncode}: {r.stderr[-2000:]}")
    return dict(json.loads(r.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=3, help="repetitions of each measurement")
    parser.add_argument("--keep", action="store_true", help="leave the lab up afterwards")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="aisite-reconcile-bench-"))
    stack = lab_stack(work)
    aisite("lab", "down", str(stack))
    rows: list[dict[str, Any]] = []
    try:
        start = time.perf_counter()
        if aisite("lab", "up", str(stack)).returncode != 0:
            sys.exit("lab up failed")
        provision(stack)
        clone = make_site_repo(work / "site", {stack.name: stack.read_text()})
        bare = work / "site.git"
        git(work, "clone", "--quiet", "--bare", str(clone), str(bare))
        hook = bare / "hooks" / "post-receive"
        hook.write_text(post_receive(SITE, "main"))
        hook.chmod(0o755)
        git(clone, "remote", "add", "origin", str(bare))
        state_dir = state.workdir(SITE)
        subprocess.run(["rm", "-rf", str(state_dir)], check=True)
        first = reconcile(bare)  # the cold pass: every layer on every host
        print(f"lab up + first pass: {time.perf_counter() - start:.1f} s ({first['outcome']})", file=sys.stderr)
        if first["outcome"] != "applied":
            sys.exit(f"first pass: {first}")
        for i in range(1, args.passes + 1):
            t = time.perf_counter()
            rec = reconcile(bare)
            rows.append(
                {"run": f"nothing to change {i}", "wall_seconds": round(time.perf_counter() - t, 1), "pass": rec}
            )
            print(f"  nothing to change {i}: {rows[-1]['wall_seconds']} s, {rec['outcome']}", file=sys.stderr)
        t = time.perf_counter()
        rec = reconcile(bare, "--full")
        rows.append(
            {"run": "full pass, nothing to change", "wall_seconds": round(time.perf_counter() - t, 1), "pass": rec}
        )
        print(f"  full pass: {rows[-1]['wall_seconds']} s, {rec['outcome']}, changed {rec['changed']}", file=sys.stderr)
        path = clone / "stacks" / stack.name
        for i in range(1, args.passes + 1):
            data = yaml.safe_load(path.read_text())
            data["config"]["aisite:site"]["gpu_nodes"][0]["nodes"][0]["labels"] = {"example.com/bench": str(i)}
            t = time.perf_counter()
            commit_file(clone, f"stacks/{stack.name}", yaml.safe_dump(data, sort_keys=False), f"bench {i}")
            push = subprocess.run(
                ["git", "push", "-q", "origin", "main"], cwd=clone, env=ENV, capture_output=True, text=True, check=False
            )
            seconds = round(time.perf_counter() - t, 1)
            rec = json.loads((state_dir / "status.json").read_text())["passes"][-1]
            rows.append({"run": f"one-host commit {i}", "wall_seconds": seconds, "pass": rec})
            print(f"  one-host commit {i}: {seconds} s, {rec['outcome']}, ran {rec['layers']}", file=sys.stderr)
            if push.returncode != 0:
                sys.exit(push.stderr)
    finally:
        if not args.keep:
            aisite("lab", "down", str(stack))
    print("| run | seconds (wall) | pass s | outcome | layers: hosts | changed |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        p = r["pass"]
        ran = "; ".join(f"{k}: {','.join(v)}" for k, v in p["layers"].items()) or "-"
        changed = ", ".join(f"{h}={n}" for h, n in p["changed"].items()) or "0"
        print(f"| {r['run']} | {r['wall_seconds']} | {p['seconds']} | {p['outcome']} | {ran} | {changed} |")
    idle = [r["pass"] | {"wall": r["wall_seconds"]} for r in rows if r["run"].startswith("nothing")]
    change = [r["pass"] | {"wall": r["wall_seconds"]} for r in rows if r["run"].startswith("one-host")]
    full = next(r for r in rows if r["run"].startswith("full"))
    verdict = {
        "full_pass_seconds": full["wall_seconds"],
        "full_pass_changed_nothing": full["pass"]["outcome"] == "applied" and not full["pass"]["changed"],
        "nothing_to_change_max_seconds": max(r["wall"] for r in idle),
        "nothing_to_change_all_unchanged": all(r["outcome"] == "unchanged" and not r["layers"] for r in idle),
        "one_host_commit_max_seconds": max(r["wall"] for r in change),
        "one_host_commits_applied_to_gpu01_only": all(
            r["outcome"] == "applied" and {h for hs in r["layers"].values() for h in hs} == {"gpu01"} for r in change
        ),
    }
    print(json.dumps({"site": SITE, "runs": rows, "verdict": verdict}, indent=2))


if __name__ == "__main__":
    main()
