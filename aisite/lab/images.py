"""The lab's images: a Debian 12 rootfs with systemd (debootstrap, built once and cached by the hash of its
recipe), and node and FRR switch images layered on it. A changed recipe gives a new tag, hence a rebuild."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from aisite.lab.podman import CONF, LabError, podman

# A mirror is a setting, so an air-gapped site points this at its own.
MIRROR = os.environ.get("AISITE_LAB_MIRROR", "http://deb.debian.org/debian")
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "systemd", "systemd-sysv", "iproute2", "openssh-server", "sudo", "iputils-ping")
LAYERS = {
    "node": ("ca-certificates", "procps", "kmod", "lldpd", "iperf3"),
    "frr": ("frr", "frr-pythontools", "procps", "lldpd"),
    "bmc": ("openipmi", "ipmitool", "openssl", "python3-venv"),
    # A node installed by `aisite provision`: QEMU (with SeaBIOS and iPXE's NIC ROMs) and its BMC, ipmi_sim.
    "vm": ("openipmi", "qemu-system-x86", "qemu-utils", "ipxe-qemu", "seabios", "procps"),
}
# The BMC image installs sushy-tools from wheels the host's pip fetched (with the host's index, proxy and CA
# settings, or an air-gapped mirror), pinned here.
BMC_REQUIREMENTS = Path(__file__).with_name("bmc-requirements.txt")
IMAGE_LABEL = "io.aisite.image"


def _hash(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def base_tag() -> str:
    return f"localhost/aisite-base:{_hash(SUITE, MIRROR, *BASE_PACKAGES)}"


def layer_containerfile(kind: str) -> str:
    packages = " ".join(LAYERS[kind])
    text = (
        f"FROM {base_tag()}\n"
        f"LABEL {IMAGE_LABEL}={kind}\n"
        "RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
        f"{packages} && rm -rf /var/lib/apt/lists/*\n"
    )
    if kind == "vm":
        text += "RUN mkdir -p /etc/aisite-bmc\n"
    if kind == "bmc":
        pins = " ".join(sorted(_bmc_pins()))
        text += (
            "COPY wheels /tmp/wheels\n"
            "RUN python3 -m venv /opt/sushy && /opt/sushy/bin/pip install -q --no-index --find-links /tmp/wheels "
            f"{pins} && rm -rf /tmp/wheels && mkdir -p /etc/aisite-bmc\n"
        )
    return text


def _bmc_pins() -> list[str]:
    lines = BMC_REQUIREMENTS.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _fetch_wheels(dest: Path, pins: list[str], what: str, deps: bool = False) -> None:
    """Wheels for the lab images' Python (Debian 12's 3.11, x86_64), fetched by this machine's pip."""
    args = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        *([] if deps else ["--no-deps"]),
        "--only-binary=:all:",
        "--python-version",
        "3.11",
        "--platform",
        "manylinux2014_x86_64",
        "--platform",
        "manylinux_2_17_x86_64",
        "--platform",
        "manylinux_2_28_x86_64",
        "--dest",
        str(dest),
        *pins,
    ]
    r = subprocess.run(args, capture_output=True, text=True, check=False)
    if r.returncode:
        raise LabError(f"fetching {what} failed: {r.stderr.strip()[-800:]}")


def ensure_pull_wheels(dest: Path, say: Callable[[str], None]) -> None:
    """ansible-core at this machine's version and its dependencies, for nodes that pull layers (role pull copies
    them in: the lab's containers reach no package index). Fetched once per version."""
    pin = f"ansible-core=={metadata.version('ansible-core')}"
    stamp = dest / ".fetched"
    if stamp.is_file() and stamp.read_text() == pin:
        return
    say(f"fetching the wheels of {pin} for the nodes' ansible-pull")
    shutil.rmtree(dest, ignore_errors=True)
    _fetch_wheels(dest, [pin], f"the wheels of {pin}", deps=True)
    stamp.write_text(pin)


def image_tag(kind: str) -> str:
    return base_tag() if kind == "base" else f"localhost/aisite-{kind}:{_hash(layer_containerfile(kind))}"


def _exists_rc(tag: str) -> bool:
    env = os.environ | {"CONTAINERS_CONF": str(CONF)}
    return subprocess.run(["podman", "image", "exists", tag], env=env, check=False).returncode == 0


def build_base(cache: Path) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="rootfs-", dir=cache))
    try:
        args = ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE, str(root), MIRROR]
        r = subprocess.run(args, capture_output=True, text=True, check=False)
        if r.returncode:
            raise LabError(f"debootstrap {SUITE} from {MIRROR} failed: {r.stderr.strip()[-800:]}")
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        env = os.environ | {"CONTAINERS_CONF": str(CONF)}
        imp = subprocess.run(
            [
                "podman",
                "import",
                "--change",
                "CMD=/sbin/init",
                "--change",
                f"LABEL {IMAGE_LABEL}=base",
                "-",
                base_tag(),
            ],
            stdin=tar.stdout,
            capture_output=True,
            env=env,
            check=False,
        )
        tar.wait()
        if imp.returncode or tar.returncode:
            raise LabError(f"podman import of the base rootfs failed: {imp.stderr.decode().strip()[-800:]}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def build_layer(kind: str, cache: Path) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    ctx = Path(tempfile.mkdtemp(prefix=f"build-{kind}-", dir=cache))
    try:
        (ctx / "Containerfile").write_text(layer_containerfile(kind))
        if kind == "bmc":
            _fetch_wheels(ctx / "wheels", _bmc_pins(), "the BMC emulator wheels")
        podman(
            "build",
            "-q",
            "--network",
            "host",
            "-t",
            image_tag(kind),
            "-f",
            str(ctx / "Containerfile"),
            str(ctx),
            what=f"building the {kind} image",
        )
    finally:
        shutil.rmtree(ctx, ignore_errors=True)


def ensure_images(cache: Path, say: Callable[[str], None]) -> dict[str, str]:
    """Build what is missing; returns kind -> tag. Cached images make this a few `image exists` calls."""
    tags: dict[str, str] = {}
    if not _exists_rc(base_tag()):
        say(f"building {base_tag()} with debootstrap (about a minute, once)")
        build_base(cache)
    tags["base"] = base_tag()
    for kind in LAYERS:
        tag = image_tag(kind)
        if not _exists_rc(tag):
            say(f"building {tag}")
            build_layer(kind, cache)
        tags[kind] = tag
    return tags
