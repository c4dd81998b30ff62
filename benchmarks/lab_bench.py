"""Lab timings (`make bench-lab`): `lab up` cold (no image cache; with --cold), warm, a second up, and down.

Runs a copy of the lab stack named `labbench` on 10.254.0.0/15, so a running `lab` is left alone. --cold removes
the cached aisite images first (the next up rebuilds them with debootstrap, about a minute).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "aisite" / "lab" / "containers.conf"


def aisite(*args: str) -> float:
    start = time.perf_counter()
    env = os.environ | {"AISITE_LAB_BMC_PASSWORD": "bench-only-password"}  # the BMC emulators' credentials
    subprocess.run([sys.executable, "-m", "aisite", *args], cwd=ROOT, check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def main() -> None:
    text = (ROOT / "stacks" / "Pulumi.lab.yaml").read_text()
    text = text.replace("10.250.", "10.254.").replace("10.251.", "10.255.").replace("name: lab\n", "name: labbench\n")
    stack = Path(tempfile.mkdtemp()) / "Pulumi.labbench.yaml"
    stack.write_text(text)
    rows: list[tuple[str, float]] = []
    aisite("lab", "down", str(stack))
    if "--cold" in sys.argv:
        env = os.environ | {"CONTAINERS_CONF": str(CONF)}
        ids = subprocess.run(
            ["podman", "images", "-q", "--filter", "label=io.aisite.image"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        if ids:
            subprocess.run(["podman", "rmi", "-f", *ids], env=env, check=True, capture_output=True)
        rows.append(("up, cold (debootstrap + image builds)", aisite("lab", "up", str(stack))))
        rows.append(("down", aisite("lab", "down", str(stack))))
    rows.append(("up, warm (images cached)", aisite("lab", "up", str(stack))))
    rows.append(("up again (nothing to change)", aisite("lab", "up", str(stack))))
    rows.append(("down", aisite("lab", "down", str(stack))))
    print("aisite lab benchmark: lab stack (4 nodes, 4 FRR switches, 8 cables, 4 BMC emulators), wall-clock seconds")
    for what, seconds in rows:
        print(f"  {what:<40} {seconds:7.2f}")


if __name__ == "__main__":
    main()
