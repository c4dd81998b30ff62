"""The boot server as a node and `aisite provision` meet it: dnsmasq and the HTTP service running from the plan's
settings; an unarmed MAC told to boot from disk; an armed one given the installer with a one-time token, its files
behind that token, its report recorded with the host keys; the spent token refused afterwards."""

from __future__ import annotations

import json
import re
import shlex
import time

URL = "http://127.0.0.1:8080"
MAC = "02-00-00-00-00-10"
CONTROLLER_TOKEN = "molecule-controller-token"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIF7V9ITCcLwZIDrBJdhvD/Yx38T197ysAO8J3IguOvhK"


# The node image has Python, not curl: requests are made with urllib inside the container.
_CLIENT = """
import sys, urllib.request, urllib.error
method, url = sys.argv[1], sys.argv[2]
data = sys.stdin.buffer.read() if method == "POST" else None
request = urllib.request.Request(url, data=data, method=method)
if len(sys.argv) > 3:
    request.add_header("Authorization", "Bearer " + sys.argv[3])
try:
    with urllib.request.urlopen(request, timeout=10) as r:
        code, body = r.status, r.read()
except urllib.error.HTTPError as exc:
    code, body = exc.code, exc.read()
sys.stdout.write(f"{code}\\n")
sys.stdout.flush()
sys.stdout.buffer.write(body)
"""


def _request(host, method: str, path: str, body: str = "") -> tuple[int, bytes]:  # type: ignore[no-untyped-def]
    host.run("cat > /tmp/client.py <<'EOF'\n" + _CLIENT + "\nEOF")
    feed = f"printf '%b' {shlex.quote(body.replace(chr(10), chr(92) + 'n'))}" if body else "true"
    # Reports and versions are the controller's: the tests present its token (converge gives the role its digest).
    token = f" {CONTROLLER_TOKEN}" if path.startswith(("reports/", "versions/")) else ""
    cmd = f"{feed} | python3 /tmp/client.py {method} '{URL}/{path}'{token}"
    out = host.run(cmd)
    code, _, rest = out.stdout.partition("\n")
    return int(code), rest.encode()


def get(host, path: str) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    code, body = _request(host, "GET", path)
    return code, body.decode()


def post(host, path: str, body: str) -> int:  # type: ignore[no-untyped-def]
    return _request(host, "POST", path, body)[0]


def test_services_run_from_the_plans_settings(host) -> None:  # type: ignore[no-untyped-def]
    for unit in ("aisite-dnsmasq.service", "aisite-boot-http.service"):
        service = host.service(unit)
        assert service.is_running and service.is_enabled, unit
    conf = host.file("/etc/aisite-boot/dnsmasq.conf").content_string
    assert "dhcp-host=02:00:00:00:00:10,10.99.1.10,gpu01\n" in conf
    assert "dhcp-boot=tag:ipxe,http://127.0.0.1:8080/boot.ipxe\n" in conf
    assert "port=0\n" in conf  # no DNS: the lab's stack does not name the boot server as a DNS server here
    for name in ("undionly.kpxe", "ipxe.efi"):
        assert host.file(f"/srv/aisite-boot/tftp/{name}").size > 10_000
    code, body = get(host, "boot.ipxe")
    assert code == 200 and "chain http://127.0.0.1:8080/boot/${mac:hexhyp}" in body


def test_an_unarmed_node_boots_from_disk(host) -> None:  # type: ignore[no-untyped-def]
    code, body = get(host, f"boot/{MAC}")
    assert code == 200 and body.splitlines()[-1] == "exit"
    assert get(host, "boot/../../etc/passwd")[0] == 404


def test_an_armed_node_installs_once_with_its_token(host) -> None:  # type: ignore[no-untyped-def]
    expires = time.time() + 600
    host.run(f"echo '{json.dumps({'node': 'gpu01', 'expires': expires})}' > /var/lib/aisite-boot/armed/{MAC}.json")
    code, script = get(host, f"boot/{MAC}")
    assert code == 200 and script.startswith("#!ipxe")
    token = re.search(r"/n/([A-Za-z0-9_-]+)/vmlinuz", script)
    assert token, script
    assert "aisite.disk=/dev/nvme0n1" in script and "aisite.mode=uefi" in script and "BOOTIF=01-" + MAC in script
    t = token.group(1)
    assert get(host, f"n/{t}/vmlinuz") == (200, "vmlinuz of the molecule image\n")
    code, table = get(host, f"n/{t}/partitions.sfdisk")
    assert table.splitlines() == [
        "label: gpt",
        "size=512MiB, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B",
        "type=0FC63DAF-8483-4772-8E79-3D69D8477DE4",
    ]
    assert get(host, f"n/{t}/filesystems")[1] == "2 ext4 /\n1 vfat /boot/efi\n"
    listing = host.check_output(f"python3 /tmp/client.py GET {URL}/n/{t}/node.tar </dev/null | tail -c +5 | tar -tvf -")
    assert "etc/systemd/network/10-aisite-mgmt0.link" in listing and "home/alice/.ssh/authorized_keys" in listing
    assert re.search(r"-rw------- root/root .* root/\.ssh/authorized_keys", listing)
    # The token never reaches the log, nor the state (only its digest).
    assert t not in host.check_output("journalctl -u aisite-boot-http --no-pager")
    assert t not in host.check_output("cat /var/lib/aisite-boot/tokens/*")

    assert post(host, f"n/{t}/report", f"status installed\nstep done\nhostkey {KEY}\n") == 200
    report = json.loads(get(host, "reports/gpu01")[1])
    assert report["status"] == "installed" and report["host_keys"] == [KEY]
    assert [e["event"] for e in report["events"]] == ["ipxe", "vmlinuz", "installed"]
    version = json.loads(get(host, "versions/gpu01")[1])["version"]
    assert report["version"] == version
    for path in ("reports/gpu01", "versions/gpu01"):  # without the controller's token: nothing
        assert host.check_output(f"python3 /tmp/client.py GET {URL}/{path} </dev/null | head -1") == "401"

    # Spent: the token is refused, and the node is no longer armed.
    assert get(host, f"n/{t}/vmlinuz")[0] == 403
    assert post(host, f"n/{t}/report", "status installed\n") == 403
    assert get(host, f"boot/{MAC}")[1].splitlines()[-1] == "exit"
