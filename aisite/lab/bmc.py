"""BMC emulators for the lab: sushy-tools (Redfish, its fake driver with a BIOS added, TLS, bcrypt basic auth) or
OpenIPMI's ipmi_sim (IPMI over LAN, with a chassis script that keeps power and boot device), one container per BMC
of the plan, on the lab's out-of-band network at the plan's BMC address.

Their configuration is built in memory and copied into the stopped container as a tar on stdin: the password
reaches the emulator (as it reaches a real BMC's own store) and never a file on this machine.
"""

from __future__ import annotations

import io
import tarfile
import uuid
from pathlib import Path

import bcrypt

from aisite.errors import Problem
from aisite.lab.topology import LabBmc

CONFIG_DIR = "/etc/aisite-bmc"
STATE_DIR = "/var/lib/aisite-bmc"

_REDFISH_START = f"""#!/bin/sh
set -e
cd {CONFIG_DIR}
# A fresh self-signed certificate per start, as a BMC out of the box has.
openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=$1" -keyout tls.key -out tls.crt 2>/dev/null
exec /opt/sushy/bin/python {CONFIG_DIR}/emulator.py --config {CONFIG_DIR}/sushy.conf
"""
# sushy-tools' emulator with a BIOS and firmware versions on its fake driver (aisite/lab/redfish_bios.py).
_REDFISH_EMULATOR = (Path(__file__).parent / "redfish_bios.py").read_text()

_IPMI_START = f"""#!/bin/sh
mkdir -p {STATE_DIR}
exec ipmi_sim -n -c {CONFIG_DIR}/lan.conf -f {CONFIG_DIR}/sim.emu -s {STATE_DIR}
"""


# ipmi_sim calls this as `chassis <mc> get|set|check parm [value] ...`; state lives in files, so power and
# boot device persist across commands like a real chassis. `power` defines what power is: power_get (prints 0 or 1),
# power_set 0|1 and power_reset (the emulator's power is a file; a lab VM's is whether QEMU runs: aisite.lab.vm).
def chassis_script(power: str) -> str:
    return (
        "#!/bin/sh\n"
        f"state={STATE_DIR}\n"
        'mkdir -p "$state"\n'
        + power
        + """
shift
op=$1; shift
case "$op" in
  get)
    for parm in "$@"; do
      case "$parm" in
        power) echo "power:$(power_get)" ;;
        boot) echo "boot:$(cat "$state/boot" 2>/dev/null || echo default)" ;;
      esac
    done ;;
  set)
    while [ $# -ge 2 ]; do
      case "$1" in
        power) power_set "$2" ;;
        reset) power_reset ;;
        boot) echo "$2" > "$state/boot" ;;
      esac
      shift 2
    done ;;
esac
exit 0
"""
    )


_CHASSIS = chassis_script(
    """power_get() { cat "$state/power" 2>/dev/null || echo 0; }
power_set() { echo "$1" > "$state/power"; }
power_reset() { :; }
"""
)

_SIM_EMU = """mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr
sel_enable 0x20 1000 0x0a
mc_enable 0x20
"""


# An RMCP/ASF presence ping (DMTF DSP0136): the pre-session probe every IPMI LAN BMC answers with a pong, so a
# started emulator can be waited for without credentials.
RMCP_PRESENCE_PING = bytes([0x06, 0x00, 0xFF, 0x06, 0x00, 0x00, 0x11, 0xBE, 0x80, 0x00, 0x00, 0x00])
RMCP_PRESENCE_PONG = 0x40


def is_presence_pong(data: bytes) -> bool:
    """An RMCP ASF message (class 6, IANA 4542) of type presence pong."""
    return len(data) >= 9 and data[3] == 0x06 and data[4:8] == b"\x00\x00\x11\xbe" and data[8] == RMCP_PRESENCE_PONG


def system_uuid(site: str, node: str) -> str:
    """A stable UUID per emulated system, so Redfish URLs do not change between lab runs."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}.{site}.lab.aisite"))


def credentials_digest(username: str, password: str) -> str:
    """A salted bcrypt digest of the credentials (as an htpasswd file holds one), never the password itself."""
    return bcrypt.hashpw(f"{username}\0{password}".encode(), bcrypt.gensalt(rounds=10)).decode()


def credentials_match(digest: str, username: str, password: str) -> bool:
    try:
        return bool(digest) and bcrypt.checkpw(f"{username}\0{password}".encode(), digest.encode())
    except ValueError:  # not a bcrypt digest: an emulator from before the label
        return False


def emulator_problems(name: str, username: str, password: str) -> list[Problem]:
    """The emulators' own limit, on top of what real BMCs accept: ipmi_sim reads its users from a quoted file."""
    return [
        Problem(f"site.secrets.{name}", f"the {what} contains '\"', which the lab's IPMI emulator cannot read")
        for what, value in (("user name", username), ("password", password))
        if '"' in value
    ]


def _quote(value: str) -> str:
    if '"' in value or "\n" in value:
        raise ValueError("a BMC user name or password may not contain double quotes or newlines")
    return f'"{value}"'


def redfish_files(bmc: LabBmc, site: str, username: str, password: str) -> dict[str, str]:
    system = {
        "uuid": system_uuid(site, bmc.node),
        "name": bmc.node,
        "power_state": "Off",
        "nics": [{"mac": bmc.node_mac, "ip": bmc.node_address}],
    }
    conf = "\n".join(
        [
            f"SUSHY_EMULATOR_LISTEN_IP = {bmc.address!r}",
            f"SUSHY_EMULATOR_LISTEN_PORT = {bmc.port}",
            f"SUSHY_EMULATOR_SSL_CERT = '{CONFIG_DIR}/tls.crt'",
            f"SUSHY_EMULATOR_SSL_KEY = '{CONFIG_DIR}/tls.key'",
            f"SUSHY_EMULATOR_AUTH_FILE = '{CONFIG_DIR}/htpasswd'",
            "SUSHY_EMULATOR_FAKE_DRIVER = True",
            f"SUSHY_EMULATOR_FAKE_SYSTEMS = [{system!r}]",
            "",
        ]
    )
    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()
    return {
        "sushy.conf": conf,
        "htpasswd": f"{username}:{digest}\n",
        "start": _REDFISH_START,
        "emulator.py": _REDFISH_EMULATOR,
    }


def ipmi_files(bmc: LabBmc, username: str, password: str) -> dict[str, str]:
    lan = "\n".join(
        [
            f"name {_quote(bmc.node)}",
            "set_working_mc 0x20",
            "  startlan 1",
            f"    addr {bmc.address} {bmc.port}",
            "    priv_limit admin",
            *(f"    allowed_auths_{p} md5" for p in ("callback", "user", "operator", "admin")),
            "    guid " + uuid.UUID(system_uuid("ipmi", bmc.node)).hex,
            "  endlan",
            f'  chassis_control "{CONFIG_DIR}/chassis 0x20"',
            f"  user 2 true {_quote(username)} {_quote(password)} admin 10 md5",
            "",
        ]
    )
    return {"lan.conf": lan, "sim.emu": _SIM_EMU, "chassis": _CHASSIS, "start": _IPMI_START}


def tar_of(files: dict[str, str]) -> bytes:
    """A tar of the files (scripts executable, the rest readable by root alone), for `podman cp -`."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755 if text.startswith("#!") else 0o600
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
