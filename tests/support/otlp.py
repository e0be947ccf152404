"""A loopback OTLP/HTTP receiver for tests (infra-facts §7).

A stdlib ``ThreadingHTTPServer`` on 127.0.0.1 (port 0) that decodes ``POST /v1/traces``
(``ExportTraceServiceRequest``, gzip aware) with ``opentelemetry-proto`` and answers an empty
``ExportTraceServiceResponse``. ``/v1/metrics`` and ``/v1/logs`` are accepted and counted.
:meth:`OtlpReceiver.wait_for` blocks until spans with given names arrived.
"""

from __future__ import annotations

import gzip
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["OtlpReceiver", "ReceivedSpan"]


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


@dataclass
class ReceivedSpan:
    """One span as it arrived.

    Attributes:
        name: The span name.
        trace_id: 32 hex digits.
        span_id: 16 hex digits.
        parent_span_id: 16 hex digits, or "" for a root.
        attributes: Decoded attribute values.
        resource: The resource's attributes.
        status_code: 0 unset, 1 ok, 2 error.
    """

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    resource: dict[str, Any] = field(default_factory=dict)
    status_code: int = 0


class OtlpReceiver:
    """Receive OTLP/HTTP exports on loopback. Call :meth:`stop` (or use ``with``)."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests: dict[str, int] = {}
        self.gzipped = 0
        self._cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                    receiver.gzipped += 1
                path = self.path.split("?")[0]
                with receiver._cond:
                    receiver.requests[path] = receiver.requests.get(path, 0) + 1
                body = b""
                if path == "/v1/traces":
                    receiver._take(raw)
                    body = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.02,), name="otlp-receiver", daemon=True
        )
        self._thread.start()

    def _take(self, raw: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(raw)
        got = []
        for resource_spans in request.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    got.append(
                        ReceivedSpan(
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex(),
                            attributes={kv.key: _value(kv.value) for kv in s.attributes},
                            resource=resource,
                            status_code=int(s.status.code),
                        )
                    )
        with self._cond:
            self.spans.extend(got)
            self._cond.notify_all()

    @property
    def endpoint(self) -> str:
        """The base URL (``OTEL_EXPORTER_OTLP_ENDPOINT`` style; ``/v1/traces`` is appended)."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def wait_for(self, *names: str, count: int = 1, timeout: float = 10.0) -> list[ReceivedSpan]:
        """Wait until at least ``count`` spans of each name arrived; return all spans so far.

        Raises:
            AssertionError: They did not arrive within ``timeout`` seconds (names what came).
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                have = [s.name for s in self.spans]
                if all(have.count(n) >= count for n in names):
                    return list(self.spans)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"spans {names} x{count} not received in {timeout} s; got {have}")
                self._cond.wait(left)

    def named(self, name: str) -> list[ReceivedSpan]:
        """The received spans called ``name``."""
        with self._cond:
            return [s for s in self.spans if s.name == name]

    def stop(self) -> None:
        """Stop serving; safe to call twice."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
