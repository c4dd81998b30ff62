"""containerd installed, running, and running the configuration the role wrote (read back from containerd)."""

import tomllib


def dump(host):
    return tomllib.loads(host.check_output("containerd config dump"))


def test_containerd_running_and_enabled(host):
    svc = host.service("containerd")
    assert svc.is_running and svc.is_enabled
    assert host.run("ctr version").rc == 0  # the daemon answers on its socket


def test_systemd_cgroups_and_sandbox_image(host):
    cri = dump(host)["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "registry.k8s.io/pause:3.10.1"
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    assert cri["registry"]["config_path"] == "/etc/containerd/certs.d"


def test_nvidia_handler_written_but_not_default_without_the_toolkit(host):
    cri = dump(host)["plugins"]["io.containerd.grpc.v1.cri"]
    nvidia = cri["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert nvidia["options"]["SystemdCgroup"] is True
    assert not host.file("/usr/bin/nvidia-container-runtime").exists
    assert cri["containerd"]["default_runtime_name"] == "runc"


def test_registry_mirror_and_ca(host):
    d = "/etc/containerd/certs.d/registry.lab.example:5000"
    hosts = tomllib.loads(host.file(f"{d}/hosts.toml").content_string)
    assert hosts["server"] == "https://registry.lab.example:5000"
    assert hosts["ca"] == f"{d}/ca.crt"
    assert hosts["host"]["https://mirror.lab.example/v2/"]["capabilities"] == ["pull", "resolve"]
    assert host.file(f"{d}/ca.crt").content_string.startswith("-----BEGIN CERTIFICATE-----")


def test_an_image_mirror_entry_keeps_its_path(host):
    hosts = tomllib.loads(host.file("/etc/containerd/certs.d/nvcr.io/hosts.toml").content_string)
    assert hosts["server"] == "https://nvcr.io"
    assert hosts["host"] == {
        "https://mirror.lab.example/v2/nvcr.io": {"capabilities": ["pull", "resolve"], "override_path": True}
    }
    assert not host.file("/etc/containerd/certs.d/nvcr.io/ca.crt").exists
