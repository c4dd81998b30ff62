"""What file_state read on the host matches the files as they are, and a file already as written is skipped.

(testinfra's ansible backend strips command output, so contents are compared through sha1sum on the host.)"""

from __future__ import annotations

import hashlib
import json


def sha1(host, path):  # type: ignore[no-untyped-def]
    return host.check_output(f"sha1sum {path}").split()[0]


def test_states_match_the_files(host) -> None:  # type: ignore[no-untyped-def]
    state = json.loads(host.file("/root/file-state.json").content_string)
    assert state["read"]["/etc/aisite-absent"] == "absent"
    written = host.file("/etc/aisite-file-state")
    assert written.mode == 0o640 and written.user == "root"
    assert sha1(host, "/etc/aisite-file-state") == hashlib.sha1(b"written once\n").hexdigest()
    assert state["read"]["/etc/aisite-file-state"] == "640:root:root:" + hashlib.sha1(b"written once\n").hexdigest()
    mode = host.file("/etc/hostname").mode
    assert state["read"]["/etc/hostname"] == f"{mode:o}:root:root:{sha1(host, '/etc/hostname')}"


def test_unit_states_are_what_systemctl_says(host) -> None:  # type: ignore[no-untyped-def]
    units = json.loads(host.file("/root/file-state.json").content_string)["units"]
    journald = host.service("systemd-journald")
    assert journald.is_running
    enabled = host.run("systemctl is-enabled systemd-journald.service").stdout.strip()
    assert units["systemd-journald.service"] == f"active:{enabled}"
    assert units["aisite-absent.service"] == "inactive:"


def test_the_second_converge_skipped_the_file_it_had_written(host) -> None:  # type: ignore[no-untyped-def]
    # This file is from the idempotence run: the copy found the file as it would write it and did not run.
    assert json.loads(host.file("/root/file-state.json").content_string)["copy_skipped"] is True
