"""The shared molecule base: the instance is the lab's node image with systemd running as PID 1, which every
role's scenario relies on. (preflight itself only asserts on the controller and changes nothing on the host:
converge and idempotence show that; these checks are about the platform it ran against.)"""


def test_systemd_is_pid_1_and_running(host):
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"
    state = host.run("systemctl is-system-running").stdout.strip()
    assert state in ("running", "degraded"), state


def test_lab_node_image_packages(host):
    for pkg in ("python3", "systemd", "iproute2", "openssh-server", "lldpd"):
        assert host.package(pkg).is_installed, pkg


def test_preflight_left_the_host_untouched(host):
    # No aisite file is written by an assert-only role.
    assert not host.file("/etc/aisite").exists


def test_the_host_is_the_os_the_scenario_plans(host):
    # The scenario's aisite_node.os (Debian 12 on x86_64) passed the preflight's check against this host.
    info = host.system_info
    assert (info.distribution, info.codename, info.arch) == ("debian", "bookworm", "x86_64")
