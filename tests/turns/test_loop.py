"""The executor's tool loop (CO-16), guards and failure classes (CO-18), the fence (FL-74)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared import providers, tools, turns
from shared.config import validate_offline_script_data
from shared.providers import ProviderChain
from tests.support.llm_servers import (
    AnthropicServer,
    OpenAIServer,
    anthropic_tools,
    openai_text,
    openai_tools,
)
from tests.turns.helpers import api_trigger, engine, example_org, make_org, wake, with_providers
from tests.turns.workspace import Estate


def offline_chain(*steps: dict[str, Any], final: str = "done") -> ProviderChain:
    """A chain of one offline provider whose only rule runs ``steps`` for any seat."""
    script, issues = validate_offline_script_data({"rules": [{"steps": list(steps), "final": final}]})
    assert script is not None, issues
    return ProviderChain(["scripted"], [providers.OfflineProvider("scripted", script=script)])


SUBMIT = {
    "tool": "submit_work",
    "args": {"outcome": "delivered", "summary": "filed it", "deliveries": ["SUP-1"]},
}


@pytest.mark.parametrize("wire", ["openai-compatible", "anthropic"])
async def test_two_tool_rounds_then_submit_work(wire: str) -> None:
    create = ("create_work_item", {"project": "SUP", "title": "Crash on empty config", "assignee": "lead"})
    comment = ("comment_on_work_item", {"key": "SUP-1", "body": "Routed to lead."})
    read = ("get_work_item", {"key": "SUP-1"})
    submit = ("submit_work", {"outcome": "delivered", "summary": "Filed SUP-1", "deliveries": ["SUP-1"]})
    server: OpenAIServer | AnthropicServer
    if wire == "anthropic":
        server = AnthropicServer(
            [anthropic_tools(create), anthropic_tools(comment, read), anthropic_tools(submit)]
        )
    else:
        server = OpenAIServer([openai_tools(create), openai_tools(comment, read), openai_tools(submit)])
    recorder = turns.MemoryRecorder()
    estate = Estate()
    with server:
        entry = {"type": wire, "model": "scripted", "base_url": server.base_url, "api_keys": ["k"]}
        eng = engine(make_org(with_providers({"main": entry}, "main")), recorder=recorder)
        try:
            result = await eng.run(
                "triage", api_trigger("Crash when config file is empty"), workspace=estate.workspace("triage")
            )
        finally:
            await eng.providers.aclose()
        bodies = [s.body for s in server.seen]

    assert result.outcome == "delivered", result.error
    assert result.submission is not None and result.submission.summary == "Filed SUP-1"
    assert [c.name for c in result.tool_calls] == [
        "create_work_item",
        "comment_on_work_item",
        "get_work_item",
        "submit_work",
        "submit_review",  # the reviewer's (CO-30), answered by the server's default `done`
    ]
    assert not any(c.is_error for c in result.tool_calls)
    assert result.deliveries == ["create_work_item", "comment_on_work_item"]
    assert [(r.phase, r.round) for r in result.rounds] == [
        ("execute", 1),
        ("execute", 2),
        ("execute", 3),
        ("review", 1),
    ]
    assert result.input_tokens == 400 and result.output_tokens == 40
    assert (result.decision, result.iterations) == ("done", 1)
    assert (
        estate.items["SUP-1"]["assignee"] == "lead" and estate.comments["SUP-1"][0]["author"] == "seat:triage"
    )
    assert result.work_item is not None and (result.work_item.key, result.work_item.basis) == (
        "SUP-1",
        "sole_write",
    )
    # The first call's id comes back with its result in the second request.
    first_id = result.rounds[0].tool_calls[0].id
    if wire == "anthropic":
        results = [b for m in bodies[1]["messages"] for b in m["content"] if b["type"] == "tool_result"]
        assert results[0]["tool_use_id"] == first_id and "SUP-1" in results[0]["content"]
        assert len(bodies[2]["messages"]) == 5  # user, assistant, user(results), assistant, user(results)
    else:
        tool_messages = [m for m in bodies[1]["messages"] if m["role"] == "tool"]
        assert tool_messages[0]["tool_call_id"] == first_id and "SUP-1" in tool_messages[0]["content"]
    assert recorder.names(result.turn_id) == [
        "agent_turn_started",
        "agent_phase_started",
        *["round", "tool_execution"],
        *["round", "tool_execution", "tool_execution"],
        *["round", "tool_execution"],
        "agent_phase_completed",
        *["agent_phase_started", "round", "tool_execution", "agent_phase_completed"],  # review
        "agent_turn_completed",
    ]


async def test_unknown_tool_and_bad_arguments_become_results_the_model_reads() -> None:
    # CO-16's check: an unknown tool, then a tracker tool missing a required argument, then submit.
    chain = offline_chain(
        {"tool": "frobnicate", "args": {"x": "1"}},
        {"tool": "create_work_item", "args": {"project": "SUP"}},
        {
            "tool": "submit_work",
            "args": {"outcome": "blocked", "summary": "could not file", "evidence": "tools refused"},
        },
    )
    estate = Estate()
    result = await engine(example_org()).run(
        "triage", api_trigger(), workspace=estate.workspace("triage"), chain=chain
    )
    assert result.outcome == "blocked"
    errors = [m for m in result.messages if isinstance(m, providers.ToolResultMessage) and m.is_error]
    assert len(errors) == 2
    assert json.loads(errors[0].content)["code"] == "unknown_tool"
    assert json.loads(errors[1].content) == {
        "error": "invalid arguments: title: required",
        "code": "invalid_arguments",
        "field": "title",
    }
    assert [c.error_code for c in result.tool_calls] == ["unknown_tool", "invalid_arguments", None, None]
    assert [c.name for c in result.tool_calls][-1] == "submit_review"
    assert estate.items == {}


async def test_unparsable_arguments_are_an_error_result() -> None:
    blocked = {"outcome": "blocked", "summary": "gave up", "evidence": "the tracker call did not parse"}
    script = [
        openai_tools(("create_work_item", "{oops")),
        openai_text("gave up"),  # prose: a corrective follows (CO-32)
        openai_tools(("submit_work", blocked)),
    ]
    with OpenAIServer(script) as server:
        entry = {"type": "openai-compatible", "model": "m", "base_url": server.base_url}
        eng = engine(make_org(with_providers({"main": entry}, "main")))
        try:
            result = await eng.run("triage", api_trigger(), workspace=Estate().workspace("triage"))
        finally:
            await eng.providers.aclose()
    call = result.tool_calls[0]
    assert call.is_error and call.error_code == "invalid_arguments" and call.raw_arguments == "{oops"
    assert result.outcome == "blocked" and result.final_text == "gave up"
    assert result.phase.correctives == 1


async def test_the_round_cap_ends_incomplete() -> None:
    # CO-16's check: a scripted 25-round loop ends incomplete after 24.
    chain = offline_chain(*[{"tool": "list_work_items", "args": {}}] * 25)
    result = await engine(example_org()).run(
        "triage", api_trigger(), workspace=Estate().workspace("triage"), chain=chain
    )
    assert result.outcome == "incomplete"
    assert len(result.rounds) == 24 and len(result.tool_calls) == 24
    assert result.phase.max_rounds == 24 and not result.failed


async def test_fence_false_before_a_write_stops_the_turn_and_the_write_is_not_made() -> None:
    answers = iter([True, False])  # the round may start; the write may not

    async def fence() -> bool:
        return next(answers)

    estate = Estate()
    result = await engine(example_org()).run(
        "triage", api_trigger("Crash"), workspace=estate.workspace("triage"), fence=fence
    )
    assert result.outcome == "fenced" and result.error_kind == "fenced"
    assert estate.items == {} and estate.writes == []
    assert len(result.rounds) == 1 and result.tool_calls == []
    assert result.redeliver  # FL-74: the delivery is deferred


async def test_fence_false_or_broken_before_a_round_calls_no_provider() -> None:
    async def lost() -> bool:
        return False

    async def broken() -> bool:
        raise ConnectionError("store unreachable")

    with OpenAIServer([openai_text("never")]) as server:
        entry = {"type": "openai-compatible", "model": "m", "base_url": server.base_url}
        eng = engine(make_org(with_providers({"main": entry}, "main")))
        try:
            for fence in (lost, broken):
                result = await eng.run(
                    "triage", api_trigger(), workspace=Estate().workspace("triage"), fence=fence
                )
                assert result.outcome == "fenced" and result.rounds == []
        finally:
            await eng.providers.aclose()
        assert server.seen == []


async def test_reads_are_not_fenced() -> None:
    checks = 0

    async def fence() -> bool:
        nonlocal checks
        checks += 1
        return checks == 1  # only the first round passes

    chain = offline_chain(
        {"tool": "list_work_items", "args": {}}, {"tool": "get_work_item", "args": {"key": "SUP-9"}}
    )
    result = await engine(example_org()).run(
        "triage", api_trigger(), workspace=Estate().workspace("triage"), chain=chain, fence=fence
    )
    assert [c.name for c in result.tool_calls] == ["list_work_items"]
    assert result.outcome == "fenced" and checks == 2  # round 1, then round 2 refused


async def test_a_defect_in_a_tool_fails_the_turn_unhandled_exception() -> None:
    async def explode(args: dict[str, Any], ctx: tools.ToolContext) -> Any:
        raise RuntimeError("bug in handler")

    surface = tools.builtin_tools()
    surface.add(tools.Tool("explode", "Breaks.", {"type": "object"}, explode))
    recorder = turns.MemoryRecorder()
    chain = offline_chain({"tool": "list_work_items", "args": {}}, {"tool": "explode", "args": {}})
    eng = engine(example_org(), tools=surface, recorder=recorder)
    result = await eng.run("triage", api_trigger(), workspace=Estate().workspace("triage"), chain=chain)
    assert result.outcome == "failed" and result.error_kind == "unhandled_exception"
    assert "bug in handler" in (result.error or "")
    assert not result.redeliver  # CO-11: a redelivery would hit the same defect
    assert len(result.rounds) == 2
    assert [c.error_code for c in result.tool_calls] == [None, "unhandled_exception"]
    phases = [p for n, _, p in recorder.events if n == "agent_phase_completed"]
    assert len(phases) == 1 and phases[0].failed and phases[0].rounds == 2


async def test_max_tokens_fails_the_phase_without_running_its_tools() -> None:
    cut = openai_tools(("create_work_item", {"project": "SUP", "title": "x"}))
    cut.body["choices"][0]["finish_reason"] = "length"
    estate = Estate()
    with OpenAIServer([cut]) as server:
        entry = {"type": "openai-compatible", "model": "m", "base_url": server.base_url}
        eng = engine(make_org(with_providers({"main": entry}, "main")))
        try:
            result = await eng.run("triage", api_trigger(), workspace=estate.workspace("triage"))
        finally:
            await eng.providers.aclose()
    assert (result.outcome, result.error_kind) == ("failed", "max_tokens")
    assert result.tool_calls == [] and estate.items == {} and not result.redeliver


async def test_a_text_answer_is_the_engine_reply() -> None:
    # CO-8/CO-16: on an engine-owed API message the executor's text is the reply handed back.
    submit = {"outcome": "delivered", "summary": "answered"}
    script = [openai_tools(("submit_work", submit), text="Here is your answer.")]
    with OpenAIServer(script) as server:
        entry = {"type": "openai-compatible", "model": "m", "base_url": server.base_url}
        eng = engine(make_org(with_providers({"main": entry}, "main")))
        try:
            result = await eng.run("triage", api_trigger(), workspace=Estate().workspace("triage"))
        finally:
            await eng.providers.aclose()
    assert result.reply_mode == "engine"
    assert result.outcome == "delivered" and result.final_text == "Here is your answer."
    assert result.reply == "Here is your answer."


async def test_tool_results_are_cleaned_and_redacted() -> None:
    async def leak(args: dict[str, Any], ctx: tools.ToolContext) -> Any:
        return {"text": "token=s3cr3t-value\x00\x1b[31m ok\n"}

    surface = tools.builtin_tools()
    surface.add(tools.Tool("leak", "Leaks.", {"type": "object"}, leak))
    eng = engine(example_org(), tools=surface, secrets=["s3cr3t-value", "abc"])
    result = await eng.run(
        "triage",
        api_trigger(),
        workspace=Estate().workspace("triage"),
        chain=offline_chain({"tool": "leak", "args": {}}),
    )
    call = result.tool_calls[0]
    assert call.name == "leak"
    assert "s3cr3t-value" not in call.content and "[redacted]" in call.content
    assert "\x00" not in call.content and "\x1b" not in call.content
    assert result.messages[2].content == call.content  # type: ignore[union-attr]


async def test_human_and_unknown_seats_are_refused() -> None:
    eng = engine(example_org())
    for handle in ("founder", "nobody"):
        with pytest.raises(turns.SeatNotRunnable):
            await eng.run(handle, api_trigger(), workspace=Estate().workspace(handle))


async def test_a_wake_is_charged_to_its_item_and_a_redelivery_keeps_the_work_key() -> None:
    estate = Estate()
    eng = engine(example_org())
    await eng.run("triage", api_trigger("Crash"), workspace=estate.workspace("triage"))
    trigger = wake("SUP-1")
    first = await eng.run("lead", trigger, workspace=estate.workspace("lead"))
    again = await eng.run("lead", trigger, workspace=estate.workspace("lead"))
    assert first.turn_id != again.turn_id and first.work_key == again.work_key == trigger.work_key
    assert first.work_item == turns.WorkItemCharge("SUP-1", estate.items["SUP-1"]["id"], "SUP", "trigger")


async def test_a_guard_refusal_is_recorded_failed_without_running() -> None:
    # CO-11 step 4: delegation_depth >= limit -> turn.guard_breach{depth_cap}, recorded failed, acked.
    recorder = turns.MemoryRecorder()
    estate = Estate()
    eng = engine(example_org(), recorder=recorder)
    trigger = api_trigger("Crash", delegation_depth=3)
    result = await eng.refuse(
        "triage",
        trigger,
        kind="depth_cap",
        error="delegation depth 3 >= 3",
        workspace=estate.workspace("triage"),
    )
    assert (result.outcome, result.error_kind, result.rounds, result.redeliver) == (
        "failed",
        "depth_cap",
        [],
        False,
    )
    assert recorder.names() == ["agent_turn_started", "agent_turn_completed"] and estate.writes == []
