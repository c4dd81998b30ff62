"""node_health on a lone node container: the timer runs the check, which writes what it found (the rail the node
was told of and does not have) to status.json and the textfile collector's metrics."""

import hashlib
import json
import time
from pathlib import Path

# The role's files/ links to the project's aisite/health: the sources the node must hold, byte for byte.
HEALTH = Path(__file__).resolve().parents[3] / "files"


def _status(host):
    for _ in range(30):
        f = host.file("/var/lib/aisite/health/status.json")
        if f.exists:
            return json.loads(f.content_string)
        time.sleep(1)
    raise AssertionError("no status.json after 30 s")


def test_the_check_is_the_projects_source_and_each_file_and_directory_is_as_asked(host):
    for name in ("parse.py", "judge.py", "node.py"):
        f = host.file(f"/opt/aisite/health/{name}")
        assert f.sha256sum == hashlib.sha256((HEALTH / name).read_bytes()).hexdigest(), name
        assert (f.mode, f.user, f.group) == (0o644, "root", "root"), name
    for unit in ("aisite-health.service", "aisite-health.timer"):
        f = host.file(f"/etc/systemd/system/{unit}")
        assert (f.mode, f.user, f.group) == (0o644, "root", "root"), unit
    assert json.loads(host.file("/etc/aisite/health/expected.json").content_string)["rails"]
    for d in ("/opt/aisite/health", "/etc/aisite/health", "/var/lib/aisite/health"):
        assert host.file(d).is_directory and host.file(d).mode == 0o755, d
    # Nothing left of the writes (each goes through a temporary file beside its destination).
    assert host.run("ls -A /opt/aisite/health /etc/aisite/health | grep -c '^.aisite-'").stdout.strip() == "0"


def test_the_timer_is_enabled_and_active(host):
    timer = host.service("aisite-health.timer")
    assert timer.is_enabled and timer.is_running


def test_the_check_finds_the_missing_rail_and_says_what_it_skipped(host):
    status = _status(host)
    assert status["healthy"] is False and status["reason"] == "rail"
    assert status["problems"] == [
        {"check": "rail", "subject": "rail7", "message": "missing"},
        {"check": "imex", "subject": "node", "message": "nvidia-imex-ctl -N: nvidia-imex-ctl is not installed"},
    ]
    # A container has no kernel log, chrony cannot keep its time: said, not passed silently.
    assert any(s.startswith("xid:") for s in status["skipped"])
    assert "filesystem" in status["checked"]


def test_a_trays_rack_reaches_the_check_and_no_gpu_reports_no_clique(host):
    expected = json.loads(host.file("/etc/aisite/health/expected.json").content_string)
    assert expected["rack"] == "a08" and expected["gpus"] == 0 and expected["imex_address"] == "10.30.2.5"
    assert _status(host)["clique"] == ""


def test_the_metrics_are_there_for_node_exporter(host):
    _status(host)
    prom = host.file("/var/lib/node_exporter/textfile_collector/aisite_health.prom").content_string
    assert "aisite_health_healthy{node=" in prom and prom.split("aisite_health_healthy{")[1].split()[1] == "0"
    assert 'aisite_health_problem{check="rail",subject="rail7"} 1' in prom
    assert 'aisite_health_problem{check="imex",subject="node"} 1' in prom


def test_running_it_again_by_hand_gives_the_same_verdict(host):
    before = _status(host)
    host.run_expect([0], "systemctl start aisite-health.service")
    after = _status(host)
    assert after["problems"] == before["problems"] and after["at"] >= before["at"]
