"""Telemetry seam: OpenTelemetry tracing, trace context across the broker, Prometheus metrics
(CO-21, CO-22, FL-6).

:func:`setup_tracing` builds the node's tracer provider (OTLP/HTTP export when configured);
the node calls :meth:`Telemetry.shutdown` after its drain. :func:`inject`/:func:`extract` carry
``traceparent`` in NATS headers. :class:`TurnMetrics` and :func:`metrics_app` serve ``/metrics``;
:data:`FLEET_SERIES` names the fleet view's series (the node's composition collects them, since it
reads lease and control state above this seam), :func:`count_webhook` the webhook intake and
:func:`init_alarm_series` a 0 series per alarm kind (ES-92).
The span names and ``gen_ai.*`` attribute keys of a turn live here; the turn engine emits them.
"""

from ._fleet import FLEET_SERIES
from ._intake import ALARM_KINDS, WEBHOOK_OUTCOMES, count_webhook, init_alarm_series, webhook_counter
from ._metrics import METRICS_CONTENT_TYPE, TurnMetrics, default_metrics, metrics_app
from ._propagation import current_trace_ids, extract, inject, traceparent_of
from ._setup import Telemetry, resolve_traces_endpoint, service_name_for, setup_tracing
from ._spans import (
    GEN_AI_AGENT_NAME,
    GEN_AI_INPUT_MESSAGES,
    GEN_AI_OPERATION_NAME,
    GEN_AI_OUTPUT_MESSAGES,
    GEN_AI_PROVIDER_NAME,
    GEN_AI_REQUEST_MAX_TOKENS,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_RESPONSE_FINISH_REASONS,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_SYSTEM_INSTRUCTIONS,
    GEN_AI_TOOL_CALL_ARGUMENTS,
    GEN_AI_TOOL_CALL_ID,
    GEN_AI_TOOL_CALL_RESULT,
    GEN_AI_TOOL_NAME,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
    SPAN_CHAT,
    SPAN_EXECUTE_TOOL,
    SPAN_PHASE,
    SPAN_TURN,
    add_trace_context,
    provider_name,
)

__all__ = [
    "ALARM_KINDS",
    "FLEET_SERIES",
    "WEBHOOK_OUTCOMES",
    "count_webhook",
    "init_alarm_series",
    "webhook_counter",
    "GEN_AI_AGENT_NAME",
    "GEN_AI_INPUT_MESSAGES",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_OUTPUT_MESSAGES",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_REQUEST_MAX_TOKENS",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "GEN_AI_RESPONSE_MODEL",
    "GEN_AI_SYSTEM_INSTRUCTIONS",
    "GEN_AI_TOOL_CALL_ARGUMENTS",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_CALL_RESULT",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "METRICS_CONTENT_TYPE",
    "SPAN_CHAT",
    "SPAN_EXECUTE_TOOL",
    "SPAN_PHASE",
    "SPAN_TURN",
    "Telemetry",
    "TurnMetrics",
    "add_trace_context",
    "current_trace_ids",
    "default_metrics",
    "extract",
    "inject",
    "metrics_app",
    "provider_name",
    "resolve_traces_endpoint",
    "service_name_for",
    "setup_tracing",
    "traceparent_of",
]
