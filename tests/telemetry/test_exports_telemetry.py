"""Pin the public API of ``shared.telemetry`` (STYLE: a test pins ``__all__``)."""

from __future__ import annotations

from shared import telemetry

EXPECTED = [
    "ALARM_KINDS",
    "FLEET_SERIES",
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
    "WEBHOOK_OUTCOMES",
    "add_trace_context",
    "count_webhook",
    "current_trace_ids",
    "default_metrics",
    "extract",
    "init_alarm_series",
    "inject",
    "metrics_app",
    "provider_name",
    "resolve_traces_endpoint",
    "service_name_for",
    "setup_tracing",
    "traceparent_of",
    "webhook_counter",
]


def test_all_is_pinned_and_every_name_resolves() -> None:
    assert sorted(telemetry.__all__) == EXPECTED
    for name in EXPECTED:
        assert getattr(telemetry, name) is not None
