"""lldp on a lone node container: lldpd runs with the inventory name as its system name and port IDs that are
interface names, which is what the cabling check compares."""

import json


def test_lldpd_runs_and_is_enabled(host):
    lldpd = host.service("lldpd")
    assert lldpd.is_running and lldpd.is_enabled


def test_lldpd_announces_the_inventory_name_and_interface_names(host):
    conf = json.loads(host.check_output("lldpcli -f json show configuration"))["configuration"]["config"]
    assert conf["hostname"] == host.backend.get_hostname()
    assert conf["lldp-portid-type"] == "ifname"
    assert conf["tx-delay"] == "10"
