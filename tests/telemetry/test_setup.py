"""Endpoint resolution, trace context in NATS headers, the log processor, turn metrics."""

from __future__ import annotations

import httpx
from opentelemetry.sdk.trace import TracerProvider

from shared import telemetry
from tests.turns.helpers import api_trigger, engine, example_org
from tests.turns.workspace import Estate


def test_endpoint_precedence() -> None:
    resolve = telemetry.resolve_traces_endpoint
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://tempo:4318/custom/traces",
    }
    assert resolve("http://mine:4318/", env) == "http://mine:4318/v1/traces"  # the node file wins
    assert resolve("http://mine:4318/v1/traces", {}) == "http://mine:4318/v1/traces"
    assert resolve("", env) == "http://tempo:4318/custom/traces"  # a full URL, as is
    assert (
        resolve("", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
        == "http://collector:4318/v1/traces"
    )
    assert resolve("", {}) is None


def test_no_endpoint_still_makes_spans_but_exports_nothing() -> None:
    tel = telemetry.setup_tracing(env={}, set_global=False)
    try:
        assert tel.endpoint is None
        with tel.tracer().start_as_current_span("x") as span:
            assert span.get_span_context().is_valid
    finally:
        tel.shutdown()


def test_service_names() -> None:
    assert telemetry.service_name_for(["data", "ingress", "seats", "workers"]) == "crewlet"
    assert telemetry.service_name_for(["seats"]) == "crewlet-seats"
    assert telemetry.service_name_for(["ingress", "data"]) == "crewlet-data-ingress"


def test_traceparent_round_trips_through_nats_headers() -> None:
    tracer = TracerProvider().get_tracer("t")
    headers: dict[str, str] = {"Nats-Msg-Id": "abc"}
    with tracer.start_as_current_span("webhook.receive") as span:
        telemetry.inject(headers)
        ids = telemetry.current_trace_ids()
    sent = span.get_span_context()
    assert ids == (format(sent.trace_id, "032x"), format(sent.span_id, "016x"))
    assert headers["traceparent"].startswith(f"00-{ids[0]}-{ids[1]}-")  # flags: sampled (+ random id)
    got = telemetry.extract(headers)
    with tracer.start_as_current_span("agent.turn", context=got) as child:
        assert child.get_span_context().trace_id == sent.trace_id
        assert child.parent is not None and child.parent.span_id == sent.span_id  # type: ignore[attr-defined]
    assert telemetry.traceparent_of(span) == {"traceparent": headers["traceparent"]}
    assert telemetry.current_trace_ids() is None  # outside any span
    with tracer.start_as_current_span("root", context=telemetry.extract(None)) as root:
        assert root.parent is None  # type: ignore[attr-defined]


def test_log_lines_carry_trace_ids_only_inside_a_span() -> None:
    tracer = TracerProvider().get_tracer("t")
    outside = telemetry.add_trace_context(None, "info", {"event": "x"})
    assert "trace_id" not in outside and "span_id" not in outside
    with tracer.start_as_current_span("s") as span:
        inside = telemetry.add_trace_context(None, "info", {"event": "x"})
    assert inside["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert inside["span_id"] == format(span.get_span_context().span_id, "016x")


async def test_turn_metrics_and_the_metrics_app() -> None:
    metrics = telemetry.TurnMetrics()
    eng = engine(example_org(), metrics=metrics)
    await eng.run("triage", api_trigger("Crash"), workspace=Estate().workspace("triage"))
    text = metrics.render().decode()
    assert 'crewlet_turns_total{outcome="delivered",seat="triage"} 1.0' in text
    assert (
        'crewlet_llm_rounds_total{model="crewlet-offline-1",provider_key="default",seat="triage"} 3.0' in text
    )
    assert 'crewlet_tool_calls_total{seat="triage",status="ok",tool="create_work_item"} 1.0' in text
    assert "crewlet_turns_in_flight 0.0" in text
    tokens = [
        line
        for line in text.splitlines()
        if line.startswith("crewlet_llm_tokens_total{") and 'kind="input"' in line
    ]
    assert len(tokens) == 1 and float(tokens[0].split()[-1]) > 0
    transport = httpx.ASGITransport(app=telemetry.metrics_app(metrics))
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
        response = await client.get("/")
    assert response.status_code == 200 and "crewlet_turns_total" in response.text
