"""The lab's firmware mirror: one BIOS image, served over https on this machine's address on the lab's management
bridge (the network's gateway), for the firmware rollout's digest check (aisite.firmware.image_digest fetches it
and compares its SHA-256 with the one stacks/Pulumi.lab.yaml pins before any BMC is told of it). The lab's Redfish
emulators ignore an image's content (SimpleUpdate raises their BiosVersion), so the image is a fixed, small file
that stands for one. Started and stopped by whoever rolls firmware in the lab (tests/lab/test_70_bmcs.py); its
certificate is self-signed, as the lab's BMCs' are (the lab stack's oob.tls_verify: false)."""

from __future__ import annotations

import datetime
import hashlib
import ssl
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from aisite.plan import Plan

PORT = 8443
NAME = "lab-bios-1.1.0.bin"
# What the lab's image holds: deterministic, so the stack can pin its digest.
IMAGE = b"aisite lab BIOS 1.1.0\n" + bytes(range(256)) * 64


def digest() -> str:
    return hashlib.sha256(IMAGE).hexdigest()


def url(plan: Plan) -> str:
    return f"https://{plan.networks.gateway('management')}:{PORT}/firmware/{NAME}"


def self_signed(folder: Path, address: str) -> tuple[Path, Path]:
    """A self-signed certificate for `address`, valid for a day (a new one each time the mirror starts)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "aisite-lab-firmware")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]), critical=False)
        .sign(key, hashes.SHA256())
    )
    crt, pem = folder / "tls.crt", folder / "tls.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return crt, pem


class _Handler(BaseHTTPRequestHandler):
    path_served = f"/firmware/{NAME}"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body, code = (IMAGE, 200) if self.path == self.path_served else (b"not found\n", 404)
        self.send_response(code)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def serving(plan: Plan) -> Iterator[str]:
    """Serve the lab's image at `url(plan)` while the block runs; its URL."""
    address = str(plan.networks.gateway("management"))
    with tempfile.TemporaryDirectory(prefix="aisite-lab-firmware-") as folder:
        crt, pem = self_signed(Path(folder), address)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(crt, pem)
        server = ThreadingHTTPServer((address, PORT), _Handler)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        thread = threading.Thread(target=server.serve_forever, name="aisite-lab-firmware", daemon=True)
        thread.start()
        try:
            yield url(plan)
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)
