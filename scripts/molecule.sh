#!/usr/bin/env bash
# Runs `molecule test` for every role with a scenario (or the roles named), on the lab's node image.
# Needs root (podman); the image is built on first use and cached, like the lab's.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
export CONTAINERS_CONF="$PWD/aisite/lab/containers.conf"
AISITE_NODE_IMAGE="$(aisite lab image node)"
AISITE_FRR_IMAGE="$(aisite lab image frr)"
export AISITE_NODE_IMAGE AISITE_FRR_IMAGE
roles=("$@")
if [ ${#roles[@]} -eq 0 ]; then
  for d in roles/*/molecule/default; do roles+=("$(basename "$(dirname "$(dirname "$d")")")"); done
fi
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
scenario() {  # one `molecule test` of a role, its output kept to name what failed
  # An instance an interrupted run left (ours, by name), even one podman reads as running at a pid that is gone:
  # it cannot kill that one, but records it stopped, so a second rm removes it.
  podman rm -f -t 0 "aisite-molecule-$1" >/dev/null 2>&1 || podman rm -f -t 0 "aisite-molecule-$1" >/dev/null 2>&1 || true
  (cd "roles/$1" && AISITE_MOLECULE_INSTANCE="aisite-molecule-$1" molecule test) 2>&1 | tee "$logs/$1.log"
}
flaky=()
for role in "${roles[@]}"; do
  echo "== molecule: $role"
  start=$SECONDS
  if scenario "$role"; then
    echo "== molecule: $role passed in $((SECONDS - start)) s"
    continue
  fi
  # What failed, where a CI log's tail shows it: the failing step and assertions, then one more run. A role that
  # passes the second time is reported flaky (the failure above stays in the log); one that fails again fails.
  echo "== molecule: $role FAILED in $((SECONDS - start)) s; what failed:"
  sed 's/\x1b\[[0-9;]*m//g' "$logs/$role.log" | grep -E "FAILED|Error|assert|fatal:|Executed: Failed" | head -40 || true
  echo "== molecule: $role once more"
  if scenario "$role"; then
    echo "== molecule: $role FLAKY: failed, then passed on a second run (see the failure above)"
    flaky+=("$role")
  else
    echo "== molecule: $role FAILED twice"
    exit 1
  fi
done
[ ${#flaky[@]} -eq 0 ] || echo "== molecule: flaky (failed once, passed once): ${flaky[*]}"
