"""OpenTelemetry setup for one node (CO-21, FL-6).

:func:`setup_tracing` builds the process's :class:`TracerProvider` with its resource
(``service.name``, ``service.instance.id`` = node id, ``crewlet.company``) and, when an OTLP
endpoint is configured, a :class:`BatchSpanProcessor` feeding the OTLP/HTTP (protobuf)
exporter. The node calls :meth:`Telemetry.shutdown` after its drain (FL-6), which flushes what
is queued; export is best-effort and never fails a turn (CO-21).

Endpoint, first set wins (FL-6, DESIGN.md): ``telemetry.otlp_endpoint`` in the node file (a base
URL; ``/v1/traces`` is appended unless already there), ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
(a full URL, used as is), ``OTEL_EXPORTER_OTLP_ENDPOINT`` (a base URL). With none, spans are
still made (so trace context flows from triggers to turns and on to the next seat) but nothing
is exported.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from shared import logs

__all__ = ["Telemetry", "resolve_traces_endpoint", "service_name_for", "setup_tracing"]

_log = logs.get("telemetry")
_ALL_ROLES = frozenset({"data", "ingress", "seats", "workers"})


def resolve_traces_endpoint(otlp_endpoint: str = "", env: Mapping[str, str] | None = None) -> str | None:
    """Return the full OTLP/HTTP traces URL, or None when none is configured (FL-6).

    Args:
        otlp_endpoint: ``telemetry.otlp_endpoint`` from the node file; "" when unset.
        env: Where the ``OTEL_EXPORTER_OTLP_*`` variables are read; None for ``os.environ``.
    """
    env = os.environ if env is None else env

    def base(url: str) -> str:
        url = url.rstrip("/")
        return url if url.endswith("/v1/traces") else url + "/v1/traces"

    if otlp_endpoint.strip():
        return base(otlp_endpoint.strip())
    full = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if full:
        return full
    general = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    return base(general) if general else None


def service_name_for(roles: Iterable[str]) -> str:
    """``crewlet`` for the all-roles process, else ``crewlet-<role>[-<role>...]`` (CO-21)."""
    chosen = sorted(set(roles))
    return "crewlet" if set(chosen) >= _ALL_ROLES else "crewlet-" + "-".join(chosen)


@dataclass
class Telemetry:
    """The process's tracing, as :func:`setup_tracing` built it.

    Attributes:
        provider: The SDK tracer provider.
        endpoint: The traces URL spans are exported to, or None when nothing is exported.
    """

    provider: TracerProvider
    endpoint: str | None

    def tracer(self, name: str = "crewlet") -> trace.Tracer:
        """Return a tracer of this provider (``crewlet.turns`` for the turn engine)."""
        return self.provider.get_tracer(name)

    def force_flush(self, timeout_seconds: float = 5.0) -> bool:
        """Export what is queued now; True when it all went out in time. Never raises."""
        try:
            return bool(self.provider.force_flush(int(timeout_seconds * 1000)))
        except Exception as e:  # noqa: BLE001 - export is best-effort (CO-21)
            _log.warning("otlp_flush_failed", error=f"{type(e).__name__}: {e}")
            return False

    def shutdown(self) -> None:
        """Flush and stop exporting; the node calls it after its drain (FL-6). Never raises.

        With a dead endpoint this blocks about 1.2 s (one retry, infra-facts §7).
        """
        try:
            self.provider.shutdown()
        except Exception as e:  # noqa: BLE001
            _log.warning("otlp_shutdown_failed", error=f"{type(e).__name__}: {e}")


def setup_tracing(
    *,
    service_name: str = "crewlet",
    node_id: str = "",
    company: str = "",
    otlp_endpoint: str = "",
    env: Mapping[str, str] | None = None,
    exporter: SpanExporter | None = None,
    processors: Iterable[SpanProcessor] = (),
    set_global: bool = True,
) -> Telemetry:
    """Build the process's tracer provider (CO-21, FL-6).

    Args:
        service_name: ``service.name``; see :func:`service_name_for`.
        node_id: ``service.instance.id``.
        company: ``crewlet.company``; "" while the node is unconfigured.
        otlp_endpoint: ``telemetry.otlp_endpoint``; see :func:`resolve_traces_endpoint`.
        env: Where ``OTEL_EXPORTER_OTLP_*`` are read; None for ``os.environ``.
        exporter: An exporter to use instead of OTLP/HTTP (still batched); None for the
            default when an endpoint is configured.
        processors: Extra span processors, added as they are (tests pass a simple one).
        set_global: Install the provider as OpenTelemetry's global one (the global can be set
            once per process; tests reset it).

    Returns:
        The handle whose :meth:`Telemetry.shutdown` the node calls after its drain.
    """
    resource = Resource.create(
        {"service.name": service_name, "service.instance.id": node_id, "crewlet.company": company}
    )
    provider = TracerProvider(resource=resource)
    endpoint = resolve_traces_endpoint(otlp_endpoint, env)
    if exporter is None and endpoint is not None:
        exporter = OTLPSpanExporter(endpoint=endpoint)
    if exporter is not None:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    for processor in processors:
        provider.add_span_processor(processor)
    if set_global:
        trace.set_tracer_provider(provider)
    _log.info("telemetry_configured", service=service_name, otlp_endpoint=endpoint or "")
    return Telemetry(provider, endpoint if exporter is not None else None)
