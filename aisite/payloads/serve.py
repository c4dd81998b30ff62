"""The model server: one checkpoint of resnet.py's network over HTTP, KServe's v1 protocol, with Prometheus metrics.

    python3 serve.py --name classifier --model resnet50 --version v2 --checkpoint /datasets/models/v2.pt --port 8080

- GET  /v1/models/NAME          ready (200) with the version, once the checkpoint is loaded
- POST /v1/models/NAME:predict  {"instances": [{"b64": IMAGE}, ...]}, IMAGE the base64 of 3 x side x side bytes
                                (channels first, the checkpoint's side) -> {"predictions": [{"class", "confidence"}],
                                "model_version"}
- GET  /metrics                 requests by code, latency, the answers' mean confidence, the version

Every request is data from a client: its size (no more than MAX_INSTANCES images of the checkpoint's side need),
JSON (bounded in depth: foreign_json), instance count and image length are checked before the model sees it, and a
bad one gets 400 with the reason; nothing in it is evaluated. A body is read a chunk at a time and must arrive
within --body-timeout-s (else 408), a silent connection is closed after --io-timeout-s, and at most
--max-connections are served at once (one more gets 503 at once): clients that trickle or hold connections open
hold neither the threads nor the memory for long. `--inject-latency-ms` and
`--inject-error-rate` slow or fail requests on purpose (the lab's failing canary), never set on a site.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import json
import os
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch

try:  # inside the package (the controller, tests) or as a plain script beside resnet.py (the containers)
    from aisite.payloads.foreign_json import ForeignJSONError, loads
    from aisite.payloads.resnet import LAYERS, load_checkpoint
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from foreign_json import ForeignJSONError, loads  # type: ignore[import-not-found,no-redef]
    from resnet import LAYERS, load_checkpoint  # type: ignore[import-not-found,no-redef]

MAX_INSTANCES = 256
# What one instance adds to a body beside its image's base64: `{"b64": ""}, ` and room for white space.
INSTANCE_OVERHEAD = 64
CHUNK = 64 * 1024  # a body is read this much at a time: memory follows what arrived, not what was announced
# Latency buckets (seconds) of the request histogram.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


_BUSY_BODY = b'{"error": "the server is at its connection limit (--max-connections)"}'
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
    + f"Content-Length: {len(_BUSY_BODY)}\r\n\r\n".encode()
    + _BUSY_BODY
)


class BadRequestError(ValueError):
    """A request this server refuses (400), with the reason it gives the client."""


def _escape(value: str) -> str:
    """A label value as Prometheus's text format quotes it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """The server's counters, in Prometheus's text format (no client library: the images need not have one)."""

    def __init__(self, name: str, version: str, role: str = "champion") -> None:
        self.labels = f'model="{_escape(name)}",role="{_escape(role)}",version="{_escape(version)}"'
        self.lock = threading.Lock()
        self.codes: dict[int, int] = {}
        self.buckets = [0] * len(BUCKETS)
        self.count = 0
        self.seconds = 0.0
        self.confidence = 0.0
        self.answers = 0

    def observe(self, code: int, seconds: float, confidences: list[float]) -> None:
        with self.lock:
            self.codes[code] = self.codes.get(code, 0) + 1
            self.count += 1
            self.seconds += seconds
            for i, edge in enumerate(BUCKETS):
                if seconds <= edge:
                    self.buckets[i] += 1
            self.confidence += sum(confidences)
            self.answers += len(confidences)

    def text(self) -> str:
        with self.lock:
            lines = [
                "# TYPE aisite_serving_model_info gauge",
                f"aisite_serving_model_info{{{self.labels}}} 1",
                "# TYPE aisite_serving_requests_total counter",
                *(
                    f'aisite_serving_requests_total{{{self.labels},code="{c}"}} {n}'
                    for c, n in sorted(self.codes.items())
                ),
                "# TYPE aisite_serving_request_seconds histogram",
                *(
                    f'aisite_serving_request_seconds_bucket{{{self.labels},le="{edge}"}} {n}'
                    for edge, n in zip(BUCKETS, self.buckets, strict=True)
                ),
                f'aisite_serving_request_seconds_bucket{{{self.labels},le="+Inf"}} {self.count}',
                f"aisite_serving_request_seconds_sum{{{self.labels}}} {self.seconds}",
                f"aisite_serving_request_seconds_count{{{self.labels}}} {self.count}",
                "# TYPE aisite_serving_confidence_total counter",
                f"aisite_serving_confidence_total{{{self.labels}}} {self.confidence}",
                "# TYPE aisite_serving_answers_total counter",
                f"aisite_serving_answers_total{{{self.labels}}} {self.answers}",
            ]
        return "\n".join(lines) + "\n"


