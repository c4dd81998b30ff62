#!/usr/bin/env bash
# Runs `molecule test` for every role with a scenario (or the roles named), on the lab's node image.
# Needs root (podman); the image is built on first use and cached, like the lab's.
# AISITE_MOLECULE_JOBS scenarios run at once (default 2: each is mostly waiting on podman and its instance, and
# every one has instances, networks and a molecule cache of its own); each one's output is printed whole when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
export CONTAINERS_CONF="$PWD/aisite/lab/containers.conf"
# The roles of the aisite.site collection, the repository's top (aisite.roots.COLLECTION_PARTS).
ROLES=roles
AISITE_NODE_IMAGE="$(aisite lab image node)"
AISITE_FRR_IMAGE="$(aisite lab image frr)"
export AISITE_NODE_IMAGE AISITE_FRR_IMAGE
jobs_max="${AISITE_MOLECULE_JOBS:-2}"
[[ "$jobs_max" =~ ^[1-9][0-9]?$ ]] || { echo "AISITE_MOLECULE_JOBS: a number from 1 to 99, not '$jobs_max'" >&2; exit 2; }
# Each run is ROLE or ROLE/SCENARIO (default when not said). kubernetes/install is not run: it installs from
# pkgs.k8s.io and runs kubeadm init in a privileged container (its README says where it can run).
roles=("$@")
if [ ${#roles[@]} -eq 0 ]; then
  # The longest first (seconds of a CI run), so the last to start are short and the jobs end together.
  for role in kubernetes/upgrade ceph reconciler pull boot_server etcd_backup common fabric_frr roce_host kubernetes_certs storage; do
    [ -d "$ROLES/${role%%/*}/molecule/$([[ $role == */* ]] && echo "${role#*/}" || echo default)" ] && roles+=("$role")
  done
  for d in "$ROLES"/*/molecule/*/; do
    d="${d%/}"
    role="$(basename "$(dirname "$(dirname "$d")")")"
    scenario="$(basename "$d")"
    [ "$scenario" = default ] || role="$role/$scenario"
    [ "$role" = kubernetes/install ] && continue
    [[ " ${roles[*]} " == *" $role "* ]] || roles+=("$role")
  done
fi
# `make test` runs only the scenarios whose inputs changed since they last passed (scripts/molecule_record.py says
# what a scenario's inputs are and keeps their digest in .ci/molecule-passed.json), and the stalest passes again;
# AISITE_MOLECULE_ALL=1, or naming roles, runs every one asked.
record() { .venv/bin/python scripts/molecule_record.py "$@"; }
if [ "${AISITE_MOLECULE_CHANGED_ONLY:-0}" = 1 ] && [ "${AISITE_MOLECULE_ALL:-0}" != 1 ] && [ $# -eq 0 ]; then
  changed=() unchanged=()
  for role in "${roles[@]}"; do
    if why="$(record unchanged "$role")"; then
      echo "== molecule: $role not run: $why"
      unchanged+=("$role")
    else
      changed+=("$role")
    fi
  done
  # The Debian archive moves under an unchanged role: the passes older than AISITE_MOLECULE_STALE_DAYS (14) run
  # again, AISITE_MOLECULE_REFRESH (1) of them, the oldest first.
  read -r -a stale <<<"$(record stalest "${AISITE_MOLECULE_STALE_DAYS:-14}" "${AISITE_MOLECULE_REFRESH:-1}" \
    ${unchanged[@]+"${unchanged[@]}"})"
  for role in ${stale[@]+"${stale[@]}"}; do echo "== molecule: $role runs again: its pass is the stalest on record"; done
  roles=(${changed[@]+"${changed[@]}"} ${stale[@]+"${stale[@]}"})
fi
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
scenario() {  # one `molecule test` of ROLE[/SCENARIO], its output kept to name what failed
  local role="${1%%/*}" scenario=default instance="aisite-molecule-${1//\//-}"
  [[ "$1" == */* ]] && scenario="${1#*/}"
  # An instance an interrupted run left (ours, by name), even one podman reads as running at a pid that is gone:
  # it cannot kill that one, but records it stopped, so a second rm removes it.
  # Its instances are named in its molecule.yml (the name plus a suffix each), or the shared base's one.
  local -a suffixes=()
  local n
  mapfile -t suffixes < <(grep -oP '^\s*- name: \$\{AISITE_MOLECULE_INSTANCE:-aisite-molecule\}\K\S*' \
    "$ROLES/$role/molecule/$scenario/molecule.yml" || true)
  [ ${#suffixes[@]} -gt 0 ] || suffixes=("")
  for n in "${suffixes[@]}"; do
    podman rm -f -t 0 "$instance$n" >/dev/null 2>&1 || podman rm -f -t 0 "$instance$n" >/dev/null 2>&1 || true
  done
  (cd "$ROLES/$role" && AISITE_MOLECULE_INSTANCE="$instance" molecule test -s "$scenario") >"$logs/${1//\//-}.log" 2>&1
}
timed() {  # scenario, then its seconds in $logs/ROLE.s (read when it ends: the jobs print in the order they end)
  local start=$SECONDS rc=0
  scenario "$1" || rc=$?
  echo $((SECONDS - start)) >"$logs/${1//\//-}.s"
  return "$rc"
}
report() {  # ROLE RC: its whole log, then the verdict; a failure's step and assertions where a CI log's tail shows it
  local f="$logs/${1//\//-}"
  cat "$f.log"
  if [ "$2" -eq 0 ]; then
    echo "== molecule: $1 passed in $(cat "$f.s") s"
    return 0
  fi
  echo "== molecule: $1 FAILED in $(cat "$f.s") s; what failed:"
  sed 's/\x1b\[[0-9;]*m//g' "$f.log" | grep -E "FAILED|Error|assert|fatal:|Executed: Failed" | head -40 || true
  return 1
}
echo "== molecule: ${#roles[@]} roles, $jobs_max at a time: ${roles[*]}"
declare -A running=()  # pid -> role
failed=()
next=0
while [ "$next" -lt ${#roles[@]} ] || [ ${#running[@]} -gt 0 ]; do
  while [ "$next" -lt ${#roles[@]} ] && [ ${#running[@]} -lt "$jobs_max" ]; do
    role="${roles[$next]}"
    next=$((next + 1))
    echo "== molecule: $role started"
    timed "$role" &
    running[$!]="$role"
  done
  rc=0
  wait -n -p pid "${!running[@]}" || rc=$?
  role="${running[$pid]}"
  unset "running[$pid]"
  if report "$role" "$rc"; then
    record passed "$role" "$(cat "$logs/${role//\//-}.s")"
  else
    failed+=("$role")
  fi
done
# A role that failed runs once more, alone (a loaded machine is the usual cause): one that passes then is reported
# flaky (its failure above stays in the log); one that fails again fails the run.
flaky=()
for role in "${failed[@]}"; do
  echo "== molecule: $role once more, alone"
  rc=0
  timed "$role" || rc=$?
  if report "$role" "$rc"; then
    echo "== molecule: $role FLAKY: failed, then passed on a second run (see the failure above)"
    flaky+=("$role")
  else
    echo "== molecule: $role FAILED twice"
    exit 1
  fi
done
[ ${#flaky[@]} -eq 0 ] || echo "== molecule: flaky (failed once, passed once): ${flaky[*]}"
