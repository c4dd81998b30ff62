"""Rails as the plan has them, read back from the kernel; the RoCE pieces that need a device, as files."""

import json


def test_rails_up_with_mtu_and_address(host):
    for ifc, addr in (("rail0", "10.250.16.2"), ("rail1", "10.250.17.2")):
        (link,) = json.loads(host.check_output(f"ip -j addr show dev {ifc}"))
        assert link["mtu"] == 9000, link
        assert [a["local"] for a in link["addr_info"] if a["family"] == "inet"] == [addr]


def test_one_table_and_rule_per_rail(host):
    t100 = host.check_output("ip route show table 100")
    assert "default via 10.250.16.1 dev rail0" in t100
    assert "10.250.16.0/29 dev rail0" in t100 and "src 10.250.16.2" in t100
    assert "default via 10.250.17.1 dev rail1" in host.check_output("ip route show table 101")
    rules = host.check_output("ip rule show")
    assert "1000:\tfrom 10.250.16.2 lookup 100" in rules and "1001:\tfrom 10.250.17.2 lookup 101" in rules
    main = host.check_output("ip route show")
    assert "10.250.16.0/24 via 10.250.16.1 dev rail0" in main
    # The routing decision a NCCL rank bound to rail 0 gets for the far rail.
    assert "via 10.250.16.1 dev rail0" in host.check_output("ip route get 10.250.17.9 from 10.250.16.2")


def test_management_routes_survive_networkd(host):
    assert host.check_output("ip route show default").startswith("default via")


def test_rail_arp_sysctls_written(host):
    conf = host.file("/etc/sysctl.d/91-aisite-rails.conf").content_string
    for line in (
        "net.ipv4.conf.rail0.arp_ignore=1",
        "net.ipv4.conf.rail1.rp_filter=2",
        "net.ipv4.conf.rail0.arp_filter=0",
    ):
        assert line in conf


def test_nccl_conf(host):
    conf = host.file("/etc/nccl.conf").content_string.splitlines()
    assert "NCCL_IB_TC=106" in conf and "NCCL_IB_GID_INDEX=3" in conf and "NCCL_SOCKET_IFNAME=eth0" in conf


def test_lossless_unit_enabled_and_script_matches_the_profile(host):
    assert host.service("aisite-roce-qos").is_enabled
    script = host.file("/usr/local/sbin/aisite-roce-qos")
    assert script.mode == 0o755
    text = script.content_string
    assert "--trust=dscp --pfc=0,0,0,1,0,0,0,0" in text
    assert "prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off" in text
    assert "dscp-prio 26:3 48:6" in text and "echo 106 >" in text and "enable/3" in text
    # No RDMA device here: the unit's condition skips it rather than failing.
    assert host.run("ls /sys/class/infiniband").stdout.strip() == ""
    assert (
        "ConditionPathExistsGlob=/sys/class/infiniband/*"
        in host.file("/etc/systemd/system/aisite-roce-qos.service").content_string
    )
    # And the script itself says so per rail when run.
    out = host.run("/usr/local/sbin/aisite-roce-qos")
    assert out.rc == 0 and "rail0: no RDMA device, skipped" in out.stdout


def test_rdma_tools_installed(host):
    for binary in ("ib_write_bw", "ibv_devices", "rdma"):
        assert host.exists(binary), binary


def test_every_sysctl_written_names_a_setting_this_kernel_has(host):
    # The file is applied at boot (and per interface by udev); a misspelt key would be rejected there, unseen here
    # where /proc/sys is read-only. Each key must name an existing entry, with a value of the same shape.
    for line in host.file("/etc/sysctl.d/91-aisite-rails.conf").content_string.splitlines():
        if not line.strip() or line.startswith(("#", ";")):
            continue
        key, value = (part.strip() for part in line.split("=", 1))
        entry = host.file("/proc/sys/" + key.replace(".", "/"))
        assert entry.exists, key
        assert len(value.split()) == len(entry.content_string.split()), (key, value)


def test_link_file_names_the_nic_by_its_pci_function_only_where_known(host):
    link = host.file("/etc/systemd/network/10-aisite-rail1.link")
    assert link.exists and link.mode == 0o644
    assert "Path=pci-0000:40:00.0" in link.content_string
    assert "Name=rail1" in link.content_string
    # rail0's PCI function is not in the plan: no .link that could rename another NIC to it
    assert not host.file("/etc/systemd/network/10-aisite-rail0.link").exists


def test_pods_network_file_is_this_nodes_pool_on_the_rail(host):
    import json

    f = host.file("/etc/cni/multus/net.d/aisite-rail1.conf")
    assert f.exists and f.mode == 0o644
    conf = json.loads(f.content_string)
    assert conf["name"] == "aisite-rail1"  # the name Multus matches the tenant's NetworkAttachmentDefinition by
    assert (conf["type"], conf["master"], conf["mode"], conf["mtu"]) == ("macvlan", "rail1", "bridge", 9000)
    assert conf["ipam"] == {"type": "nv-ipam", "poolName": "rail1-su0"}
    assert not host.file("/etc/cni/multus/net.d/aisite-rail0.conf").exists


def test_mstflint_for_the_rail_nics_firmware_settings(host):
    # The plan names a rail NIC by PCI function: mstconfig is there to set it (the container has no such device,
    # which the role reports as missing; tests/test_nic_config.py runs the module against the real mstconfig).
    assert host.package("mstflint").is_installed
    assert host.run("mstconfig -v").rc == 0
