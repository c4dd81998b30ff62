#!/usr/bin/env bash
# The project's checks and tests: linters first (fast), then pytest. Exits non-zero on the first failing step.
# AISITE_TEST_PART picks a part: `all` (the default), `unit` (the linters, molecule and every test file but the lab
# integration tests) or `lab` (the lab integration tests alone); CI runs the unit part beside `make lab` and the lab
# part after it (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
LAB_TESTS=tests/lab
part="${AISITE_TEST_PART:-all}"
case "$part" in
  all) pytest_args=() ;;
  unit) pytest_args=(--ignore="$LAB_TESTS") ;;
  lab) pytest_args=("$LAB_TESTS") ;;
  *) echo "AISITE_TEST_PART: '$part' is not one of all, unit, lab" >&2; exit 2 ;;
esac

# Each step says when it starts (seconds since the first), so a slow CI run shows where its time went.
step() { echo; echo "== $* (at ${SECONDS} s)"; }
if [ "$part" = lab ]; then
  step "pytest: the lab integration tests"
  pytest -n "${PYTEST_WORKERS:-1}" --dist loadfile --durations=60 "${pytest_args[@]}" "$@"
  exit
fi
step "ruff";          ruff check .; ruff format --check .
step "mypy (strict)"; mypy
step "yamllint";      yamllint -s .
# aisite.site, the repository's top: its playbooks and roles (aisite.roots.COLLECTION_PARTS).
step "ansible-lint";  ANSIBLE_CONFIG="$PWD/ansible.cfg" ansible-lint --profile production --offline -q playbooks roles
# Molecule runs beside pytest, one scenario at a time: pytest's lab worker mostly waits on the lab and its other
# worker runs out of files long before (a fresh-clone CI run here: molecule then pytest took 1,358 + 2,576 s, side
# by side 3,396 s, the lab file slowed by the load). Each scenario's verdict is printed as it ends; the whole
# molecule log after pytest. Only the scenarios whose inputs changed since they last passed run (and the stalest
# pass again): scripts/molecule_record.py; AISITE_MOLECULE_ALL=1 runs all 20.
mol_pid=""
mol_log="$(mktemp)"
trap 'rm -f "$mol_log"' EXIT
if [ "$(id -u)" -eq 0 ]; then
  step "molecule, beside pytest (${AISITE_MOLECULE_JOBS:-1} scenario at a time)"
  ( set -o pipefail
    AISITE_MOLECULE_CHANGED_ONLY=1 AISITE_MOLECULE_JOBS="${AISITE_MOLECULE_JOBS:-1}" bash scripts/molecule.sh 2>&1 | tee "$mol_log" \
      | grep --line-buffered '^== molecule' ) &
  mol_pid=$!
else
  echo; echo "== molecule: skipped: it needs root for podman (run as root, as CI does)"
fi
# loadfile: a test file stays on one worker, and tests/lab/ is one unit (tests/conftest.py): its files share one
# lab, in order.
step "pytest"
pytest_rc=0
pytest -n "${PYTEST_WORKERS:-2}" --dist loadfile --durations=60 "${pytest_args[@]}" "$@" || pytest_rc=$?
mol_rc=0
if [ -n "$mol_pid" ]; then
  echo; echo "== pytest ended with ${pytest_rc} (at ${SECONDS} s); waiting for molecule"
  wait "$mol_pid" || mol_rc=$?
  step "molecule's whole log (it ended with ${mol_rc})"
  cat "$mol_log"
fi
echo; echo "== done (at ${SECONDS} s): pytest ${pytest_rc}, molecule ${mol_rc}"
[ "$pytest_rc" -eq 0 ] && [ "$mol_rc" -eq 0 ]
