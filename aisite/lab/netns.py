"""Commands inside a lab host's network namespace (`nsenter -n`, with this machine's tools): what the benchmarks,
acceptance's lab runner and the lab's faults share, iperf3 between two hosts' addresses among them."""

from __future__ import annotations

import json
import subprocess
import time

from aisite.lab.podman import LabError, podman, run
from aisite.plan import Plan
from aisite.render.inventory import container_name


class NetnsError(LabError):
    """A lab host that is not running, or a measurement inside one that gave no result."""


def pid(plan: Plan, host: str) -> int:
    name = container_name(plan, host)
    out = podman("inspect", "--format", "{{.State.Status}} {{.State.Pid}}", name, check=False).split()
    if len(out) != 2 or out[0] != "running" or out[1] == "0":
        raise NetnsError(f"{host}: container {name} is not running: start the lab first (aisite lab up {plan.site})")
    return int(out[1])


def in_netns(plan: Plan, host: str, *cmd: str, check: bool = True) -> str:
    """`cmd` run (with this machine's tools) inside a lab host's network namespace; its stdout."""
    return run(["nsenter", "-t", str(pid(plan, host)), "-n", *cmd], check=check, what=f"{host}: {' '.join(cmd[:4])}")


def iperf3(
    plan: Plan,
    client: str,
    src: str,
    server: str,
    dst: str,
    *,
    seconds: int,
    port: int = 5201,
    parallel: int = 1,
    reverse: bool = False,
) -> str:
    """iperf3 from `src` in client's namespace to `dst` in server's (reverse: the server sends), a one-off server
    on `port`; the client's JSON report, checked to hold a result. The client retries while the server is not yet
    listening."""
    srv = subprocess.Popen(
        ["nsenter", "-t", str(pid(plan, server)), "-n", "iperf3", "-s", "-1", "-B", dst, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        text = ""
        cmd = ["iperf3", "-J", "-c", dst, "-B", src, "-p", str(port), "-t", str(seconds), "-P", str(parallel)]
        for _ in range(40):
            time.sleep(0.1)
            r = subprocess.run(
                ["nsenter", "-t", str(pid(plan, client)), "-n", *cmd, *(["-R"] if reverse else [])],
                capture_output=True,
                text=True,
                check=False,
            )
            text = r.stdout
            if r.returncode == 0 or ("Connection refused" not in text and "unable to connect" not in text):
                break
        try:
            doc = json.loads(text or "{}")
        except ValueError:
            raise NetnsError(f"iperf3 {src} -> {dst}: {text.strip()[-200:] or 'no output'}") from None
        if not isinstance(doc, dict) or "error" in doc or "end" not in doc:
            why = doc.get("error", "no result") if isinstance(doc, dict) else "no result"
            raise NetnsError(f"iperf3 {src} -> {dst}: {why}")
        return text
    finally:
        if srv.poll() is None:
            srv.kill()
        srv.wait()
