#!/usr/bin/env bash
# Sets up the project on a fresh Debian 12 machine: system packages (as root), then .venv with the pinned tree.
# Safe to run again: it does nothing when the lock file and pyproject are unchanged since the last run.
set -euo pipefail
cd "$(dirname "$0")/.."

# ipmitool: the bmc role reads FRU and firmware data of IPMI BMCs with it. openssh-client: Ansible reaches hosts
# (the lab's containers too) over SSH. iperf3, fio: the benchmark payloads' tools, run for real by the tests.
# gnupg: a reconcile test signs a commit with OpenPGP to show that such a signature is refused. cmake, gcc, make,
# patch, libpcre2-dev: SONiC's libyang is built from ../shared for the config_db validation (scripts/sonic-yang.sh).
# mstflint: its mstconfig is what the rail NICs' settings module (aisite.site.nic_config) asks, tested for real.
# ceph-mon, ceph-mgr: a real Ceph 16.2 monitor and manager on loopback hold the Ceph plan's pools to what Ceph sets
# and its alerts to the metrics a manager serves (tests/ceph_local.py); without their recommends (ceph-mds, a time
# daemon, the dashboard), which the controller does not need.
# haproxy: the serving proxy; its own check (`haproxy -c`) holds the configuration aisite renders, and the lab runs it.
APT_PACKAGES=(git python3 python3-venv python3-dev ipmitool openssh-client iperf3 fio gnupg
  cmake gcc make patch libpcre2-dev mstflint ceph-mon ceph-mgr haproxy)
APT_NO_RECOMMENDS=(ceph-mon ceph-mgr)

need_apt=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing ${need_apt[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    plain=() bare=()
    for pkg in "${need_apt[@]}"; do
      if [[ " ${APT_NO_RECOMMENDS[*]} " == *" $pkg "* ]]; then bare+=("$pkg"); else plain+=("$pkg"); fi
    done
    [ ${#plain[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${plain[@]}" >/dev/null
    [ ${#bare[@]} -eq 0 ] ||
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${bare[@]}" >/dev/null
  else
    echo "setup: missing system packages: ${need_apt[*]} (run as root, or install them)" >&2
  fi
fi

PYTHON=${PYTHON:-python3}
stamp=".venv/.aisite-setup-$(cat requirements.lock requirements-hub.lock pyproject.toml | sha256sum | cut -c1-16)"
if [ -f "$stamp" ]; then
  bash scripts/sonic-yang.sh
  exit 0
fi
echo "setup: creating .venv with $($PYTHON --version)"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip() { .venv/bin/python -m pip -q --disable-pip-version-check "$@" 2> >(grep -v "is ignored: it is neither" >&2); }
pip install --upgrade pip
pip install -r requirements.lock
pip install -r requirements-hub.lock -c requirements.lock
pip install --no-deps -e .
rm -f .venv/.aisite-setup-*
touch "$stamp"
bash scripts/sonic-yang.sh
echo "setup: done (.venv/bin/aisite)"
