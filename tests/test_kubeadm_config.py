"""The kubernetes role's kubeadm configuration and kube-vip pod, rendered offline for every node of the shipped
stacks with Ansible's own templating, held against kubeadm's v1beta4 API types and the plan.

No kubeadm runs here (it cannot be installed); the field names below are those of the v1beta4 Go types
(kubernetes/kubernetes cmd/kubeadm/app/apis/kubeadm/v1beta4/types.go, json tags), so a misspelt or misplaced
key fails here instead of on a site's first `kubeadm init`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.parsing.yaml.loader import AnsibleLoader
from ansible.template import Templar, trust_as_template

from aisite.loader import load_site
from aisite.plan import Node, Plan, build_plan
from aisite.playbooks import ROLES
from aisite.render.inventory import inventory_yaml

ROOT = Path(__file__).resolve().parent.parent
ROLE = ROLES / "kubernetes"

# type -> {field: type of its value (None: a scalar or a list of scalars)}; "[X]" is a list of X.
ARG = {"name": None, "value": None}
ENDPOINT = {"advertiseAddress": None, "bindPort": None}
TAINT = {"key": None, "value": None, "effect": None, "timeAdded": None}
REGISTRATION = {
    "name": None,
    "criSocket": None,
    "taints": [TAINT],
    "kubeletExtraArgs": [ARG],
    "ignorePreflightErrors": None,
    "imagePullPolicy": None,
    "imagePullSerial": None,
}
HOST_PATH_MOUNT = {"name": None, "hostPath": None, "mountPath": None, "readOnly": None, "pathType": None}
COMPONENT = {"extraArgs": [ARG], "extraVolumes": [HOST_PATH_MOUNT], "extraEnvs": None}
TYPE_META = {"apiVersion": None, "kind": None}
V1BETA4: dict[str, dict[str, Any]] = {
    "ClusterConfiguration": TYPE_META
    | {
        "etcd": None,
        "networking": {"serviceSubnet": None, "podSubnet": None, "dnsDomain": None},
        "kubernetesVersion": None,
        "controlPlaneEndpoint": None,
        "apiServer": COMPONENT | {"certSANs": None},
        "controllerManager": COMPONENT,
        "scheduler": COMPONENT,
        "dns": None,
        "proxy": None,
        "certificatesDir": None,
        "imageRepository": None,
        "featureGates": None,
        "clusterName": None,
        "encryptionAlgorithm": None,
        "certificateValidityPeriod": None,
        "caCertificateValidityPeriod": None,
    },
    "InitConfiguration": TYPE_META
    | {
        "bootstrapTokens": None,
        "dryRun": None,
        "nodeRegistration": REGISTRATION,
        "localAPIEndpoint": ENDPOINT,
        "certificateKey": None,
        "skipPhases": None,
        "patches": {"directory": None},
        "timeouts": None,
    },
    "JoinConfiguration": TYPE_META
    | {
        "dryRun": None,
        "nodeRegistration": REGISTRATION,
        "caCertPath": None,
        "discovery": {
            "bootstrapToken": {
                "token": None,
                "apiServerEndpoint": None,
                "caCertHashes": None,
                "unsafeSkipCAVerification": None,
            },
            "file": {"kubeConfigPath": None},
            "tlsBootstrapToken": None,
            "timeout": None,
        },
        "controlPlane": {"localAPIEndpoint": ENDPOINT, "certificateKey": None},
        "skipPhases": None,
        "patches": {"directory": None},
        "timeouts": None,
    },
}
KUBELET_CONFIGURATION = {"apiVersion", "kind", "cgroupDriver"}  # the fields the role sets
# kube-proxy's v1alpha1 KubeProxyConfiguration (pkg/proxy/apis/config/v1alpha1 json tags): the fields set.
KUBE_PROXY_CONFIGURATION = {"apiVersion", "kind", "metricsBindAddress"}


def unknown_fields(value: Any, schema: Any, path: str) -> list[str]:
    if schema is None:
        return []
    if isinstance(schema, list):
        assert isinstance(value, list), f"{path} is not a list"
        return [e for i, item in enumerate(value) for e in unknown_fields(item, schema[0], f"{path}[{i}]")]
    assert isinstance(value, dict), f"{path} is not a mapping"
    out = [f"{path}.{k}" for k in value if k not in schema]
    return out + [e for k, v in value.items() if k in schema for e in unknown_fields(v, schema[k], f"{path}.{k}")]


def _trusted(value: Any) -> Any:
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {k: _trusted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return value


def render(plan: Plan, node: Node, template: str, **extra: Any) -> list[dict[str, Any]]:
    """The role's template for one node, with the variables Ansible would give it: the role's defaults, then
    the inventory's group and host variables (which override them), then `extra`."""
    inv = AnsibleLoader(trust_as_template(inventory_yaml(plan))).get_single_data()["all"]  # as Ansible reads it
    group = {"control-plane": "control_plane", "gpu": "gpu_nodes", "storage": "storage_nodes"}[node.role]
    variables = _trusted(yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()))
    variables |= inv["vars"] | inv["children"][group]["hosts"][node.name] | extra
    variables |= {"inventory_hostname": node.name, "playbook_dir": "/nowhere"}
    templar = Templar(loader=DataLoader(), variables=variables)
    text = templar.template(trust_as_template((ROLE / "templates" / template).read_text()))
    return [d for d in yaml.safe_load_all(text) if d]


