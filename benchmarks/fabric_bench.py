"""Fabric throughput in the lab (`make bench-fabric`): iperf3 between two GPU nodes on the same rail (through
one leaf's bridge) and across rails (leaf, spine, leaf), as JSON.

Runs a copy of the lab stack named `fabbench` on 10.254.0.0/15 (a running `lab` is left alone): up, fabric
deployed, the measurements, down. Veth pairs in one kernel measure the emulation (CPU-bound memory copies), not
a 100G RoCE fabric: the figures say whether the path works at jumbo MTU and how the lab compares run to run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aisite.loader import load_site  # noqa: E402
from aisite.plan import build_plan  # noqa: E402

CONF = ROOT / "aisite" / "lab" / "containers.conf"
SECONDS = int(os.environ.get("AISITE_BENCH_SECONDS", "5"))
STREAMS = int(os.environ.get("AISITE_BENCH_STREAMS", "4"))


def aisite(*args: str) -> None:
    env = os.environ | {"AISITE_LAB_BMC_PASSWORD": "bench-only-password"}  # the BMC emulators' credentials
    cmd = [sys.executable, "-m", "aisite", *args]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, check=False)
    if r.returncode:
        sys.exit(f"aisite {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}")


def podman(*args: str) -> str:
    env = os.environ | {"CONTAINERS_CONF": str(CONF)}
    return subprocess.run(["podman", *args], env=env, capture_output=True, text=True, check=True).stdout


def reachable(container: str, src: str, dst: str) -> bool:
    env = os.environ | {"CONTAINERS_CONF": str(CONF)}
    cmd = ["podman", "exec", container, "ping", "-c1", "-W1", "-I", src, dst]
    return subprocess.run(cmd, env=env, capture_output=True, check=False).returncode == 0


def tx_packets(container: str, ports: list[str]) -> dict[str, int]:
    out = podman("exec", container, "cat", *(f"/sys/class/net/{p}/statistics/tx_packets" for p in ports))
    return dict(zip(ports, map(int, out.split()), strict=True))


def iperf(client: str, src: str, dst: str) -> dict[str, Any]:
    out = podman("exec", client, "iperf3", "-J", "-c", dst, "-B", src, "-t", str(SECONDS), "-P", str(STREAMS))
    end = json.loads(out)["end"]
    return {
        "gbit_per_s": round(end["sum_received"]["bits_per_second"] / 1e9, 2),
        "retransmits": end["sum_sent"].get("retransmits", 0),
    }


def main() -> None:
    text = (ROOT / "stacks" / "Pulumi.lab.yaml").read_text()
    text = text.replace("10.250.", "10.254.").replace("10.251.", "10.255.").replace("name: lab\n", "name: fabbench\n")
    stack = Path(tempfile.mkdtemp()) / "Pulumi.fabbench.yaml"
    stack.write_text(text)
    plan = build_plan(load_site(stack))
    a, b = plan.by_role("gpu")[:2]
    ca, cb = f"aisite-fabbench-{a.name}", f"aisite-fabbench-{b.name}"
    aisite("lab", "down", str(stack))
    aisite("lab", "up", str(stack))
    try:
        aisite("deploy", str(stack), "--layer", "fabric")
        # Source routing per rail (one table and `ip rule from` per rail, as DESIGN.md has it), without which
        # gpu01 would reach gpu02's rail 1 through its own rail 1: the host role's job (another issue).
        for node, c in ((a, ca), (b, cb)):
            for r in node.rails:
                podman("exec", c, "ip", "route", "replace", r.subnet, "dev", r.interface, "table", str(r.table))
                podman("exec", c, "ip", "route", "replace", "default", "via", r.gateway, "table", str(r.table))
                podman("exec", c, "ip", "rule", "add", "from", r.address, "table", str(r.table))
        podman("exec", "-d", cb, "iperf3", "-s")
        deadline = time.monotonic() + 60
        while not reachable(ca, a.rails[0].address, b.rails[1].address):
            if time.monotonic() > deadline:
                sys.exit("the fabric did not converge within 60 s")
            time.sleep(1)
        paths = {
            "same_rail": (a.rails[0].address, b.rails[0].address, f"{a.rails[0].leaf}"),
            "across_rails": (a.rails[0].address, b.rails[1].address, f"{a.rails[0].leaf} > spine > {b.rails[1].leaf}"),
        }
        leaf = next(s for s in plan.switches if s.name == a.rails[0].leaf)
        uplinks = [nb.interface for nb in leaf.neighbors]
        results = {}
        for name, (src, dst, via) in paths.items():
            before = tx_packets(f"aisite-fabbench-{leaf.name}", uplinks)
            row = {"from": f"{a.name} {src}", "to": f"{b.name} {dst}", "via": via} | iperf(ca, src, dst)
            after = tx_packets(f"aisite-fabbench-{leaf.name}", uplinks)
            # Packets the first leaf sent up to the spines during the run: where the traffic really went.
            row["uplink_tx_packets"] = {p: after[p] - before[p] for p in uplinks}
            results[name] = row
        print(
            json.dumps(
                {
                    "benchmark": "iperf3 TCP in the lab (veth pairs, FRR switches)",
                    "seconds": SECONDS,
                    "streams": STREAMS,
                    "host_mtu": plan.roce.host_mtu,
                    "paths": results,
                },
                indent=2,
            )
        )
    finally:
        aisite("lab", "down", str(stack))


if __name__ == "__main__":
    main()
