"""Provisioning timings (`make bench-provision`): power-on to SSH for the lab's VM node, per step.

On a copy of the lab stack named `provbench` (10.242.0.0/15, so a running `lab` is left alone), freshly up:

1. the first `aisite provision` (the image built if it is not cached, the boot server configured, the VM installed);
2. RUNS reinstalls (`--reinstall`, default 2), under TCG (software emulation);
3. with `--kvm`, where /dev/kvm exists: the VM recreated on KVM (AISITE_LAB_VM_ACCEL=kvm) and installed once, in
   a time limit of its own (a KVM guest hung at kernel start on the machines this was built on: said, not hidden).

Per install, from the provision record: dhcp (power on to the node's iPXE script: firmware and DHCP), boot-files
(to the installer running: kernel and initramfs fetched, kernel booted, network up), install (partition, image,
bootloader, report), first-boot (to SSH with the recorded host key), and their sum. Prints a table, then JSON.
`--keep` leaves the lab up afterwards.
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

from deploy_bench import ENV, ROOT, fresh_lab, lab_stack

SITE = "provbench"
STEPS = ("dhcp", "boot-files", "install", "first-boot")


def aisite(
    *args: str, env: dict[str, str] | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, "-m", "aisite", *args],
            cwd=ROOT,
            env=env or ENV,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(exc.cmd, 124, "", f"timed out after {timeout:.0f} s")


def provision(stack: Path, what: str, accel: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    start = time.perf_counter()
    r = aisite("provision", str(stack), "--json", *args, env=env, timeout=1800)
    seconds = round(time.perf_counter() - start, 1)
    row: dict[str, Any] = {"run": what, "accel": accel, "seconds": seconds}
    if not r.stdout.strip().startswith("{"):
        row |= {"status": "error", "error": (r.stderr or "no output")[-500:]}
    else:
        doc = json.loads(r.stdout)
        (node,) = doc["nodes"]
        row |= {"status": node["status"], "node": node["node"], "steps": node["steps"], "error": node["error"]}
        row["power_on_to_ssh"] = round(sum(node["steps"].get(s, 0.0) for s in STEPS), 1) if node["steps"] else None
    print(f"  {what} ({accel}): {row['status']} in {seconds} s {row.get('steps', '')}", file=sys.stderr, flush=True)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| run | accel | result | " + " | ".join(STEPS) + " | power on to SSH s | command s |",
        "|" + "---|" * (len(STEPS) + 5),
    ]
    for r in rows:
        steps = r.get("steps") or {}
        per = " | ".join(str(steps.get(s, "-")) for s in STEPS)
        total = r.get("power_on_to_ssh") or "-"
        lines.append(f"| {r['run']} | {r['accel']} | {r['status']} | {per} | {total} | {r['seconds']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="reinstalls under TCG after the first install")
    parser.add_argument("--kvm", action="store_true", help="also install once on KVM, where /dev/kvm exists")
    parser.add_argument("--keep", action="store_true", help="leave the lab up afterwards")
    args = parser.parse_args()
    stack = lab_stack(Path(tempfile.mkdtemp()), SITE, ("10.242.", "10.243."))
    fresh_lab(stack, SITE)
    rows: list[dict[str, Any]] = []
    try:
        rows.append(provision(stack, "first install (image, boot server, VM)", "tcg"))
        for i in range(1, args.runs + 1):
            rows.append(provision(stack, f"reinstall {i}", "tcg", "--reinstall"))
        if args.kvm:
            if not Path("/dev/kvm").exists():
                rows.append({"run": "install on KVM", "accel": "kvm", "seconds": 0, "status": "no /dev/kvm here"})
            else:
                kvm = ENV | {"AISITE_LAB_VM_ACCEL": "kvm"}
                aisite("lab", "up", str(stack), env=kvm)  # the VM's container again, with /dev/kvm
                rows.append(provision(stack, "install on KVM", "kvm", "--reinstall", env=kvm))
    finally:
        if not args.keep:
            aisite("lab", "down", str(stack))
    print(table(rows))
    print(json.dumps({"site": SITE, "runs": rows}, indent=2))


if __name__ == "__main__":
    main()
