"""The verifier on a repository made in the container: a tip signed by an allowed key passes; unsigned, signed by
another key, or not descending from the applied commit, it is refused with the reason and prints nothing."""

from __future__ import annotations

import pytest

VERIFY = "/usr/local/sbin/aisite-verify-commit"
GIT = "git -c user.name=m -c user.email=admin@example.com"


@pytest.fixture(scope="module")
def repo(host):  # type: ignore[no-untyped-def]
    host.run_test(
        "set -e; rm -rf /tmp/cv && mkdir /tmp/cv && cd /tmp/cv"
        " && ssh-keygen -q -t ed25519 -N '' -C admin@example.com -f allowed"
        " && ssh-keygen -q -t ed25519 -N '' -C other@example.com -f other"
        " && echo \"admin@example.com $(cut -d ' ' -f1,2 allowed.pub)\" > allowed_signers"
        " && git init -q -b main src && git init -q --bare site.git"
        f" && {GIT} -C src -c gpg.format=ssh -c user.signingkey=/tmp/cv/allowed commit -q --allow-empty -S -m one"
        f" && {GIT} -C src -c gpg.format=ssh -c user.signingkey=/tmp/cv/allowed commit -q --allow-empty -S -m two"
        " && git -C src push -q /tmp/cv/site.git main"
    )
    return "/tmp/cv"


def test_a_tip_signed_by_an_allowed_key_is_printed(host, repo) -> None:  # type: ignore[no-untyped-def]
    tip = host.check_output(f"git --git-dir={repo}/site.git rev-parse main")
    first = host.check_output(f"git --git-dir={repo}/site.git rev-parse main~1")
    assert host.check_output(f"{VERIFY} {repo}/site.git main {repo}/allowed_signers {first}") == tip
    assert host.check_output(f"{VERIFY} {repo}/site.git main {repo}/allowed_signers ''") == tip
    assert host.file(VERIFY).mode == 0o755


def test_unsigned_other_signer_and_rewind_are_refused(host, repo) -> None:  # type: ignore[no-untyped-def]
    tip = host.check_output(f"git --git-dir={repo}/site.git rev-parse main")
    host.run_test(f"rm -rf {repo}/t.git && git clone -q --bare {repo}/site.git {repo}/t.git")
    verify = f"{VERIFY} {repo}/t.git main {repo}/allowed_signers {tip}"
    unsigned = host.check_output(f"{GIT} --git-dir={repo}/t.git commit-tree 'main^{{tree}}' -p main -m unsigned")
    host.run_test(f"git --git-dir={repo}/t.git update-ref refs/heads/main {unsigned}")
    r = host.run(verify)
    assert r.rc == 1 and "is not signed" in r.stderr and r.stdout == "", r.stderr
    other = host.check_output(
        f"{GIT} -C {repo}/src -c gpg.format=ssh -c user.signingkey={repo}/other commit -q --allow-empty -S -m x"
        f" && git -C {repo}/src rev-parse HEAD"
    )
    host.run_test(f"git -C {repo}/src push -q -f {repo}/t.git {other}:refs/heads/main")
    r = host.run(verify)
    assert r.rc == 1 and "signature not accepted" in r.stderr and r.stdout == "", r.stderr
    host.run_test(f"git --git-dir={repo}/t.git update-ref refs/heads/main {tip}~1")
    r = host.run(f"{VERIFY} {repo}/t.git main '' {tip}")
    assert r.rc == 1 and "does not descend from the installed" in r.stderr, r.stderr


def test_a_signers_file_that_lists_no_key_accepts_nothing(host, repo) -> None:  # type: ignore[no-untyped-def]
    """An empty (or comments-only) signers file is refused, not read as 'no one to check'."""
    host.run_test(f"printf '# no one\\n\\n' > {repo}/empty_signers")
    r = host.run(f"{VERIFY} {repo}/site.git main {repo}/empty_signers ''")
    assert r.rc == 1 and "lists no key" in r.stderr and r.stdout == "", r.stderr


def test_a_first_pass_takes_only_the_floor_or_what_descends_from_it(host, repo) -> None:  # type: ignore[no-untyped-def]
    """No applied commit (a node's first pass, or its state lost): an older signed commit served at the branch is
    refused when it does not descend from the floor the controller installed."""
    tip = host.check_output(f"git --git-dir={repo}/site.git rev-parse main")
    first = host.check_output(f"git --git-dir={repo}/site.git rev-parse main~1")
    host.run_test(f"rm -rf {repo}/f.git && git clone -q --bare {repo}/site.git {repo}/f.git")
    assert host.check_output(f"{VERIFY} {repo}/f.git main {repo}/allowed_signers '' '' {first}") == tip
    assert host.check_output(f"{VERIFY} {repo}/f.git main {repo}/allowed_signers '' '' {tip}") == tip
    host.run_test(f"git --git-dir={repo}/f.git update-ref refs/heads/main {first}")
    r = host.run(f"{VERIFY} {repo}/f.git main {repo}/allowed_signers '' '' {tip}")
    assert r.rc == 1 and "does not descend from the trusted floor" in r.stderr and r.stdout == "", r.stderr
