"""The out-of-band helpers that need no BMC: ipmitool output parsing (the bmc role's filter), the IPMI presence
probe against a responder on loopback, how discovery sorts what answered, and the refusal to probe a range this
machine does not sit on. The BMCs themselves are exercised in tests/lab/."""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aisite import oob
from aisite.drivers import bmc
from aisite.drivers.bmcs import ipmi, redfish
from aisite.playbooks import PLUGINS
from tests.conftest import run_cli


def test_ipmitool_fields_reads_name_value_lines() -> None:
    spec = importlib.util.spec_from_file_location("ipmitool", PLUGINS / "filter" / "ipmitool.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = (
        "Device ID                 : 32\n"
        "Firmware Revision         : 9.08\n"
        "Additional Device Support :\n"
        "    Sensor Device\n"
        " Product Serial        : SN123 : with colon\n"
        "Firmware Revision         : 1.00\n"
    )
    assert module.ipmitool_fields(text) == {
        "Device ID": "32",
        "Firmware Revision": "9.08",
        "Product Serial": "SN123 : with colon",
    }


@pytest.fixture
def responder() -> Iterator[int]:
    """A UDP port on loopback that answers like a BMC's RMCP/IPMI port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(2)

    def serve() -> None:
        try:
            data, peer = sock.recvfrom(512)
            if data[:4] == b"\x06\x00\xff\x07":
                sock.sendto(b"\x06\x00\xff\x07" + b"\x00" * 20, peer)
        except OSError:
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield sock.getsockname()[1]
    thread.join(timeout=3)
    sock.close()


def test_ipmi_probe_tells_a_bmc_from_silence(responder: int) -> None:
    assert ipmi.answers("127.0.0.1", responder, timeout=1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as quiet:
        quiet.bind(("127.0.0.1", 0))
        assert not ipmi.answers("127.0.0.1", quiet.getsockname()[1], timeout=0.2)


def test_discover_sorts_declared_missing_and_undeclared(monkeypatch: pytest.MonkeyPatch) -> None:
    answering = {"127.0.0.2": "redfish", "127.0.0.4": "ipmi"}
    seen: list[str] = []

    def fake_probe(address: str, node: str | None, target_for: Any, protocols: Any, timeout: float) -> oob.Found:
        seen.append(address)
        proto = answering.get(address)
        facts = oob.Facts(proto, address, "on") if proto else None
        return oob.Found(address, proto, node, facts)

    monkeypatch.setattr(oob, "probe", fake_probe)
    declared = {"127.0.0.2": ("cp01", "redfish", 443), "127.0.0.3": ("gpu01", "ipmi", 623)}
    found = oob.discover("127.0.0.0/29", declared, lambda a, p: oob.Target(p, a, 1, "u", "p"))
    assert sorted(seen) == [f"127.0.0.{i}" for i in range(2, 7)]  # every host but the gateway
    assert [(f.node, f.address) for f in found.declared] == [("cp01", "127.0.0.2")]
    assert [(f.node, f.address) for f in found.missing] == [("gpu01", "127.0.0.3")]
    assert [(f.address, f.protocol) for f in found.undeclared] == [("127.0.0.4", "ipmi")]
    assert found.to_dict()["undeclared"][0]["facts"]["power"] == "on"


def test_discover_refuses_a_range_not_on_a_local_link() -> None:
    """dc1's out-of-band range is not on this machine: nothing is sent there (only `ip route get` is asked)."""
    # The secret is checked first (exit 2, nothing probed), then the route.
    assert run_cli("oob", "discover", "dc1").returncode == 2
    r = run_cli("oob", "discover", "dc1", env={"AISITE_DC1_BMC_PASSWORD": "dc1-secret-x"})
    assert r.returncode == 1, r.stderr
    assert "site.networks.oob: 10.10.0.0/24 is reached" in r.stderr and "--via-gateway" in r.stderr


def test_credentials_go_only_to_declared_bmcs_or_a_range_the_operator_names() -> None:
    import ipaddress

    declared = {"10.251.0.11": ("gpu01", "redfish", 443)}
    assert oob.may_send_credentials("10.251.0.11", declared)
    assert not oob.may_send_credentials("10.251.0.200", declared)
    probe = ipaddress.IPv4Network("10.251.0.192/26")
    assert oob.may_send_credentials("10.251.0.200", declared, probe)
    assert not oob.may_send_credentials("10.251.0.12", declared, probe)


def test_an_undeclared_server_sees_a_connection_and_no_credentials() -> None:
    """A rogue 'BMC' on loopback: discovery sees it answer and sends it nothing (no request, no password)."""
    received: list[bytes] = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(3)

    def serve() -> None:
        try:
            while True:
                conn, _ = server.accept()
                conn.settimeout(1)
                with contextlib.suppress(OSError):
                    received.append(conn.recv(4096))
                conn.close()
        except OSError:
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    port = server.getsockname()[1]
    asked: list[str] = []

    def target_for(address: str, protocol: str) -> oob.Target | None:
        asked.append(address)
        return oob.Target(protocol, address, port, "admin", "s3cret") if oob.may_send_credentials(address, {}) else None

    found = oob.probe("127.0.0.1", None, target_for, [("redfish", port)], 1.0)
    server.close()
    thread.join(timeout=5)
    assert found.protocol == "redfish" and found.facts is None and found.error == oob.NO_CREDENTIALS
    assert asked == ["127.0.0.1"] and b"s3cret" not in b"".join(received) and not any(received)


def test_a_bmcs_words_are_data() -> None:
    assert bmc.mac("AA-BB-CC-DD-EE-FF") == "aa:bb:cc:dd:ee:ff"
    assert bmc.mac("aa:bb:cc:dd:ee:ff\n@cert-authority *") is None and bmc.mac(5) is None


def test_a_bmc_answer_nothing_expects_is_that_bmcs_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 401 with a body sushy cannot read, or any other surprise, is the address's error (printable, bounded),
    never a traceback that stops discovery."""

    def surprise(target: oob.Target) -> oob.Facts:
        raise ValueError("\x1b]52;c;cHduZWQ=\x07[/x] unexpected body " + "x" * 5000)

    monkeypatch.setattr(oob, "facts", surprise)
    monkeypatch.setattr(oob, "answers", lambda *a, **k: True)
    found = oob.probe("127.0.0.1", "gpu01", lambda a, p: oob.Target(p, a, 443, "u", "p"), [("redfish", 443)], 0.1)
    assert found.protocol == "redfish" and found.facts is None and found.error
    assert "\x1b" not in found.error and len(found.error) <= 300 and found.error.startswith("ValueError: ")


def test_a_bmc_answering_json_nested_deep_is_that_bmcs_error(tmp_path: Path) -> None:
    """Issue 64: sushy parses a BMC's answer with json, whose recursion a document nested 5,000 levels overflows
    (RecursionError, past every handler of a BMC's errors). Every answer is now read by the bounded reader first:
    a loopback 'BMC' (https, self-signed) answering its service root that way is that BMC's BmcError."""
    import ssl
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from aisite.lab.firmware import self_signed

    deep = ('{"a":' * 5000 + "1" + "}" * 5000).encode()

    class Bmc(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(deep)))
            self.end_headers()
            self.wfile.write(deep)

    crt, key = self_signed(tmp_path, "127.0.0.1")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(crt, key)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Bmc)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        t = oob.Target("redfish", "127.0.0.1", server.server_address[1], "u", "p", tls_verify=False, timeout=5)
        with pytest.raises(oob.BmcError, match="nested 5000 levels, deeper than 64"):
            redfish.managed_system(t)
    finally:
        server.shutdown()
        server.server_close()
