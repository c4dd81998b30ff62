"""The narrow string types of a site's fields, each named for where its value ends up.

A stack file is hostile until checked: every value lands in a file name, a configuration line, a YAML or JSON
document, a command's argument or a Kubernetes object. Each type here admits only what its destination accepts
(Kubernetes' own rules for names and labels, RFC 1123 for host names, OCI references for images...), with
`re.fullmatch`, so no newline, quote or template syntax can pass where it could change the meaning of an output.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from ipaddress import IPv4Address
from typing import Annotated, Any

from pydantic import AfterValidator, Field, TypeAdapter, ValidationError

# Control characters (C0, DEL, C1) and the Unicode line and paragraph separators: never in a site's value.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")

_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_HOST_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_K8S_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"
_URL_CHARS = r"[A-Za-z0-9._~%!$&()*+,;=:@/?#\[\]-]"

DNS_LABEL = re.compile(_LABEL)
DNS_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
HOSTNAME = re.compile(rf"{_HOST_LABEL}(\.{_HOST_LABEL})*\.?")
K8S_QUALIFIED_NAME = re.compile(_K8S_NAME)
LABEL_VALUE = re.compile(rf"({_K8S_NAME})?")
URL = re.compile(rf"https?://{_HOST_LABEL}(\.{_HOST_LABEL})*(:\d{{1,5}})?(/{_URL_CHARS}*)?")
# OCI image reference (distribution/reference's grammar): [registry[:port]/]path[:tag][@digest].
_COMPONENT = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
IMAGE = re.compile(
    rf"({_HOST_LABEL}(\.{_HOST_LABEL})*(:\d{{1,5}})?/)?{_COMPONENT}(/{_COMPONENT})*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?"
)
REGISTRY_HOST = re.compile(rf"{_HOST_LABEL}(\.{_HOST_LABEL})*(:\d{{1,5}})?")
REGISTRY = re.compile(rf"{_HOST_LABEL}(\.{_HOST_LABEL})*(:\d{{1,5}})?(/{_COMPONENT})*")
UNIX_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
# BMC and switch accounts: vendors allow more than Unix does, but nothing that needs quoting.
ACCOUNT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._@-]{0,63}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
SECRET_NAME = re.compile(r"[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?")
PULUMI_KEY = re.compile(r"([A-Za-z0-9_-]+:)?[A-Za-z0-9_.-]{1,128}")
PATH_SEGMENT = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]{0,254}")
GIT_BRANCH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}")
GROUP = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._:@/-]{0,127}")
SWITCH_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._+/-]{0,63}")
APT_SOURCE = re.compile(rf"deb (\[[A-Za-z0-9=/._, -]+\] )?https?://{_URL_CHARS}+( [A-Za-z0-9._/-]+)+")
MAC = re.compile(r"([0-9a-f]{2}:){5}[0-9a-f]{2}")
# A whole disk as the installer finds it: a kernel name (/dev/nvme0n1, /dev/sda) or a stable udev link.
DISK = re.compile(r"/dev/([a-z][a-z0-9]{1,31}|disk/by-(id|path)/[A-Za-z0-9:._+-]{1,200})")
# A Debian package name (Debian Policy 5.6.1).
DEB_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]{1,62}")
# A kernel command-line argument: `word` or `key=value`, no spaces, quotes or shell characters.
KERNEL_ARG = re.compile(r"[A-Za-z0-9_.-]{1,64}(=[A-Za-z0-9_.,:/+-]{1,200})?")
# A name pattern's literal text and its {n} field's format: what a DNS label can hold, a width of at most 9.
_PATTERN_TEXT = re.compile(r"[a-z0-9-]*")
_PATTERN_SPEC = re.compile(r"(0?[1-9])?d?")
_IFNAME = re.compile(r"[a-zA-Z0-9_-][a-zA-Z0-9_.-]{0,14}")
PEM_CERTS = re.compile(
    r"(-----BEGIN CERTIFICATE-----\n([A-Za-z0-9+/=]{1,76}\n)+-----END CERTIFICATE-----\n?)+", re.ASCII
)


def secret_env(name: str) -> str:
    """The environment variable through which a resolved secret reaches Ansible (never a file)."""
    return "AISITE_SECRET_" + "".join(c if c.isalnum() else "_" for c in name.upper())


def _matching(pattern: re.Pattern[str], what: str, max_len: int = 0) -> Callable[[str], str]:
    def check(value: str) -> str:
        if max_len and len(value) > max_len:
            raise ValueError(f"{value[:80]!r}... is longer than {max_len} characters: not {what}")
        if not pattern.fullmatch(value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return check


dns_label = _matching(DNS_LABEL, "a DNS label (lower-case letters, digits and '-', at most 63)")


def _ntp_server(value: str) -> str:
    try:
        IPv4Address(value)
        return value
    except ValueError:
        return _matching(HOSTNAME, "an NTP server (an IPv4 address or a host name)", 253)(value)


def _mac(value: str) -> str:
    mac = value.lower().replace("-", ":")
    if not MAC.fullmatch(mac):
        raise ValueError(f"{value!r} is not a MAC address (aa:bb:cc:dd:ee:ff)")
    if int(mac[:2], 16) & 1:
        raise ValueError(f"{value!r} is a multicast MAC address; a NIC's own address is unicast")
    return mac


def _pattern(value: str) -> str:
    """A name pattern is DNS-label text with `{n}` fields of a bounded integer format, nothing else: no other field,
    attribute, index or conversion (`{n.x}`, `{n[0]}`, `{n!r}`), no `{n:c}` or a width of a billion."""
    usage = f"{value!r} is not a name pattern: lower-case letters, digits and '-' around {{n}} or {{n:0Wd}} (W 1-9)"
    try:
        parts = list(string.Formatter().parse(value))
    except ValueError:
        raise ValueError(usage) from None
    fields = 0
    for text, field, spec, conversion in parts:
        if not _PATTERN_TEXT.fullmatch(text):
            raise ValueError(usage)
        if field is None:
            continue
        if field != "n" or conversion is not None or not _PATTERN_SPEC.fullmatch(spec or ""):
            raise ValueError(usage)
        fields += 1
    if not fields:
        raise ValueError(f"{value!r} has no {{n}} field, so every node would get the same name")
    return value


def _ifname(value: str) -> str:
    if not _IFNAME.fullmatch(value) or value in (".", ".."):
        raise ValueError(f"{value!r} is not a Linux interface name (letters, digits, '_', '.', '-'; at most 15)")
    return value


def label_key(value: str) -> str:
    """Kubernetes' rule for label, taint and annotation keys: [prefix/]name."""
    prefix, _, name = value.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.fullmatch(prefix)):
        raise ValueError(f"{value!r}: the prefix {prefix!r} is not a DNS subdomain (Kubernetes label key)")
    if not K8S_QUALIFIED_NAME.fullmatch(name):
        raise ValueError(
            f"{value!r} is not a Kubernetes label key (name: at most 63 of letters, digits, '-', '_', '.', "
            "starting and ending with a letter or digit; optional DNS-subdomain prefix and '/')"
        )
    return value


