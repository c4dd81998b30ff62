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
for role in "${roles[@]}"; do
  echo "== molecule: $role"
  # An instance an interrupted run left (ours, by name), even one podman reads as running at a pid that is gone:
  # it cannot kill that one, but records it stopped, so a second rm removes it.
  podman rm -f -t 0 "aisite-molecule-$role" >/dev/null 2>&1 || podman rm -f -t 0 "aisite-molecule-$role" >/dev/null 2>&1 || true
  (cd "roles/$role" && AISITE_MOLECULE_INSTANCE="aisite-molecule-$role" molecule test)
done
