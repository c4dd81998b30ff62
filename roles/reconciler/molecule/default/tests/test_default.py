"""The reconciler's units on a lone node container: written, accepted by systemd-analyze, timers enabled and
waiting, and the settings that reach the command."""

UNITS = ("aisite-reconcile", "aisite-reconcile-full")


def test_units_pass_systemd_analyze(host):
    for unit in UNITS:
        for kind in ("service", "timer"):
            path = f"/etc/systemd/system/{unit}@.{kind}"
            assert host.file(path).exists and host.file(path).mode == 0o644
    # Instances of the templates, as systemd would load them (an unknown key or a missing binary fails).
    r = host.run(
        "cd /etc/systemd/system && systemd-analyze verify aisite-reconcile@molecule.service "
        "aisite-reconcile-full@molecule.service aisite-reconcile@molecule.timer aisite-reconcile-full@molecule.timer"
    )
    assert r.rc == 0, r.stderr


def test_timers_are_enabled_and_waiting(host):
    for unit in UNITS:
        timer = host.service(f"{unit}@molecule.timer")
        assert timer.is_enabled and timer.is_running
    seconds = host.run("systemctl show -p TimersMonotonic aisite-reconcile-full@molecule.timer").stdout
    assert "3600" in seconds or "1h" in seconds, seconds


def test_the_command_and_its_settings(host):
    full = host.file("/etc/systemd/system/aisite-reconcile-full@.service").content_string
    assert "-m aisite reconcile --repo ${AISITE_RECONCILE_REPO}" in full and "--once --wait --full" in full
    assert "KillMode=control-group" in full
    env = host.file("/etc/aisite/reconcile-molecule.env").content_string
    assert "AISITE_RECONCILE_REPO=ssh://git@git.example.com/infra/site.git" in env
    assert "AISITE_RECONCILE_SIGNERS=--allowed-signers /etc/aisite/allowed_signers-molecule" in env
    signers = host.file("/etc/aisite/allowed_signers-molecule")
    assert signers.content_string.splitlines()[-1].startswith("admin@example.com ssh-ed25519 AAAAC3")
