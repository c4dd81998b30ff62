"""Without a GPU: the repository (off), the branch pin and peermem; nothing installed."""


def test_no_gpu_here(host):
    assert host.run("grep -l 0x10de /sys/bus/pci/devices/*/vendor").stdout.strip() == ""


def test_repository_written_but_disabled(host):
    src = host.file("/etc/apt/sources.list.d/aisite-nvidia.sources").content_string
    assert "URIs: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/" in src
    assert "Enabled: no" in src
    # apt reads the file and skips it: an update does not ask NVIDIA's servers.
    assert "developer.download.nvidia.com" not in host.run("apt-get update --print-uris -qq").stdout


def test_branch_pinned_for_volta(host):
    pref = host.file("/etc/apt/preferences.d/aisite-nvidia.pref").content_string
    assert "Pin: version 580.*" in pref and "Pin-Priority: 1001" in pref and "nvidia-fabricmanager*" in pref
    assert "volta" in pref


def test_peermem_loaded_at_boot(host):
    assert host.file("/etc/modules-load.d/aisite-nvidia.conf").content_string.strip() == "nvidia-peermem"
    # containerd's nvidia runtime is the containerd role's (one file, checked by containerd), not a drop-in here.
    assert not host.file("/etc/containerd/conf.d/99-nvidia.toml").exists


def test_no_driver_installed_without_a_gpu(host):
    assert not host.package("cuda-drivers-580").is_installed
    assert not host.file("/usr/share/keyrings/aisite-nvidia.asc").exists


def test_imex_peers_of_the_rack_written_package_not_installed(host):
    cfg = host.file("/etc/nvidia-imex/nodes_config.cfg")
    assert cfg.content_string == "10.30.2.5\n10.30.2.6\n10.30.2.7\n"
    assert cfg.mode == 0o644
    assert not host.package("nvidia-imex-580").is_installed
