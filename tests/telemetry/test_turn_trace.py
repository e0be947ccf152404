"""A turn's span tree arrives at a loopback OTLP/HTTP receiver (CO-21, FL-6)."""

from __future__ import annotations

import pytest
from opentelemetry import trace

from shared import telemetry, turns
from tests.support.llm_servers import OpenAIServer, openai_tools
from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.turns.helpers import api_trigger, engine, example_org, make_org, with_providers
from tests.turns.workspace import Estate

WEBHOOK_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
WEBHOOK_SPAN = "00f067aa0ba902b7"


async def _scripted_turn(tracer: trace.Tracer, *, capture: bool = False) -> turns.TurnResult:
    """Two executor rounds, four tool calls (one of them an error, the last ``submit_work``), then
    the review's round and ``submit_review`` (CO-30), under a webhook's trace context."""
    calls = (
        ("create_work_item", {"project": "SUP", "title": "Crash", "assignee": "lead"}),
        ("get_work_item", {"key": "SUP-1"}),
        ("get_work_item", {"key": "SUP-404"}),
    )
    with OpenAIServer(
        [
            openai_tools(*calls, prompt_tokens=120),
            openai_tools(
                ("submit_work", {"outcome": "delivered", "summary": "Filed SUP-1."}),
                text="Filed SUP-1.",
                prompt_tokens=300,
            ),
        ]
    ) as server:
        entry = {"type": "openai-compatible", "model": "qwen-test", "base_url": server.base_url}
        eng = engine(
            make_org(with_providers({"main": entry}, "main")), tracer=tracer, capture_content=capture
        )
        trigger = api_trigger(
            "Crash when config file is empty",
            trace_headers={"traceparent": f"00-{WEBHOOK_TRACE}-{WEBHOOK_SPAN}-01"},
        )
        try:
            return await eng.run("triage", trigger, workspace=Estate().workspace("triage"))
        finally:
            await eng.providers.aclose()


def _one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    [span] = [s for s in spans if s.name == name]
    return span


