"""What file_state read matches the files as they are; guarded_file skips a file already as written, and puts back a
mode and an owner changed by hand on a file whose content is right (side_effect). Contents are compared through
sha1sum on the host (byte for byte, whatever the transport does to command output)."""

from __future__ import annotations

import hashlib
import json


def sha1(host, path):  # type: ignore[no-untyped-def]
    return host.check_output(f"sha1sum {path}").split()[0]


def record(host, name="file-state"):  # type: ignore[no-untyped-def]
    return json.loads(host.file(f"/root/{name}.json").content_string)


def test_states_match_the_files(host) -> None:  # type: ignore[no-untyped-def]
    state = record(host)
    assert state["read"]["/etc/aisite-absent"] == "absent"
    written = host.file("/etc/aisite-file-state")
    assert written.mode == 0o640 and written.user == "root"
    assert sha1(host, "/etc/aisite-file-state") == hashlib.sha1(b"written once\n").hexdigest()
    assert state["read"]["/etc/aisite-file-state"] == "640:root:root:" + hashlib.sha1(b"written once\n").hexdigest()
    mode = host.file("/etc/hostname").mode
    assert state["read"]["/etc/hostname"] == f"{mode:o}:root:root:{sha1(host, '/etc/hostname')}"


def test_the_template_is_rendered_with_its_mode(host) -> None:  # type: ignore[no-untyped-def]
    f = host.file("/etc/aisite-file-state-template")
    assert f.mode == 0o600 and f.user == "root" and f.group == "root"
    assert f"host = {host.backend.get_hostname()}" in f.content_string
    assert "Ansible managed" in f.content_string


def test_unit_states_are_what_systemctl_says(host) -> None:  # type: ignore[no-untyped-def]
    units = record(host)["units"]
    journald = host.service("systemd-journald")
    assert journald.is_running
    enabled = host.run("systemctl is-enabled systemd-journald.service").stdout.strip()
    assert units["systemd-journald.service"] == f"active:{enabled}"
    assert units["aisite-absent.service"] == "inactive:"


def test_the_second_converge_left_the_files_it_had_written(host) -> None:  # type: ignore[no-untyped-def]
    # From the idempotence run: both files were found as they would be written, and nothing ran.
    state = record(host)
    assert state["content_changed"] is False and state["template_changed"] is False


def test_a_mode_and_an_owner_changed_by_hand_are_put_back(host) -> None:  # type: ignore[no-untyped-def]
    # side_effect: chmod 0666 on one file, chown nobody on the other, contents untouched; then a converge.
    after = record(host, "file-state-after-chmod")
    assert after["content_changed"] is True and after["template_changed"] is True
    assert host.file("/etc/aisite-file-state").mode == 0o640
    assert host.file("/etc/aisite-file-state-template").user == "root"
    assert after["read"]["/etc/aisite-file-state"].startswith("640:root:root:")
    assert after["read"]["/etc/aisite-file-state-template"].startswith("600:root:root:")
