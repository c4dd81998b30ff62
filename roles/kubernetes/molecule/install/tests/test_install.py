"""A real control-plane node: kubeadm, kubelet and kubectl held at the version, the API answering, Calico running."""

import json


def test_packages_held_at_the_version(host):
    for pkg in ("kubeadm", "kubelet", "kubectl"):
        p = host.package(pkg)
        assert p.is_installed and p.version.startswith("1.35.6-")
        assert "hold" in host.check_output(f"dpkg --get-selections {pkg}")


def test_the_node_is_ready_and_calico_runs(host):
    kubectl = "kubectl --kubeconfig /etc/kubernetes/admin.conf"
    nodes = json.loads(host.check_output(f"{kubectl} get nodes -o json"))["items"]
    assert [n["metadata"]["name"] for n in nodes] == ["cp01"]
    assert host.check_output(f"{kubectl} version -o json").count("v1.35.6") >= 1
    ds = json.loads(host.check_output(f"{kubectl} -n kube-system get ds calico-node -o json"))
    assert ds["status"]["numberReady"] == 1
