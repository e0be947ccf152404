"""W3C trace context across the broker (CO-6, CO-21; infra-facts §7).

A trigger carries its trace context in the NATS message's headers (``traceparent``, and
``tracestate`` when present): the publisher calls :func:`inject`, the seat's turn calls
:func:`extract` and starts ``agent.turn`` as a child of what came back, so a webhook's span and
the turns it causes share one trace. The W3C propagator is used directly, whatever the global
propagator is set to, so the wire format is fixed.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["current_trace_ids", "extract", "inject", "traceparent_of"]

_W3C = TraceContextTextMapPropagator()


def inject(headers: MutableMapping[str, str], *, context: otel_context.Context | None = None) -> None:
    """Write ``traceparent`` (and ``tracestate``) for the current span into ``headers``.

    Args:
        headers: A NATS message's headers (or an HTTP request's); written in place.
        context: The context to propagate; None for the current one. Nothing is written when
            it holds no valid span.
    """
    _W3C.inject(headers, context=context)


def extract(headers: Mapping[str, str] | None) -> otel_context.Context:
    """Return the context carried by ``headers`` (empty when there is none or it is invalid).

    Args:
        headers: A NATS message's headers; nats-py gives None when a message has none.

    Returns:
        A context to pass as ``context=`` when starting the next span.
    """
    return _W3C.extract(dict(headers or {}))


def traceparent_of(span: trace.Span | None = None) -> dict[str, str]:
    """Return ``{"traceparent": ...}`` for ``span`` (None: the current span); {} when invalid."""
    out: dict[str, str] = {}
    ctx = trace.set_span_in_context(span) if span is not None else None
    inject(out, context=ctx)
    return out


def current_trace_ids() -> tuple[str, str] | None:
    """Return the current span's ``(trace_id, span_id)`` as 32/16 hex digits, or None outside
    any span (FL-6: log lines inside a span carry both)."""
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    return format(span_context.trace_id, "032x"), format(span_context.span_id, "016x")