class Model:
    def __init__(self, args: argparse.Namespace) -> None:
        self.device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
        self.net, self.size = load_checkpoint(args.checkpoint, args.model, self.device)
        self.lock = threading.Lock()  # one batch at a time: the threads of torch serve it
        # The largest body a request of MAX_INSTANCES images of this checkpoint's side needs, and no more.
        self.max_body = MAX_INSTANCES * (4 * -(-3 * self.size * self.size // 3) + INSTANCE_OVERHEAD) + 1024

    def images(self, body: bytes) -> torch.Tensor:
        """The request's images as a batch, or BadRequestError saying what is wrong with it."""
        try:
            doc = loads(body, self.max_body, max_depth=4)
        except ForeignJSONError as exc:
            raise BadRequestError(f"the body: {exc}") from None
        instances = doc.get("instances") if isinstance(doc, dict) else None
        if not isinstance(instances, list) or not 1 <= len(instances) <= MAX_INSTANCES:
            raise BadRequestError(f"'instances' must be a list of 1 to {MAX_INSTANCES} images")
        want = 3 * self.size * self.size
        raw = bytearray()
        for i, item in enumerate(instances):
            b64 = item.get("b64") if isinstance(item, dict) else None
            if not isinstance(b64, str):
                raise BadRequestError(f"instances[{i}]: not an object with a 'b64' string")
            try:
                data = base64.b64decode(b64, validate=True)
            except (binascii.Error, ValueError):
                raise BadRequestError(f"instances[{i}]: not base64") from None
            if len(data) != want:
                raise BadRequestError(f"instances[{i}]: {len(data)} bytes; a {self.size}-pixel image has {want}")
            raw += data
        batch = torch.frombuffer(raw, dtype=torch.uint8).view(len(instances), 3, self.size, self.size)
        return batch.float().div_(255.0)

    def predict(self, images: torch.Tensor) -> list[dict[str, Any]]:
        with self.lock, torch.inference_mode():
            probs = torch.softmax(self.net(images.to(self.device)), dim=1)
            conf, cls = probs.max(dim=1)
        return [{"class": int(c), "confidence": round(float(p), 6)} for c, p in zip(cls, conf, strict=True)]


def handler(args: argparse.Namespace, model: Model, metrics: Metrics) -> type[BaseHTTPRequestHandler]:
    ready = f"/v1/models/{args.name}"
    predict = f"/v1/models/{args.name}:predict"
    faults = random.Random()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "aisite-serve"
        # Every read and write on the socket: a client silent this long (between requests too) is disconnected.
        timeout = args.io_timeout_s

        def log_message(self, format: str, *a: Any) -> None:
            if args.access_log:
                super().log_message(format, *a)

        def reply(self, code: int, doc: dict[str, Any] | str) -> None:
            body = (doc if isinstance(doc, str) else json.dumps(doc)).encode()
            self.send_response(code)
            kind = "text/plain; version=0.0.4" if isinstance(doc, str) else "application/json"
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Model-Version", args.version)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == ready:
                self.reply(200, {"name": args.name, "ready": True, "version": args.version})
            elif self.path == "/metrics":
                self.reply(200, metrics.text())
            else:
                self.reply(404, {"error": "not found"})

        def do_POST(self) -> None:
            start = time.perf_counter()
            code = 500
            confidences: list[float] = []
            doc: dict[str, Any] = {"error": "internal error"}
            try:
                code, doc, confidences = self.answer()
            except BadRequestError as exc:
                code, doc = 400, {"error": str(exc)}
            except SlowBodyError as exc:
                # The body did not come in time: said, and the connection closed (the rest is not waited for).
                code, doc = 408, {"error": str(exc)}
                self.close_connection = True
            finally:
                metrics.observe(code, time.perf_counter() - start, confidences)
            self.reply(code, doc)

        def answer(self) -> tuple[int, dict[str, Any], list[float]]:
            if self.path != predict:
                return 404, {"error": "not found"}, []
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                raise BadRequestError("a Content-Length is required") from None
            if not 0 < length <= model.max_body:
                self.close_connection = True  # its body is not read: the connection cannot serve another request
                raise BadRequestError(f"a body of 1 to {model.max_body} bytes is required")
            images = model.images(self.body(length))
            if args.inject_latency_ms:
                time.sleep(args.inject_latency_ms / 1000)
            if args.inject_error_rate and faults.random() < args.inject_error_rate:
                return 500, {"error": "injected failure (--inject-error-rate)"}, []
            out = model.predict(images)
            return 200, {"predictions": out, "model_version": args.version}, [p["confidence"] for p in out]

        def body(self, length: int) -> bytes:
            """The body, read a chunk at a time within --body-timeout-s (a trickling client holds neither a
            thread nor the memory it announced for longer)."""
            deadline = time.monotonic() + args.body_timeout_s
            data = bytearray()
            while len(data) < length:
                try:
                    chunk = self.rfile.read1(min(CHUNK, length - len(data)))
                except TimeoutError:
                    chunk = b""
                if not chunk or time.monotonic() > deadline:
                    raise SlowBodyError(
                        f"{len(data)} of {length} bytes came in {args.body_timeout_s:g} s (--body-timeout-s)"
                    )
                data += chunk
            return bytes(data)

    return Handler


class SlowBodyError(Exception):
    """A body that did not arrive whole in time (408)."""


class Server(ThreadingHTTPServer):
    """One thread per connection, at most `max_connections` at once: one more is answered 503 and closed at once,
    so clients holding connections open cannot take every thread."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], max_connections: int) -> None:
        super().__init__(address, handler)
        self.slots = threading.BoundedSemaphore(max_connections)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.sendall(BUSY)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (a health check closing early) is not an error worth a traceback."""
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--name", required=True, help="the served model's name (its URL path)")
    p.add_argument("--model", choices=sorted(LAYERS), required=True)
    p.add_argument("--version", required=True)
    p.add_argument("--role", choices=("champion", "candidate"), default="champion", help="for its metrics")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--host", default="0.0.0.0")  # a pod's server listens on its pod address
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--threads", type=int, default=0, help="torch's CPU threads (0: its default)")
    p.add_argument("--access-log", action="store_true")
    p.add_argument("--max-connections", type=int, default=64, help="connections served at once (one more: 503)")
    p.add_argument("--io-timeout-s", type=float, default=10.0, help="a silent client is disconnected after this")
    p.add_argument("--body-timeout-s", type=float, default=60.0, help="a request's whole body must arrive in this")
    p.add_argument("--inject-latency-ms", type=float, default=0.0, help="the lab's faults: never on a site")
    p.add_argument("--inject-error-rate", type=float, default=0.0, help="the lab's faults: never on a site")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = Model(args)
    metrics = Metrics(args.name, args.version, args.role)
    server = Server((args.host, args.port), handler(args, model, metrics), args.max_connections)
    print(json.dumps({"serving": args.name, "version": args.version, "port": server.server_address[1]}), flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