label_value = _matching(
    LABEL_VALUE,
    "a Kubernetes label value (empty, or at most 63 of letters, digits, '-', '_', '.', starting and ending with a "
    "letter or digit)",
)


def _path(value: str) -> str:
    parts = value.split("/")
    if len(value) > 1024 or parts[0] != "" or len(parts) < 2 or not all(PATH_SEGMENT.fullmatch(p) for p in parts[1:]):
        raise ValueError(
            f"{value!r} is not an absolute path of plain segments (letters, digits, '.', '_', '+', '-'; "
            "no '..', no empty segment, at most 1024 characters)"
        )
    return value


def _relative(value: str) -> str:
    parts = value.split("/")
    if len(value) > 1024 or not all(PATH_SEGMENT.fullmatch(p) for p in parts):
        raise ValueError(
            f"{value!r} is not a relative path of plain segments (letters, digits, '.', '_', '+', '-'; "
            "no leading '/', no '..', no empty segment, at most 1024 characters)"
        )
    return value


def _mount(value: str) -> str:
    if value == "/":
        return value
    _path(value)
    top = value.split("/")[1]
    if top in ("proc", "sys", "dev", "run") or top.startswith("."):
        raise ValueError(f"{value!r} is not a mount point for a partition (it is under /{top}, which the OS owns)")
    return value


