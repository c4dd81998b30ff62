"""Last on the main lab: a storage node lost during a read (the container killed as power would), then `down`,
which leaves no container, network, bridge, volume or process."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from aisite.lab import lab
from aisite.lab.topology import vm_nodes
from aisite.plan import Plan
from tests.conftest import run_cli
from tests.lab.common import (
    SITE,
    ceph_json,
    ceph_plan,
    containers,
    paced_read,
    podman,
    rotating,
    wait_ceph_reports,
    wait_ceph_settled,
    wait_visible,
    write_data_set,
)


# Last before `down`: a storage container killed and started again is one the lab did not start, so nothing after
# it should read its state as the deploy left it.
@rotating("faults")
def test_a_storage_node_lost_during_a_read_loses_no_byte_and_the_cluster_recovers(
    up: subprocess.CompletedProcess[str], plan: Plan
) -> None:
    """The last storage node (a monitor, an OSD, an RGW) loses power during a read: the monitors keep quorum, the
    read completes with the file's checksum, and powered on again the node rejoins and the cluster recovers.
    The lab's IPMI emulator keeps a node's power in a file, so the container is killed and started as power would."""
    assert up.returncode == 0, up.stderr
    c = ceph_plan(plan)
    wait_ceph_settled(plan, 120)
    lost = c.monitors[-1]
    assert lost not in {c.monitors[0], *(e.server for e in plan.exports)}, "the node lost serves nothing else"
    sha = write_data_set(plan, "node-loss.bin", 128)
    gpu = plan.by_role("gpu")[1].name  # not the OSD test's reader: nothing of this file is in its caches
    assert c.gpu_client is not None
    (_, mountpoint), *_ = c.gpu_client.mounts
    wait_visible(plan, gpu, f"{mountpoint}/node-loss.bin")
    reader = paced_read(plan, gpu, f"{mountpoint}/node-loss.bin", 128)
    try:
        time.sleep(1)
        podman("kill", f"aisite-{SITE}-{lost}")
        off = time.monotonic()
        down = wait_ceph_reports(plan, {"OSD_DOWN", "MON_DOWN", "PG_DEGRADED"})
        out, err = reader.communicate(timeout=300)
        assert reader.returncode == 0, err
        assert out.strip() == sha, "every byte read back as written"
        status = ceph_json(plan, "status")
        assert sorted(status["quorum_names"]) == sorted(m for m in c.monitors if m != lost), status["quorum_names"]
        print(
            f"{lost} lost: reported down and degraded after {down:.0f} s, quorum kept; the read ended after"
            f" {time.monotonic() - off:.0f} s with the file's checksum"
        )
    finally:
        podman("start", f"aisite-{SITE}-{lost}")
    recovered = wait_ceph_settled(plan, 300)
    print(f"{lost} powered on again: rejoined and recovered (every PG active+clean) in {recovered:.0f} s")


def test_down_leaves_nothing(up: subprocess.CompletedProcess[str], stack_file: Path, plan: Plan) -> None:
    assert up.returncode == 0, up.stderr
    ids = podman("ps", "-aq", "--no-trunc", "--filter", f"label=io.aisite.lab={SITE}").split()
    nets = json.loads(podman("network", "inspect", *(f"aisite-{SITE}-{n}" for n in ("mgmt", "stor", "oob"))))
    bridges = [n["network_interface"] for n in nets]
    down = run_cli("lab", "down", str(stack_file), "--json")
    assert down.returncode == 0, down.stderr
    fabric = [s for s in plan.switches if s.role in ("leaf", "spine")]
    # A container and a BMC per node, but a VM node's one container is both; and the boot server.
    expected = 2 * len(containers(plan)) + len(vm_nodes(plan)) + (1 if plan.provisioning else 0) + len(fabric)
    assert len(json.loads(down.stdout)["containers"]) == len(ids) == expected
    assert podman("ps", "-aq", "--filter", f"label=io.aisite.lab={SITE}") == ""
    assert podman("network", "ls", "-q", "--filter", f"label=io.aisite.lab={SITE}") == ""
    assert podman("volume", "ls", "-q", "--filter", f"label=io.aisite.lab={SITE}") == ""  # the VMs' disks
    for bridge in bridges:
        assert subprocess.run(["ip", "link", "show", bridge], capture_output=True, check=False).returncode != 0
    assert lab.monitors(ids) == []
    assert json.loads(run_cli("lab", "down", str(stack_file), "--json").stdout) == {"containers": [], "networks": []}
