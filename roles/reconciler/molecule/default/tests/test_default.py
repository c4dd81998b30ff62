"""The reconciler on a lone node container: this project checked out from the site repository and installed in a
virtualenv that runs it, the units written, accepted by systemd-analyze, timers enabled and waiting, and the
settings that reach the command."""

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
    assert "AISITE_RECONCILE_REPO=/srv/site.git" in env
    assert "AISITE_RECONCILE_SIGNERS=--allowed-signers /etc/aisite/allowed_signers-molecule" in env
    signers = host.file("/etc/aisite/allowed_signers-molecule")
    assert signers.content_string.splitlines()[-1].startswith("admin@example.com ssh-ed25519 AAAAC3")


def test_the_checkout_is_the_branch_of_the_site_repository(host):
    main = host.check_output("git -C /srv/site.git rev-parse main")
    assert host.check_output("git -C /opt/aisite rev-parse HEAD") == main
    assert host.run("git -C /opt/aisite status --porcelain --untracked-files=no").stdout == ""


def test_the_virtualenv_runs_aisite_with_only_its_runtime_dependencies(host):
    # validate loads a shipped stack and builds its plan: pydantic, PyYAML, rich and typer at least are there.
    r = host.run("cd /opt/aisite && .venv/bin/python -m aisite validate lab")
    assert r.rc == 0, r.stdout + r.stderr
    assert host.run("/opt/aisite/.venv/bin/python -c 'import ansible_runner, prometheus_client, pulumi'").rc == 0
    frozen = host.check_output("/opt/aisite/.venv/bin/python -m pip freeze").lower()
    for absent in ("torch==", "pytest==", "molecule=="):
        assert absent not in frozen
    # At the lock's versions (requirements.txt holds them as a constraint).
    lock = host.check_output("cat /opt/aisite/requirements.lock").lower()
    assert "pydantic==2.14.3" in lock and "pydantic==2.14.3" in frozen
