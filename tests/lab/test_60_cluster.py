"""The cluster layer as far as the lab can run it: containerd, the kubeadm configuration and kube-vip; and a member
on another Kubernetes version that stops the layer before anything changes."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import yaml

from aisite.plan import Plan
from tests.conftest import ROOT, run_cli
from tests.lab.common import BMC_ENV, SITE, containers, podman


def test_cluster_layer_runs_containerd_and_writes_kubeadm_and_kube_vip(
    up: subprocess.CompletedProcess[str], plan: Plan
) -> None:
    """What the cluster layer can do for real in the lab (the deploy above ran it): containerd running the
    configuration the role wrote, and the kubeadm configuration and kube-vip pod from the plan."""
    k = plan.kubernetes
    for node in containers(plan):  # (the VM's containerd: test_the_vm_node_was_installed_from_power_off)
        c = f"aisite-{SITE}-{node.name}"
        assert podman("exec", c, "systemctl", "is-active", "containerd").strip() == "active"
        cri = tomllib.loads(podman("exec", c, "containerd", "config", "dump"))["plugins"]["io.containerd.grpc.v1.cri"]
        assert cri["sandbox_image"] == k.sandbox_image
        assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
        assert ("nvidia" in cri["containerd"]["runtimes"]) == (node.gpu is not None)
        docs = {
            d["kind"]: d for d in yaml.safe_load_all(podman("exec", c, "cat", "/etc/kubernetes/aisite/kubeadm.yaml"))
        }
        assert docs["ClusterConfiguration"]["controlPlaneEndpoint"] == k.endpoint
        assert docs["ClusterConfiguration"]["networking"]["podSubnet"] == k.pod_cidr
        own = docs["InitConfiguration" if node.name == k.control_plane[0] else "JoinConfiguration"]
        kubelet_args = {a["name"]: a["value"] for a in own["nodeRegistration"]["kubeletExtraArgs"]}
        assert kubelet_args["node-ip"] == node.management.address
    cp = f"aisite-{SITE}-{k.control_plane[0]}"
    pod = yaml.safe_load(podman("exec", cp, "cat", "/etc/kubernetes/manifests/kube-vip.yaml"))
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["address"] == k.api_vip and env["vip_interface"] == k.vip_interface
    # No cluster was made, so there is no kubeconfig to fetch or export.
    assert not (ROOT / ".aisite" / SITE / "kubeconfig").exists()


def test_a_member_on_another_kubernetes_version_stops_the_layer_unchanged(
    up: subprocess.CompletedProcess[str], stack_file: Path, plan: Plan
) -> None:
    """A node that is a member running another version (a stand-in kubelet that reports 1.34.2, with a
    kubelet.conf) stops the cluster layer on every node before any of them is changed."""
    cp = f"aisite-{SITE}-{plan.kubernetes.control_plane[0]}"
    fake = "printf '#!/bin/sh\\necho Kubernetes v1.34.2\\n' > /usr/local/bin/kubelet && chmod +x /usr/local/bin/kubelet"
    podman("exec", cp, "sh", "-c", f"{fake} && mkdir -p /etc/kubernetes && touch /etc/kubernetes/kubelet.conf")
    try:
        r = run_cli("deploy", str(stack_file), "--layer", "cluster", "--json", env=BMC_ENV)
        assert r.returncode == 1, r.stdout + r.stderr
        doc = json.loads(r.stdout)
        want = f"{plan.kubernetes.control_plane[0]} is a member running Kubernetes 1.34.2 but the site says"
        assert any(want in f for f in doc["failures"]), doc["failures"]
        assert all(x["changed"] == 0 for x in doc["recap"].values()), doc["recap"]
        assert doc["changes"] == []
    finally:
        podman("exec", cp, "rm", "-f", "/usr/local/bin/kubelet", "/etc/kubernetes/kubelet.conf")
