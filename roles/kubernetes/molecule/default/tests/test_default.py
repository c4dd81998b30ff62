"""Without package access: modules, sysctls, the kubeadm configuration, policies and kube-vip written; nothing of
Kubernetes installed, and the repository written disabled."""

import json

import yaml


def docs(host, path):
    return {d["kind"]: d for d in yaml.safe_load_all(host.file(path).content_string) if d}


def test_modules_and_sysctls_written(host):
    assert host.file("/etc/modules-load.d/aisite-kubernetes.conf").content_string.split("\n")[1:3] == [
        "overlay",
        "br_netfilter",
    ]
    sysctl = host.file("/etc/sysctl.d/90-aisite-kubernetes.conf").content_string
    assert "net.bridge.bridge-nf-call-iptables=1" in sysctl and "net.ipv4.ip_forward=1" in sysctl


def test_kubeadm_configuration_from_the_plan(host):
    f = host.file("/etc/kubernetes/aisite/kubeadm.yaml")
    assert f.mode == 0o600 and f.user == "root"
    d = docs(host, f.path)
    assert set(d) == {"ClusterConfiguration", "KubeletConfiguration", "KubeProxyConfiguration", "InitConfiguration"}
    cluster, init = d["ClusterConfiguration"], d["InitConfiguration"]
    assert cluster["apiVersion"] == init["apiVersion"] == "kubeadm.k8s.io/v1beta4"
    assert cluster["controlPlaneEndpoint"] == "10.250.1.5:6443"
    assert cluster["kubernetesVersion"] == "v1.35.6"
    assert cluster["networking"] == {
        "podSubnet": "10.251.0.0/17",
        "serviceSubnet": "10.251.128.0/20",
        "dnsDomain": "cluster.local",
    }
    assert "10.250.1.5" in cluster["apiServer"]["certSANs"]
    args = {a["name"]: a["value"] for a in cluster["apiServer"]["extraArgs"]}
    assert args["audit-log-path"] == "/var/log/kubernetes/audit/audit.log"
    assert args["admission-control-config-file"] == "/etc/kubernetes/aisite/admission.yaml"
    assert init["localAPIEndpoint"] == {"advertiseAddress": "10.250.1.2", "bindPort": 6443}
    reg = init["nodeRegistration"]
    assert reg["name"] == "cp01"
    kubelet_args = {a["name"]: a["value"] for a in reg["kubeletExtraArgs"]}
    assert kubelet_args["node-ip"] == "10.250.1.2"
    # kubelets may not set node-role labels on themselves; kubeadm does.
    assert set(kubelet_args["node-labels"].split(",")) == {"aisite.io/site=molecule", "aisite.io/role=control-plane"}
    assert reg["taints"] == [{"key": "node-role.kubernetes.io/control-plane", "value": "", "effect": "NoSchedule"}]
    assert d["KubeletConfiguration"]["cgroupDriver"] == "systemd"
    # The control plane's metrics where Prometheus scrapes them; etcd's through this node's own patch.
    assert cluster["controllerManager"]["extraArgs"] == [{"name": "bind-address", "value": "0.0.0.0"}]
    assert cluster["scheduler"]["extraArgs"] == [{"name": "bind-address", "value": "0.0.0.0"}]
    assert d["KubeProxyConfiguration"]["metricsBindAddress"] == "0.0.0.0:10249"
    assert init["patches"] == {"directory": "/etc/kubernetes/aisite/patches"}
    patch = host.file("/etc/kubernetes/aisite/patches/etcd+json.json")
    assert patch.mode == 0o600
    assert json.loads(patch.content_string) == [
        {
            "op": "add",
            "path": "/spec/containers/0/command/-",
            "value": "--listen-metrics-urls=http://127.0.0.1:2381,http://10.250.1.2:2381",
        }
    ]


def test_policies_written(host):
    admission = docs(host, "/etc/kubernetes/aisite/admission.yaml")["AdmissionConfiguration"]
    defaults = admission["plugins"][0]["configuration"]["defaults"]
    assert defaults["enforce"] == "baseline" and defaults["warn"] == "restricted"
    audit = docs(host, "/etc/kubernetes/aisite/audit-policy.yaml")["Policy"]
    assert audit["rules"][0]["level"] == "Metadata" and audit["rules"][-1]["level"] == "Metadata"


def test_kube_vip_holds_the_vip_on_the_management_interface(host):
    pod = docs(host, "/etc/kubernetes/manifests/kube-vip.yaml")["Pod"]
    c = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["address"] == "10.250.1.5" and env["vip_interface"] == "mgmt0" and env["port"] == "6443"
    assert c["image"] == "ghcr.io/kube-vip/kube-vip:v1.0.0"
    # The first control-plane node: super-admin.conf until kubeadm's RBAC exists.
    assert pod["spec"]["volumes"][0]["hostPath"]["path"] == "/etc/kubernetes/super-admin.conf"


def test_nothing_installed_and_repository_disabled(host):
    for pkg in ("kubeadm", "kubelet", "kubectl"):
        assert not host.package(pkg).is_installed
    src = host.file("/etc/apt/sources.list.d/aisite-kubernetes.sources").content_string
    assert "Enabled: no" in src and "https://pkgs.k8s.io/core:/stable:/v1.35/deb/" in src
    pref = host.file("/etc/apt/preferences.d/aisite-kubernetes.pref").content_string
    assert "Pin: version 1.35.6-*" in pref
    assert host.run("apt-get update -qq").rc == 0  # a disabled source does not break apt
