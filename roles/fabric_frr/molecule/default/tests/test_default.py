"""fabric_frr on a leaf and a spine joined by one link (eth0 on the scenario's network): daemons, the rendered
configuration as FRR runs it, the eBGP unnumbered session with BFD, and only loopbacks and rail subnets crossing
it. The lab test covers the full fabric (two leaves, two spines, ECMP, failures)."""

import json
import time

import pytest


def plan(host, inventory_vars):
    return inventory_vars(host)["aisite_switch"]


def bgp_routes(host):
    doc = json.loads(host.check_output("vtysh -c 'show ip bgp json'"))
    return set(doc.get("routes", {}))


def wait(check, seconds=60):
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {seconds} s")
        time.sleep(1)


def test_frr_runs_with_bgp_and_bfd(host):
    frr = host.service("frr")
    assert frr.is_running and frr.is_enabled
    daemons = host.file("/etc/frr/daemons").content_string
    assert "bgpd=yes" in daemons and "bfdd=yes" in daemons


def test_running_configuration_is_the_plan_and_matches_the_file(host, inventory_vars):
    sw = plan(host, inventory_vars)
    conf = host.check_output("vtysh -c 'show running-config'")
    assert f"router bgp {sw['asn']}" in conf
    assert f"bgp router-id {sw['loopback'].split('/')[0]}" in conf
    assert "neighbor eth0 interface peer-group FABRIC" in conf
    assert "neighbor FABRIC bfd" in conf and "maximum-paths 64" in conf
    assert "ip prefix-list AISITE-LOOPBACKS seq 5 permit 10.250.3.0/26 le 32" in conf
    test = host.check_output("/usr/lib/frr/frr-reload.py --test /etc/frr/frr.conf 2>/dev/null")
    assert [line for line in test.splitlines() if line.strip() and not line.startswith(("Lines To", "==="))] == []
    assert "net.ipv4.fib_multipath_hash_policy=1" in host.file("/etc/sysctl.d/60-aisite-fabric.conf").content_string


def test_session_established_with_bfd(host):
    def up():
        peer = json.loads(host.check_output("vtysh -c 'show bgp neighbors eth0 json'")).get("eth0", {})
        return peer.get("bgpState") == "Established"

    wait(up)
    bfd = json.loads(host.check_output("vtysh -c 'show bfd peers json'"))
    assert [p["status"] for p in bfd if p.get("interface") == "eth0"] == ["up"]


def test_only_loopbacks_and_rail_subnets_cross_the_link(host, inventory_vars):
    sw = plan(host, inventory_vars)
    if sw["role"] == "leaf":
        # What the spine sends: its loopback, nothing else.
        wait(lambda: "10.250.3.2/32" in bgp_routes(host))
        assert bgp_routes(host) == {"10.250.3.2/32", "10.250.3.3/32", "10.250.16.0/29"}
        route = host.check_output("ip -4 route show 10.250.3.2")
        assert "dev eth0" in route and "proto bgp" in route
    else:
        wait(lambda: "10.250.16.0/29" in bgp_routes(host))
        # The podman network's own subnet on eth0 is connected here and never advertised.
        assert bgp_routes(host) == {"10.250.3.2/32", "10.250.3.3/32", "10.250.16.0/29"}


def test_loopback_and_rail_bridge(host, inventory_vars):
    sw = plan(host, inventory_vars)
    assert sw["loopback"] in host.check_output("ip -4 -o addr show dev lo")
    if sw["role"] == "leaf":
        assert "10.250.16.1/29" in host.check_output("ip -o addr show dev br-rail0")
        assert "mtu 9216" in host.check_output("ip -o link show dev br-rail0")