JOIN = {"token": "abcdef.0123456789abcdef", "ca_hash": "sha256:" + "0" * 64, "certificate_key": "1" * 64}


@pytest.fixture(scope="module", params=["lab", "dc1"])
def plan(request: pytest.FixtureRequest) -> Plan:
    return build_plan(load_site(request.param))


def test_every_node_gets_a_v1beta4_configuration_of_known_fields(plan: Plan) -> None:
    first = plan.kubernetes.control_plane[0]
    for node in plan.nodes:
        for extra in ({}, {"kubernetes_join": JOIN}):
            docs = render(plan, node, "kubeadm.yaml.j2", **extra)
            kinds = [d["kind"] for d in docs]
            last = "InitConfiguration" if node.name == first else "JoinConfiguration"
            want = ["ClusterConfiguration", "KubeletConfiguration", "KubeProxyConfiguration", last]
            assert kinds == want, (node.name, kinds)
            for d in docs:
                if d["kind"] == "KubeletConfiguration":
                    assert d["apiVersion"] == "kubelet.config.k8s.io/v1beta1" and set(d) == KUBELET_CONFIGURATION
                    assert d["cgroupDriver"] == "systemd"
                    continue
                if d["kind"] == "KubeProxyConfiguration":
                    assert d["apiVersion"] == "kubeproxy.config.k8s.io/v1alpha1" and set(d) == KUBE_PROXY_CONFIGURATION
                    continue
                assert d["apiVersion"] == "kubeadm.k8s.io/v1beta4"
                assert unknown_fields(d, V1BETA4[d["kind"]], f"{node.name}:{d['kind']}") == []


def test_addresses_and_networks_come_from_the_plan(plan: Plan) -> None:
    k = plan.kubernetes
    first = k.control_plane[0]
    for node in plan.nodes:
        cluster, _, _, own = render(plan, node, "kubeadm.yaml.j2", kubernetes_join=JOIN)
        assert cluster["controlPlaneEndpoint"] == f"{k.api_vip}:6443" == k.endpoint
        assert cluster["kubernetesVersion"] == f"v{k.version}"
        assert cluster["networking"] == {
            "podSubnet": k.pod_cidr,
            "serviceSubnet": k.service_cidr,
            "dnsDomain": k.dns_domain,
        }
        assert set(cluster["apiServer"]["certSANs"]) == {
            k.api_vip,
            *(n.name for n in plan.by_role("control-plane")),
            *(n.fqdn for n in plan.by_role("control-plane")),
            *(n.management.address for n in plan.by_role("control-plane")),
        }
        reg = own["nodeRegistration"]
        assert reg["name"] == node.name
        args = {a["name"]: a["value"] for a in reg["kubeletExtraArgs"]}
        assert args["node-ip"] == node.management.address
        labels = dict(kv.split("=", 1) for kv in args["node-labels"].split(","))
        assert labels == {key: v for key, v in node.labels.items() if "kubernetes.io/" not in key}
        taints = [(t["key"], t["value"], t["effect"]) for t in reg["taints"]]
        want = [(t.key, t.value, t.effect) for t in node.taints]
        if node.role == "control-plane":
            want.append(("node-role.kubernetes.io/control-plane", "", "NoSchedule"))
        assert taints == want, node.name
        if node.name == first:
            assert own["localAPIEndpoint"] == {"advertiseAddress": node.management.address, "bindPort": 6443}
        else:
            assert own["discovery"]["bootstrapToken"]["apiServerEndpoint"] == k.endpoint
            assert own["discovery"]["bootstrapToken"]["caCertHashes"] == [JOIN["ca_hash"]]
            assert ("controlPlane" in own) == (node.role == "control-plane")
            if node.role == "control-plane":
                assert own["controlPlane"]["localAPIEndpoint"]["advertiseAddress"] == node.management.address


