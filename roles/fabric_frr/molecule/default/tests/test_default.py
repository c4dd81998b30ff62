"""fabric_frr on a lone FRR container: daemons, the rendered BGP configuration as FRR runs it, the loopback and the
rail bridge with its gateway. Session establishment needs peers: tests/test_lab_integration.py covers it."""


def test_frr_runs_with_bgp_and_bfd(host):
    frr = host.service("frr")
    assert frr.is_running and frr.is_enabled
    daemons = host.file("/etc/frr/daemons").content_string
    assert "bgpd=yes" in daemons and "bfdd=yes" in daemons


def test_running_configuration_is_the_plan(host):
    conf = host.check_output("vtysh -c 'show running-config'")
    assert "router bgp 4200000001" in conf
    assert "bgp router-id 10.250.3.3" in conf
    assert "neighbor swp16 interface peer-group FABRIC" in conf
    assert "neighbor FABRIC bfd" in conf
    assert "maximum-paths 64" in conf
    assert "ip prefix-list AISITE-LOOPBACKS seq 5 permit 10.250.3.0/26 le 32" in conf
    assert "redistribute connected route-map AISITE-ADVERTISE" in conf


def test_loopback_and_rail_bridge(host):
    assert "10.250.3.3/32" in host.check_output("ip -4 -o addr show dev lo")
    bridge = host.check_output("ip -o addr show dev br-rail0")
    assert "10.250.16.1/29" in bridge
    assert "mtu 9216" in host.check_output("ip -o link show dev br-rail0")
