"""The lab's virtual machines: a node `aisite provision` installs runs as a QEMU VM (TCG, or KVM where it works)
inside a container that is also its BMC. ipmi_sim answers IPMI on the BMC's address; its chassis control starts
QEMU on power on (from the network once after a one-time PXE boot, else from its disk) and stops it on power off.
The container's ports on the lab's networks are bridged to the VM's NICs, so the VM is on those networks with the
plan's MACs and takes the node's addresses itself (by DHCP from the boot server to install, then as installed).

The files are built in memory and copied into the stopped container, as the BMC emulators' are (aisite.lab.bmc):
the BMC password reaches the emulator and never a file on this machine.
"""

from __future__ import annotations

import os
from pathlib import Path

from aisite.lab import bmc
from aisite.lab.topology import LabVm

# TCG (software emulation) by default: a KVM guest hung at kernel start on the machines this was built on.
ACCEL_ENV = "AISITE_LAB_VM_ACCEL"

_START = f"""#!/bin/sh
# Bridge each port to a tap for the VM (the container keeps no address there), then be the BMC.
set -e
for port in "$@"; do
  ip addr flush dev "$port"
  mtu=$(cat "/sys/class/net/$port/mtu")
  ip link add "br-$port" type bridge
  ip link set "br-$port" mtu "$mtu"
  ip link set "$port" master "br-$port"
  ip tuntap add "tap-$port" mode tap
  ip link set "tap-$port" mtu "$mtu" master "br-$port" up
  ip link set "br-$port" up
done
mkdir -p {bmc.STATE_DIR}
# The state (disk, power) is on a volume of its own: a container made again (its BMC's password changed) keeps the
# machine's disk and, as a server's power-restore policy, powers it on again if it was on.
rm -f {bmc.STATE_DIR}/qemu.pid
if [ "$(cat {bmc.STATE_DIR}/power 2>/dev/null)" = 1 ]; then {bmc.CONFIG_DIR}/qemu-start; fi
exec ipmi_sim -n -c {bmc.CONFIG_DIR}/lan.conf -f {bmc.CONFIG_DIR}/sim.emu -s {bmc.STATE_DIR}
"""

# Power is whether QEMU runs; the boot device is kept until the next power on, which uses it once (IPMI's
# one-time boot flags); the wanted power is kept too, for the container's next start.
_CHASSIS = bmc.chassis_script(
    f"""running() {{ [ -f "$state/qemu.pid" ] && kill -0 "$(cat "$state/qemu.pid")" 2>/dev/null; }}
stop() {{
  if running; then
    pid=$(cat "$state/qemu.pid"); kill "$pid"
    i=0; while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
  fi
  rm -f "$state/qemu.pid"
}}
power_get() {{ if running; then echo 1; else echo 0; fi; }}
power_set() {{
  echo "$1" > "$state/power"
  if [ "$1" = 1 ]; then running || {bmc.CONFIG_DIR}/qemu-start; else stop; fi
}}
power_reset() {{ stop; {bmc.CONFIG_DIR}/qemu-start; }}
"""
)


def _qemu_start(vm: LabVm, ports: list[str], accel: str) -> str:
    # Only the boot NIC carries iPXE (QEMU's default option ROM); the others have none, as the BIOS boots one.
    nics = " ".join(
        f"-netdev tap,id=n{i},ifname=tap-{port},script=no,downscript=no "
        f"-device virtio-net-pci,netdev=n{i},mac={mac}" + (",romfile=" if i else "")
        for i, (port, mac) in enumerate(zip(ports, vm.nics, strict=True))
    )
    return f"""#!/bin/sh
# Power on: the disk is made on the first one; a one-time network boot (set before power on) is used once.
state={bmc.STATE_DIR}
once=""
case "$(cat "$state/boot" 2>/dev/null)" in pxe|network) once=",once=n" ;; esac
rm -f "$state/boot"
[ -f "$state/disk.qcow2" ] || qemu-img create -q -f qcow2 "$state/disk.qcow2" {vm.disk_gb}G
echo "$(date +%s) power on boot=${{once:-disk}}" >> "$state/chassis.log"
exec qemu-system-x86_64 -name {vm.node} -machine pc -accel {accel} -m {vm.memory_mb} -smp 2 \\
  -display none -monitor none -serial "file:$state/console.log" \\
  -drive "file=$state/disk.qcow2,if=virtio,format=qcow2" \\
  {nics} \\
  -boot "order=c$once" -daemonize -pidfile "$state/qemu.pid"
"""


def state_volume(v: LabVm) -> str:
    """The podman volume that holds the VM's disk and power state (labelled with the site: `lab down` removes it)."""
    return f"{v.name}-state"


def accel() -> str:
    """tcg unless the machine is said to run KVM guests (AISITE_LAB_VM_ACCEL=kvm) and has /dev/kvm."""
    wanted = os.environ.get(ACCEL_ENV, "tcg")
    return "kvm" if wanted == "kvm" and Path("/dev/kvm").exists() else "tcg"


def vm_files(vm: LabVm, username: str, password: str, accel_name: str) -> dict[str, str]:
    """The files of the VM's container: its BMC's (ipmi_sim's, with the VM's chassis control) and QEMU's start."""
    files = bmc.ipmi_files(vm.bmc, username, password)
    files["chassis"] = _CHASSIS
    files["start"] = _START
    files["qemu-start"] = _qemu_start(vm, [p.interface for p in vm.ports], accel_name)
    return files