def _branch(value: str) -> str:
    # git check-ref-format's rules, the ones a pattern can express.
    if (
        not GIT_BRANCH.fullmatch(value)
        or ".." in value
        or "//" in value
        or value.endswith(("/", ".", ".lock"))
        or "/." in value
    ):
        raise ValueError(f"{value!r} is not a git branch name")
    return value


DnsLabel = Annotated[str, AfterValidator(dns_label)]
DnsSubdomain = Annotated[str, AfterValidator(_matching(DNS_SUBDOMAIN, "a DNS-1123 subdomain (Kubernetes name)", 253))]
Hostname = Annotated[
    str, AfterValidator(_matching(HOSTNAME, "a host name (RFC 1123: letters, digits, '-' and '.')", 253))
]
NtpServer = Annotated[str, AfterValidator(_ntp_server)]
LabelKey = Annotated[str, AfterValidator(label_key)]
LabelValue = Annotated[str, AfterValidator(label_value)]
Url = Annotated[str, AfterValidator(_matching(URL, "an http(s) URL (no spaces, quotes or braces)", 2048))]
Image = Annotated[str, AfterValidator(_matching(IMAGE, "an image reference (registry/path:tag[@sha256:...])", 512))]
RegistryHost = Annotated[str, AfterValidator(_matching(REGISTRY_HOST, "a registry host (host[:port])", 255))]
RegistryRef = Annotated[str, AfterValidator(_matching(REGISTRY, "a registry (host[:port][/path])", 255))]
UnixUser = Annotated[str, AfterValidator(_matching(UNIX_USER, "a Unix user name ([a-z_][a-z0-9_-], at most 32)"))]
Account = Annotated[str, AfterValidator(_matching(ACCOUNT, "an account name (letters, digits, '.', '_', '@', '-')"))]
EnvName = Annotated[str, AfterValidator(_matching(ENV_NAME, "an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"))]
SecretName = Annotated[
    str, AfterValidator(_matching(SECRET_NAME, "a secret name (lower-case letters, digits, '-', '_', at most 63)"))
]
PulumiKey = Annotated[str, AfterValidator(_matching(PULUMI_KEY, "a Pulumi config key ([namespace:]name)"))]
AbsPath = Annotated[str, AfterValidator(_path)]
# A path inside a volume (a tenant's datasets storage): it cannot leave it.
RelPath = Annotated[str, AfterValidator(_relative)]
MountPoint = Annotated[str, AfterValidator(_mount)]
GitBranch = Annotated[str, AfterValidator(_branch)]
Group = Annotated[str, AfterValidator(_matching(GROUP, "a group name (letters, digits, '.', '_', ':', '@', '/', '-')"))]
SwitchModel = Annotated[str, AfterValidator(_matching(SWITCH_MODEL, "a switch model (letters, digits, ' ._+/-')"))]
AptSource = Annotated[str, AfterValidator(_matching(APT_SOURCE, "an APT source line ('deb [opts] URL suite comp')"))]
PemCerts = Annotated[str, AfterValidator(_matching(PEM_CERTS, "PEM certificates (BEGIN/END CERTIFICATE blocks)"))]
Text = Annotated[str, Field(max_length=1024)]
Mac = Annotated[str, AfterValidator(_mac)]
DebPackage = Annotated[str, AfterValidator(_matching(DEB_PACKAGE, "a Debian package name ([a-z0-9][a-z0-9+.-]+)"))]
DiskPath = Annotated[str, AfterValidator(_matching(DISK, "a whole disk (/dev/NAME or /dev/disk/by-id|by-path/LINK)"))]
KernelArg = Annotated[
    str, AfterValidator(_matching(KERNEL_ARG, "a kernel argument (word or key=value; no spaces, quotes or $;&|)"))
]
NamePattern = Annotated[str, AfterValidator(_pattern)]
IfName = Annotated[str, AfterValidator(_ifname)]


def field_problem(adapter: TypeAdapter[Any], value: object) -> str | None:
    """Why `value` is not of the adapter's type (its first message, as a stack's problems read), or None."""
    try:
        adapter.validate_python(value)
    except ValidationError as exc:
        return str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
    return None
