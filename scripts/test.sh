#!/usr/bin/env bash
# The project's checks and tests: linters first (fast), then pytest. Exits non-zero on the first failing step.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"

# Each step says when it starts (seconds since the first), so a slow CI run shows where its time went.
step() { echo; echo "== $* (at ${SECONDS} s)"; }
step "ruff";          ruff check .; ruff format --check .
step "mypy (strict)"; mypy
step "yamllint";      yamllint -s .
step "ansible-lint";  ANSIBLE_CONFIG="$PWD/ansible.cfg" ansible-lint --profile production --offline -q playbooks roles
if [ "$(id -u)" -eq 0 ]; then
  step "molecule";    bash scripts/molecule.sh
else
  echo; echo "== molecule: skipped: it needs root for podman (run as root, as CI does)"
fi
# loadfile: a test file stays on one worker (the lab integration tests share one lab, in order).
step "pytest";        pytest -n "${PYTEST_WORKERS:-2}" --dist loadfile --durations=25 "$@"
echo; echo "== done (at ${SECONDS} s)"
