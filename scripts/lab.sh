#!/usr/bin/env bash
# The main job on the embedded lab site: bring the emulated lab up from the plan and deploy it. The lab BMC
# password is generated once, kept out of git (0600), and handed to aisite through the environment only.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
secret=.aisite/lab/bmc-password
# Generated once; replaced (saying why) when an earlier version left one the BMCs refuse.
.venv/bin/python -m aisite.lab.password "$secret"
AISITE_LAB_BMC_PASSWORD="$(cat "$secret")"
export AISITE_LAB_BMC_PASSWORD

aisite validate lab
aisite render lab --out .aisite/lab/render
aisite lab up lab
# The lab's VM node (infer01) is installed over the network from the boot server, as a real site's nodes are.
aisite provision lab
aisite deploy lab
aisite lab status lab
echo "The lab runs: 'aisite lab status' lists it, 'aisite lab down' removes it (images stay cached)."
