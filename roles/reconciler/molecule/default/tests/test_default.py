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
    for line in ("NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes", "UMask=0077"):
        assert line in full.splitlines(), line
    # systemd's own rating of the sandbox (9.6 UNSAFE without it).
    r = host.run("cd /etc/systemd/system && systemd-analyze security --offline=true aisite-reconcile@molecule.service")
    level = float(r.stdout.rsplit("Overall exposure level for", 1)[1].split(":")[1].split()[0])
    assert level <= 3.0, r.stdout[-400:]
    secrets = host.file("/etc/aisite/reconcile-molecule.secrets")
    assert secrets.exists and secrets.mode == 0o600 and secrets.user == "root"
    env = host.file("/etc/aisite/reconcile-molecule.env").content_string
    assert "AISITE_RECONCILE_REPO=/srv/site.git" in env
    assert "AISITE_RECONCILE_SIGNERS=--allowed-signers /etc/aisite/allowed_signers-molecule" in env
    # The automatic promotions' commits are signed with the operators' key, which the unit passes on.
    assert "AISITE_RECONCILE_SIGNING=--signing-key /etc/aisite/promotion-molecule" in env
    exec_start = full.split("ExecStart=", 1)[1].splitlines()[0]
    assert exec_start.endswith("$AISITE_RECONCILE_SIGNERS $AISITE_RECONCILE_SIGNING"), exec_start
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


def test_only_the_verified_signed_tip_was_installed(host):
    assert host.check_output("git -C /opt/aisite log -1 --format=%s") == "Signed for the reconciler"
    assert host.file("/opt/aisite.git").is_directory  # fetched bare: nothing of it ran before the check


def test_the_verifier_refuses_an_unsigned_tip_and_a_rewind(host):
    """The role's verifier, on copies of the mirror: an unsigned commit on top, then the branch moved back."""
    installed = host.check_output("git -C /opt/aisite rev-parse HEAD")
    verify = "/etc/aisite/aisite-verify-commit /tmp/t.git main /etc/aisite/allowed_signers-molecule " + installed
    host.run("rm -rf /tmp/t.git && git clone -q --bare /opt/aisite.git /tmp/t.git")
    assert host.check_output(verify) == installed  # the installed, signed tip itself passes
    unsigned = host.check_output(
        "git --git-dir=/tmp/t.git -c user.name=x -c user.email=x@y commit-tree 'main^{tree}' -p main -m unsigned"
    )
    host.run_test(f"git --git-dir=/tmp/t.git update-ref refs/heads/main {unsigned}")
    r = host.run(verify)
    assert r.rc == 1 and "is not signed" in r.stderr and r.stdout == "", r.stderr
    host.run_test("git --git-dir=/tmp/t.git update-ref refs/heads/main main~1~1")
    r = host.run(verify.replace(" /etc/aisite/allowed_signers-molecule", " ''"))
    assert r.rc == 1 and "does not descend from the installed" in r.stderr, r.stderr
