#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (never in CI): record the GPU tools' own output for tests/fixtures/health, run the
# node health check (aisite/health/node.py, as a node's timer runs it) against the real tools, and run the payloads
# on the GPU, printing their result lines. Writes into $OUT (or the directory given); `health` as the second
# argument stops after the node's check (no payloads).
#
#     bash benchmarks/gpu_device_check.sh /tmp/aisite-gpu [health]
set -u
cd "$(dirname "$0")/.."
out="${1:-${OUT:-/tmp/aisite-gpu}}"
mkdir -p "$out"
work="$(mktemp -d)"
py="${PYTHON:-python3}"

echo "== the machine"
{
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id,ecc.mode.current --format=csv
  echo "kernel $(uname -r)"
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
} 2>&1 | tee "$out/env.txt"

echo "== the tools the health check reads (exit status after each)"
nvidia-smi -q >"$out/nvidia-smi-q.txt" 2>&1
echo "nvidia-smi -q: $?"
nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT >"$out/nvidia-smi-q-ecc.txt" 2>&1
echo "nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT: $?"
nvidia-smi nvlink --status >"$out/nvidia-smi-nvlink-status.txt" 2>&1
echo "nvidia-smi nvlink --status: $?"

nvidia-smi --query-gpu=driver_version,fabric.state,fabric.status --format=csv >"$out/nvidia-smi-fabric.csv" 2>&1
echo "nvidia-smi --query-gpu=driver_version,fabric.state,fabric.status: $?"

echo "== the node health check against them"
gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')"
branch="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 | cut -d. -f1)"
# As the plan has it (the loaded branch), then as a plan of another branch (a rollout whose reboot left the old
# module): the second must find gpu-driver. nvlink true: the fabric registration is judged (or said skipped).
for want in "$branch" "$((branch - 10))"; do
  printf '{"node": "gpu-device", "gpus": %s, "nvlink": true, "driver_branch": %s, "rails": []}\n' \
    "$gpus" "$want" >"$work/expected.json"
  TIMEFORMAT="node.py: %R s"
  time "$py" aisite/health/node.py --expected "$work/expected.json" --out "$work/health" \
    --textfile "$work/health" --window 600
  cp "$work/health/status.json" "$out/health-status-r$want.json"
  cp "$work/health/aisite_health.prom" "$out/health-r$want.prom"
  "$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); print("R"+sys.argv[2], "healthy" if d["healthy"] else "unhealthy", [(p["check"], p["message"]) for p in d["problems"]], "checked", d["checked"], "skipped", d["skipped"])' "$out/health-status-r$want.json" "$want"
done
[ "${2:-}" = health ] && { rm -rf "$work"; exit 0; }

echo "== the payloads on the GPU (one result line each)"
(
  cd aisite/payloads || exit 1
  for mode in train infer; do
    timeout 180 "$py" resnet.py --model resnet50 --mode "$mode" --batch-size 256 --warmup 10 --steps 50
  done
  timeout 180 "$py" resnet.py --model resnet152 --mode train --batch-size 128 --warmup 5 --steps 30
  timeout 300 "$py" resnet.py --model resnet50 --mode train --batch-size 256 --warmup 10 --steps 50 --compile
) 2>&1 | tee "$out/payloads.txt"
rm -rf "$work"
