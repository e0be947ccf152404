"""The OpenTelemetry collector's stand-in in `make compose-check` (its image exists only on Docker
Hub): an OTLP/HTTP endpoint on :4318 that answers every export 200 and prints one line per request,
so the check can see the nodes' spans arrive at ``otel-collector:4318``. Arguments (the collector's
``--config=...``) are ignored."""

import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        size = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(size)
        print(f"otlp-export {self.path} {size} bytes from {self.client_address[0]}", flush=True)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        """Print nothing per request: do_POST already printed the one line the check reads."""


signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # PID 1 ignores an unhandled SIGTERM
print("otlp sink listening on :4318", flush=True)
ThreadingHTTPServer(("0.0.0.0", 4318), Handler).serve_forever()