def test_control_plane_metrics_are_where_prometheus_scrapes_them(plan: Plan) -> None:
    """kube-prometheus-stack scrapes the controller manager (10257), scheduler (10259), etcd (2381) and kube-proxy
    (10249) on the nodes' addresses: kubeadm's 127.0.0.1 would leave their Down alerts firing."""
    for node in plan.nodes:
        cluster, _, proxy, own = render(plan, node, "kubeadm.yaml.j2", kubernetes_join=JOIN)
        for component in ("controllerManager", "scheduler"):
            assert {"name": "bind-address", "value": "0.0.0.0"} in cluster[component]["extraArgs"]
        assert proxy["metricsBindAddress"] == "0.0.0.0:10249"
        if node.role != "control-plane":
            assert "patches" not in own  # no static pods to patch
            continue
        assert own["patches"] == {"directory": "/etc/kubernetes/aisite/patches"}
        # etcd's static pod, as kubeadm writes its command, with this node's patch applied (RFC 6902 add).
        command = ["etcd", "--listen-metrics-urls=http://127.0.0.1:2381", "--name=" + node.name]
        ((op,),) = render(plan, node, "etcd-patch.json.j2")  # one document: a list of one operation
        assert op["op"] == "add" and op["path"] == "/spec/containers/0/command/-"
        command.append(op["value"])
        flags = dict(a.removeprefix("--").split("=", 1) for a in command[1:])  # the last one given wins
        urls = flags["listen-metrics-urls"].split(",")
        assert urls == ["http://127.0.0.1:2381", f"http://{node.management.address}:2381"]


def test_the_kept_configuration_carries_no_join_credentials(plan: Plan) -> None:
    for node in plan.nodes:
        text = yaml.safe_dump_all(render(plan, node, "kubeadm.yaml.j2"))
        assert "token:" not in text and "certificateKey" not in text and "caCertHashes" not in text


def test_kube_vip_pod_passes_the_schema_and_holds_the_vip(plan: Plan) -> None:
    k = plan.kubernetes
    for node in plan.by_role("control-plane"):
        (pod,) = render(plan, node, "kube-vip.yaml.j2")
        kubernetes_validate.validate(pod, k.version, strict=True)
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        assert env["address"] == k.api_vip and env["port"] == "6443"
        assert env["vip_interface"] == node.management.name == k.vip_interface
        config = pod["spec"]["volumes"][0]["hostPath"]["path"]
        assert config == (
            "/etc/kubernetes/super-admin.conf" if node.name == k.control_plane[0] else "/etc/kubernetes/admin.conf"
        )


def test_field_check_catches_a_misplaced_key(plan: Plan) -> None:
    cluster = render(plan, plan.nodes[0], "kubeadm.yaml.j2")[0]
    cluster["apiServer"]["podSubnet"] = cluster["networking"].pop("podSubnet")
    assert unknown_fields(cluster, V1BETA4["ClusterConfiguration"], "c") == ["c.apiServer.podSubnet"]


HOSTILE = 'x"\nauthorization-mode: AlwaysAllow\n# '


def test_values_are_structured_not_spliced(plan: Plan) -> None:
    """The model refuses such values; the template does not rely on it: a value with a quote, a newline and a key
    stays one scalar of exactly that value (to_json), and adds nothing."""
    node = plan.nodes[0]
    hostile_node = {**_node_vars(plan, node), "name": HOSTILE}
    docs = render(plan, node, "kubeadm.yaml.j2", aisite_site=HOSTILE, aisite_node=hostile_node)
    assert docs[0]["clusterName"] == HOSTILE and "authorization-mode" not in docs[0]
    assert docs[3]["nodeRegistration"]["name"] == HOSTILE


def _node_vars(plan: Plan, node: Node) -> dict[str, Any]:
    inv = AnsibleLoader(trust_as_template(inventory_yaml(plan))).get_single_data()["all"]["children"]
    group = {"control-plane": "control_plane", "gpu": "gpu_nodes", "storage": "storage_nodes"}[node.role]
    return dict(inv[group]["hosts"][node.name]["aisite_node"])


def test_containerd_registry_settings_are_toml_strings() -> None:
    """hosts.toml of the containerd role, rendered by Ansible's Templar with a mirror URL and a registry host that
    hold TOML's quote and newline: tomllib reads back exactly those values."""
    template = (ROLES / "containerd" / "templates" / "hosts.toml.j2").read_text()
    item = {"host": 'reg"\nx = 1', "ca": "PEM", "mirrors": ['https://m"\n[evil]']}
    templar = Templar(loader=DataLoader(), variables={"item": item, "containerd_certs_dir": "/etc/containerd/certs.d"})
    doc = tomllib.loads(templar.template(trust_as_template(template)))
    assert doc["server"] == 'https://reg"\nx = 1' and "x" not in doc and "evil" not in doc
    assert list(doc["host"]) == ['https://m"\n[evil]']
