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


def test_the_default_imex_channel_unit_is_enabled_and_creates_the_channel_from_the_drivers_major(host):
    """Host mode: the unit runs the script at every boot (channels do not persist through a reboot). Here no driver
    registered nvidia-caps-imex-channels, so the unit fails and says so; given a devices list that has it, the
    script makes channel0 as NVIDIA's IMEX guide does (a character device of that major, minor 0, mode 0666)."""
    assert host.service("aisite-imex-channel").is_enabled
    assert host.run("systemctl start aisite-imex-channel").rc != 0
    journal = host.run("journalctl -u aisite-imex-channel --no-pager").stdout
    assert "nvidia-caps-imex-channels is not registered" in journal
    host.run_test("rm -rf /tmp/imex && mkdir -p /tmp/imex/dev")
    host.run_test("printf 'Character devices:\\n195 nvidia\\n234 nvidia-caps-imex-channels\\n' > /tmp/imex/devices")
    for _ in range(2):  # the second run finds it made
        host.run_test("/usr/local/sbin/aisite-imex-channel /tmp/imex/devices /tmp/imex/dev")
    node = host.run("stat -c '%F %t %T %a' /tmp/imex/dev/nvidia-caps-imex-channels/channel0").stdout.split()
    assert node == ["character", "special", "file", "ea", "0", "666"], node


def test_coherent_gpu_memory_kept_by_the_driver_cdmm(host):
    # The scenario's node is planned with cdmm (as a GB200 tray's is): the nvidia module's option, read at its load.
    conf = host.file("/etc/modprobe.d/aisite-nvidia.conf")
    assert conf.content_string == "options nvidia NVreg_CoherentGPUMemoryMode=driver\n"
    assert conf.mode == 0o644
