"""The OS image `aisite provision` writes to a node's disk, and the installer that writes it: built on this
machine with debootstrap from the site's mirror, once per recipe (cached by its hash in the user's cache, paths.IMAGES).

What comes out, in one folder: `rootfs.tar.zst` (the installed system: kernel, GRUB for BIOS and UEFI, systemd,
networkd, sshd, Python for Ansible; no host keys, no machine id, no password), `vmlinuz` (its kernel) and
`installer.img` (an initramfs of the same kernel made by mkinitramfs with `installer/`: boot=aisite-install writes
the disk), and `image.json` (the recipe, the kernel version and the files' digests)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aisite.plan import ProvisioningPlan

INSTALLER = Path(__file__).with_name("installer")
SUITES = {"debian-12": "bookworm"}
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "iproute2",
    "iputils-ping",
    "openssh-server",
    "sudo",
    "python3",
    "ca-certificates",
    "kmod",
    "procps",
    "linux-image-amd64",
    "initramfs-tools",
    "grub-pc-bin",
    "grub-efi-amd64-bin",
    "grub2-common",
    "busybox",
    "zstd",
    "fdisk",
    "xfsprogs",
    "dosfstools",
    "e2fsprogs",
)
# Nothing of the machine that built it: each node makes its own at install (host keys) or first boot (machine id).
_GENERALISE = """set -e
rm -f /etc/ssh/ssh_host_* /var/lib/dbus/machine-id
: > /etc/machine-id
systemctl enable systemd-networkd.service ssh.service >/dev/null 2>&1
systemctl disable systemd-networkd-wait-online.service >/dev/null 2>&1 || true
apt-get clean
rm -rf /var/lib/apt/lists/* /tmp/* /var/tmp/*
"""
_GRUB = """# aisite: the kernel arguments come from the node's install profile (grub.d/aisite.cfg).
GRUB_DEFAULT=0
GRUB_TIMEOUT=1
GRUB_DISTRIBUTOR=Debian
GRUB_CMDLINE_LINUX_DEFAULT=""
GRUB_CMDLINE_LINUX=""
GRUB_TERMINAL="console serial"
GRUB_SERIAL_COMMAND="serial --speed=115200"
"""


class ImageError(Exception):
    """An image that could not be built; the message says which step and what the tool said."""


@dataclass(frozen=True, slots=True)
class Image:
    os: str
    path: Path  # its folder
    kernel_version: str
    digest: str  # of the recipe: what `provision` records as the version a node was installed at

    @property
    def rootfs(self) -> Path:
        return self.path / "rootfs.tar.zst"

    @property
    def kernel(self) -> Path:
        return self.path / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.path / "installer.img"


def recipe(os_name: str, mirror: str, extra: tuple[str, ...] = ()) -> str:
    """Everything the image is made from, so a change to any of it is a new image."""
    installer = sorted((str(p.relative_to(INSTALLER)), p.read_text()) for p in INSTALLER.rglob("*") if p.is_file())
    return json.dumps(
        {
            "os": os_name,
            "suite": SUITES[os_name],
            "mirror": mirror,
            "packages": packages(extra),
            "generalise": _GENERALISE,
            "grub": _GRUB,
            "installer": installer,
        },
        sort_keys=True,
    )


def packages(extra: tuple[str, ...]) -> list[str]:
    """The image's packages: its base, then the site's (provisioning.image_packages)."""
    return [*PACKAGES, *sorted(set(extra) - set(PACKAGES))]


def digest(os_name: str, mirror: str, extra: tuple[str, ...] = ()) -> str:
    return hashlib.sha256(recipe(os_name, mirror, extra).encode()).hexdigest()[:16]


def _run(args: list[str], what: str, **kw: object) -> str:
    r = subprocess.run(args, capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload]
    if r.returncode:
        said = (r.stderr or r.stdout or "").strip()[-800:]
        raise ImageError(f"{what} failed (exit {r.returncode}): {said}")
    return str(r.stdout)


def load(folder: Path) -> Image | None:
    """The image built in `folder`, if it is complete (image.json is written last)."""
    try:
        doc = json.loads((folder / "image.json").read_text())
        image = Image(doc["os"], folder, doc["kernel_version"], doc["digest"])
    except (OSError, ValueError, KeyError):
        return None
    return image if all(p.is_file() for p in (image.rootfs, image.kernel, image.initrd)) else None


def ensure_image(
    os_name: str, mirror: str, images: Path, say: Callable[[str], None], extra: tuple[str, ...] = ()
) -> Image:
    """The image for this OS, mirror and extra packages, built first when it is not cached (then the older images
    of the OS, other recipes, are removed)."""
    d = digest(os_name, mirror, extra)
    folder = images / f"{os_name}-{d}"
    cached = load(folder)
    if cached:
        return cached
    say(f"building the {os_name} install image from {mirror} (debootstrap, a few minutes, once)")
    images.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=images))
    try:
        out = _build(os_name, mirror, d, work, say, extra)
        shutil.rmtree(folder, ignore_errors=True)
        out.rename(folder)
    except FileNotFoundError as exc:
        # Most often a tool the build runs (debootstrap, chroot, tar, zstd) missing: said, not a traceback.
        raise ImageError(
            f"building the {os_name} install image: {exc.filename or exc} not found (it runs debootstrap, chroot, "
            "tar and zstd: on Debian, apt-get install debootstrap zstd)"
        ) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for old in images.glob(f"{os_name}-*"):
        if old != folder:
            shutil.rmtree(old, ignore_errors=True)
    built = load(folder)
    if built is None:
        raise ImageError(f"the image in {folder} is incomplete after its build")
    return built


def ensure_site_images(prov: ProvisioningPlan, images: Path, say: Callable[[str], None]) -> list[Image]:
    """The install image of every OS the site's install profiles name, each built first where it is not cached."""
    return [
        ensure_image(os_name, prov.mirror, images, say, prov.image_packages)
        for os_name in sorted({profile.os for profile in prov.profiles})
    ]


def prepare_site_images(prov: ProvisioningPlan, images: Path, say: Callable[[str], None]) -> str:
    """`ensure_site_images` ahead of `aisite provision` (beside `lab up`): what it did, or why not, in a line.
    A failure is said, not raised: `aisite provision` builds the image again and fails there, saying why."""
    start = time.monotonic()
    try:
        built = ensure_site_images(prov, images, say)
    except (ImageError, OSError) as exc:
        return f"the install image was not built ahead ({exc}); `aisite provision` builds it"
    names = ", ".join(image.path.name for image in built)
    return f"the install image {names} is ready for `aisite provision` ({time.monotonic() - start:.0f} s)"


def _build(  # noqa: PLR0917
    os_name: str, mirror: str, d: str, work: Path, say: Callable[[str], None], extra: tuple[str, ...]
) -> Path:
    """Build into work/out (image.json last); returns that folder."""
    root = work / "root"
    suite = SUITES[os_name]
    _run(
        ["debootstrap", "--variant=minbase", f"--include={','.join(packages(extra))}", suite, str(root), mirror],
        f"debootstrap {suite} from {mirror}",
    )
    (root / "etc/apt/sources.list").write_text(f"deb {mirror} {suite} main\n")
    (root / "etc/default/grub").write_text(_GRUB)
    (root / "etc/default/grub.d").mkdir(exist_ok=True)
    kernels = sorted((root / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise ImageError(f"debootstrap {suite} installed no kernel (linux-image-amd64)")
    version = kernels[-1].name.removeprefix("vmlinuz-")
    say(f"making the installer's initramfs for kernel {version}")
    shutil.copytree(INSTALLER, root / "tmp/aisite-installer")
    _run(
        ["chroot", str(root), "mkinitramfs", "-d", "/tmp/aisite-installer", "-o", "/tmp/installer.img", version],
        "mkinitramfs of the installer",
    )
    out = work / "out"
    out.mkdir()
    shutil.move(root / "tmp/installer.img", out / "installer.img")
    shutil.copy(kernels[-1], out / "vmlinuz")
    _run(["chroot", str(root), "sh", "-c", _GENERALISE], "generalising the image")
    say("packing the image (zstd)")
    with (out / "rootfs.tar.zst").open("wb") as f:
        tar = subprocess.Popen(
            ["tar", "-C", str(root), "--numeric-owner", "--xattrs", "-c", "."], stdout=subprocess.PIPE
        )
        zstd = subprocess.run(["zstd", "-q", "-T0", "-6"], stdin=tar.stdout, stdout=f, check=False)
        tar.wait()
    if tar.returncode or zstd.returncode:
        raise ImageError(f"packing the image failed (tar exit {tar.returncode}, zstd exit {zstd.returncode})")
    files = {}
    for p in sorted(out.iterdir()):
        with p.open("rb") as fh:
            files[p.name] = hashlib.file_digest(fh, "sha256").hexdigest()
    doc = {"os": os_name, "suite": suite, "mirror": mirror, "kernel_version": version, "digest": d, "files": files}
    (out / "image.json").write_text(json.dumps(doc, indent=2) + "\n")
    return out