async def test_span_tree_parents_and_genai_attributes(receiver: OtlpReceiver) -> None:
    tel = telemetry.setup_tracing(
        service_name="crewlet",
        node_id="node-a",
        company="Lanternfish Labs",
        otlp_endpoint=receiver.endpoint,
        set_global=False,
    )
    try:
        result = await _scripted_turn(tel.tracer("crewlet.turns"))
        assert tel.force_flush()
    finally:
        tel.shutdown()
    spans = receiver.wait_for("agent.turn", "agent.turn.execute", "agent.turn.review")
    # CO-21's check: 1 turn + 1 execute (2 chat, 4 tools) + 1 review (1 chat, 1 tool), nothing else.
    assert sorted(s.name for s in spans) == sorted(
        ["agent.turn", "agent.turn.execute", "chat scripted-model", "chat scripted-model"]
        + ["execute_tool create_work_item", "execute_tool get_work_item", "execute_tool get_work_item"]
        + ["execute_tool submit_work"]
        + ["agent.turn.review", "chat scripted-model", "execute_tool submit_review"]
    )
    turn, phase = _one(spans, "agent.turn"), _one(spans, "agent.turn.execute")
    review = _one(spans, "agent.turn.review")
    assert {s.trace_id for s in spans} == {WEBHOOK_TRACE}
    assert turn.parent_span_id == WEBHOOK_SPAN  # a child of the trigger's context
    assert phase.parent_span_id == turn.span_id and review.parent_span_id == turn.span_id
    for s in spans:
        if s.name.startswith(("chat ", "execute_tool ")):
            expected = review if s.attributes.get("crewlet.phase") == "review" else phase
            assert s.parent_span_id == expected.span_id

    assert turn.resource["service.name"] == "crewlet"
    assert turn.resource["service.instance.id"] == "node-a"
    assert turn.resource["crewlet.company"] == "Lanternfish Labs"
    a = turn.attributes
    assert a["gen_ai.operation.name"] == "invoke_agent" and a["gen_ai.agent.name"] == "triage"
    assert a["crewlet.turn_id"] == result.turn_id and a["crewlet.work_key"] == result.work_key
    assert a["crewlet.seat.handle"] == "triage" and a["crewlet.trigger.id"] == result.start.trigger.event_id
    assert a["crewlet.outcome"] == result.outcome == "delivered"
    assert a["crewlet.work_item"] == "SUP-1"
    # Token attributes equal the turn record (CO-21).
    assert (
        (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"])
        == (result.input_tokens, result.output_tokens)
        == (520, 30)  # the review's round: 100 in, 10 out
    )
    assert result.start.trace_id == WEBHOOK_TRACE

    chats = sorted(
        (s for s in spans if s.name.startswith("chat ") and s.attributes["crewlet.phase"] == "execute"),
        key=lambda s: s.attributes["crewlet.round"],
    )
    assert [c.attributes["gen_ai.usage.input_tokens"] for c in chats] == [120, 300]
    for c in chats:
        assert c.attributes["gen_ai.operation.name"] == "chat"
        assert c.attributes["gen_ai.provider.name"] == "openai"
        assert c.attributes["gen_ai.request.model"] == "qwen-test"
        assert c.attributes["gen_ai.response.model"] == "scripted-model"
        assert c.attributes["crewlet.provider_key"] == "main"
        assert "gen_ai.input.messages" not in c.attributes  # capture_content is off
    assert chats[0].attributes["gen_ai.response.finish_reasons"] == ["tool_use"]

    tools_ = [s for s in spans if s.name.startswith("execute_tool ")]
    for t in tools_:
        assert t.attributes["gen_ai.operation.name"] == "execute_tool"
        assert t.attributes["gen_ai.tool.name"] == t.name.removeprefix("execute_tool ")
        assert t.attributes["gen_ai.tool.call.id"].startswith("call_")
        assert t.attributes["crewlet.tool.origin"] == "builtin"
    failed = [t for t in tools_ if t.status_code == 2]
    assert len(failed) == 1 and failed[0].name == "execute_tool get_work_item"
    assert _one(spans, "execute_tool create_work_item").attributes["crewlet.tool.delivers"] is True


async def test_content_is_captured_only_when_asked(receiver: OtlpReceiver) -> None:
    tel = telemetry.setup_tracing(otlp_endpoint=receiver.endpoint, set_global=False)
    try:
        await _scripted_turn(tel.tracer(), capture=True)
    finally:
        tel.shutdown()
    spans = receiver.wait_for("agent.turn")
    chat = next(s for s in spans if s.name.startswith("chat "))
    assert "Crash when config file is empty" in chat.attributes["gen_ai.input.messages"]
    assert "## Identity" in chat.attributes["gen_ai.system_instructions"]
    tool = _one(spans, "execute_tool create_work_item")
    assert '"project":"SUP"' in tool.attributes["gen_ai.tool.call.arguments"]
    assert "SUP-1" in tool.attributes["gen_ai.tool.call.result"]


async def test_shutdown_flushes_after_a_drain_gzip_and_global_provider(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # FL-6: spans queued by the batch processor go out on shutdown, with no explicit flush;
    # the endpoint comes from OTEL_EXPORTER_OTLP_ENDPOINT; the exporter honours gzip.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    tel = telemetry.setup_tracing(service_name=telemetry.service_name_for(["seats"]), node_id="n1")
    assert tel.endpoint == receiver.endpoint + "/v1/traces"
    assert trace.get_tracer_provider() is tel.provider
    result = await engine(example_org()).run(
        "triage", api_trigger("Crash"), workspace=Estate().workspace("triage")
    )
    assert result.outcome == "delivered"
    tel.shutdown()
    spans = receiver.wait_for("agent.turn", "chat crewlet-offline-1", count=1)
    assert receiver.gzipped >= 1
    turn = _one(spans, "agent.turn")
    assert turn.resource["service.name"] == "crewlet-seats" and turn.parent_span_id == ""
    chat = next(s for s in spans if s.name == "chat crewlet-offline-1")
    assert chat.attributes["gen_ai.provider.name"] == "crewlet.offline"
