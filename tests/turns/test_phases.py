"""Executor → reviewer phases (CO-30), the reply obligation (CO-31), correctives and rescue
(CO-32), the P1 guards (CO-18: stall, max_iter, scheduled_timeout) and Retry-After on the record."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shared import providers, turns
from shared.config import LlmPhases, validate_offline_script_data
from shared.providers import ProviderChain
from tests.support.llm_servers import (
    OpenAIServer,
    Reply,
    finish_reply,
    is_review,
    openai_text,
    openai_tools,
    review_reply,
)
from tests.turns.helpers import EXAMPLES, api_trigger, engine, example_org, make_org, wake, with_providers
from tests.turns.workspace import Estate


def _server_engine(server: OpenAIServer, **kwargs: Any) -> turns.TurnEngine:
    entry = {"type": "openai-compatible", "model": "m", "base_url": server.base_url, "api_keys": ["k"]}
    return engine(make_org(with_providers({"main": entry}, "main")), **kwargs)


async def _seed(estate: Estate) -> None:
    await estate.workspace("triage").create_work_item("SUP", "task", "Crash on empty config", "body", "lead")


def _submit(outcome: str = "delivered", summary: str = "done", **extra: Any) -> Reply:
    return openai_tools(("submit_work", {"outcome": outcome, "summary": summary, **extra}))


def _user_text(body: Any) -> str:
    return str(next(m["content"] for m in body["messages"] if m["role"] == "user"))


def _results(body: Any) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


async def test_self_iterate_then_done_runs_two_iterations_without_repeating_writes(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    # CO-30's check: iterations 2, spans execute x2 and review x2, no duplicated tracker comment.
    provider, exporter = spans
    estate = Estate()
    await _seed(estate)
    comment = ("comment_on_work_item", {"key": "SUP-1", "body": "Looking into it."})
    page = ("write_page", {"space": "ENG", "title": "Notes SUP-1", "body": "Plan: reproduce, fix."})
    recorder = turns.MemoryRecorder()
    with OpenAIServer(
        [openai_tools(comment), _submit(summary="commented"), openai_tools(page), _submit(summary="plan")]
    ) as server:
        server.reviews += [
            review_reply(OpenAIServer, "self_iterate", "Write the plan down as an ENG page."),
            review_reply(OpenAIServer, "done", "Comment and plan are there.", final_artifact="Plan filed."),
        ]
        eng = _server_engine(server, recorder=recorder, tracer=provider.get_tracer("t"))
        try:
            result = await eng.run("lead", wake("SUP-1"), workspace=estate.workspace("lead"))
        finally:
            await eng.providers.aclose()
        second = server.seen[2].body
        review_prompt = _user_text(server.review_seen[0].body)

    assert (result.outcome, result.decision, result.iterations) == ("delivered", "done", 2), result.error
    assert [(p.phase, p.iteration) for p in result.phases] == [
        ("execute", 1),
        ("review", 1),
        ("execute", 2),
        ("review", 2),
    ]
    assert [p.decision for p in result.phases] == [None, "self_iterate", None, "done"]
    assert len(estate.comments["SUP-1"]) == 1  # the second pass did not comment again
    assert ("ENG", "Notes SUP-1") in estate.pages
    # the second executor pass starts fresh, carrying the ledger and the reviewer's notes
    ledger = _user_text(second)
    assert "## Prior work" in ledger and "[done] comment_on_work_item" in ledger
    assert "Write the plan down as an ENG page." in ledger
    assert [m["role"] for m in second["messages"]] == ["system", "user"]
    # the reviewer saw the obligation, the result and the work, and had one tool
    assert "A reply is owed through a tool" in review_prompt and "Summary: commented" in review_prompt
    assert [t["function"]["name"] for t in server.review_seen[0].body["tools"]] == ["submit_review"]
    assert result.reply == "Plan filed."
    names = [s.name for s in exporter.get_finished_spans()]
    assert names.count("agent.turn.execute") == 2 and names.count("agent.turn.review") == 2
    assert names.count("agent.turn") == 1
    events = [n for n in recorder.names(result.turn_id) if n.startswith("agent_phase")]
    assert events == ["agent_phase_started", "agent_phase_completed"] * 4


async def test_a_write_repeated_word_for_word_in_a_later_pass_is_not_run_again() -> None:
    # the tryout's case: the model ignores the ledger and makes the same comment again
    estate = Estate()
    await _seed(estate)
    comment = ("comment_on_work_item", {"key": "SUP-1", "body": "Looking into it."})
    other = ("comment_on_work_item", {"key": "SUP-1", "body": "Root cause found."})
    script = [openai_tools(comment), _submit(summary="commented")]
    script += [openai_tools(comment), openai_tools(other), _submit(summary="commented again")]
    with OpenAIServer(script) as server:
        server.reviews += [
            review_reply(OpenAIServer, "self_iterate", "Say what the root cause is."),
            review_reply(OpenAIServer, "done", "Fine."),
        ]
        eng = _server_engine(server)
        try:
            result = await eng.run("lead", wake("SUP-1"), workspace=estate.workspace("lead"))
        finally:
            await eng.providers.aclose()
        repeated = _results(server.seen[3].body)[-1]
    assert (result.outcome, result.iterations) == ("delivered", 2), result.error
    bodies = [c["body"] for c in estate.comments["SUP-1"]]
    assert bodies == ["Looking into it.", "Root cause found."], bodies
    assert repeated["already_done"] is True and "call 1" in repeated["note"]
    again = [t for t in result.tool_calls if t.iteration == 2 and t.name == "comment_on_work_item"]
    assert [(t.is_error, t.delivered) for t in again] == [(False, False), (False, True)]
    assert result.deliveries == ["comment_on_work_item", "comment_on_work_item"]


async def test_prose_twice_then_submit_work_completes() -> None:
    # CO-32's check, first half: two correctives, then the closing call.
    script = [openai_text("Thinking."), openai_text("Still thinking."), _submit(summary="answered")]
    with OpenAIServer(script) as server:
        eng = _server_engine(server)
        try:
            result = await eng.run("triage", api_trigger(), workspace=Estate().workspace("triage"))
        finally:
            await eng.providers.aclose()
        third = server.seen[2].body
    assert result.outcome == "delivered" and result.decision == "done", result.error
    assert result.phase.correctives == 2 and not result.phase.rescued
    correctives = [m["content"] for m in third["messages"] if m["role"] == "user"][1:]
    assert len(correctives) == 2 and all("`submit_work`" in c for c in correctives)
    assert third["tool_choice"] == "auto"


async def test_prose_three_times_is_incomplete_and_not_reviewed() -> None:
    # CO-32's check, second half: the third no-tool round rescues the executor as incomplete.
    with OpenAIServer([openai_text("a"), openai_text("b"), openai_text("c")]) as server:
        eng = _server_engine(server)
        try:
            result = await eng.run("triage", api_trigger(), workspace=Estate().workspace("triage"))
        finally:
            await eng.providers.aclose()
        assert server.review_seen == []
    assert result.outcome == "incomplete" and not result.failed
    assert result.phase.rescued and result.phase.correctives == 2
    assert [p.phase for p in result.phases] == ["execute"]
    assert result.reply == ""  # an incomplete turn delivered nothing (CO-8)


async def test_a_tool_call_resets_the_corrective_count() -> None:
    script = [
        openai_text("a"),
        openai_text("b"),
        openai_tools(("list_work_items", {})),
        openai_text("c"),
        openai_text("d"),
        _submit(),
    ]
    with OpenAIServer(script) as server:
        eng = _server_engine(server)
        try:
            result = await eng.run("triage", api_trigger(), workspace=Estate().workspace("triage"))
        finally:
            await eng.providers.aclose()
    assert result.outcome == "delivered" and result.phase.correctives == 4


async def test_a_tool_owed_review_request_whose_executor_only_reads_is_never_delivered() -> None:
    # CO-31's check: a GitHub review request (tool-owed) whose executor only reads.
    estate = Estate()
    await _seed(estate)
    trigger = turns.Trigger(
        event_id=str(uuid.uuid4()),
        source="github",
        reason="review_requested",
        text="[github pull_request.review_requested] please review",
        work_item={"key": "SUP-1"},
    )
    script = [
        openai_tools(("get_work_item", {"key": "SUP-1"})),
        _submit(summary="reviewed the change", deliveries=["SUP-1"]),
        _submit(outcome="no_action", summary="nothing to add"),
        openai_text("I have read it."),
        openai_text("Nothing else."),
        openai_text("Done."),
    ]
    with OpenAIServer(script) as server:
        eng = _server_engine(server)
        try:
            result = await eng.run("lead", trigger, workspace=estate.workspace("lead"))
        finally:
            await eng.providers.aclose()
    assert result.reply_mode == "tool"
    assert result.outcome != "delivered" and result.outcome == "incomplete"
    refusals = [c.error_code for c in result.tool_calls if c.name == "submit_work"]
    assert refusals == ["not_delivered", "reply_owed"]
    assert result.deliveries == [] and estate.comments.get("SUP-1") is None


async def test_done_with_nothing_on_the_askers_surface_is_overturned() -> None:
    # CO-31 after review: blocked on an assignment, told nobody; the reviewer says done anyway.
    estate = Estate()
    await _seed(estate)
    blocked = {"summary": "blocked", "evidence": "needs the crash log"}
    script = [
        _submit("blocked", **blocked),
        openai_tools(("comment_on_work_item", {"key": "SUP-1", "body": "Blocked: please attach the log."})),
        _submit("blocked", summary="blocked, asked for the log", evidence="needs the crash log"),
    ]
    with OpenAIServer(script) as server:
        eng = _server_engine(server)
        try:
            result = await eng.run("lead", wake("SUP-1"), workspace=estate.workspace("lead"))
        finally:
            await eng.providers.aclose()
        assert len(server.review_seen) == 2  # both reviews said done; the first was overturned
    assert (result.outcome, result.decision, result.iterations) == ("blocked", "done", 2)
    first_review = result.phases[1]
    assert first_review.decision == "self_iterate" and "Nothing reached the asker" in first_review.notes
    assert len(estate.comments["SUP-1"]) == 1


async def test_an_unasked_no_action_ends_the_turn_without_review() -> None:
    trigger = turns.Trigger(event_id=str(uuid.uuid4()), type="task_assigned", source="schedule", text="Tidy")
    chain = offline_chain(
        {"tool": "list_work_items", "args": {}},
        {"tool": "submit_work", "args": {"outcome": "no_action", "summary": "nothing to tidy"}},
    )
    result = await engine(example_org()).run(
        "triage", trigger, workspace=Estate().workspace("triage"), chain=chain
    )
    assert (result.reply_mode, result.outcome, result.decision) == ("none", "no_action", "skipped")
    assert [p.phase for p in result.phases] == ["execute"]


async def test_a_refuted_claim_loops_back_with_a_correction() -> None:
    # CO-31 before review: "delivered" on an unowed turn with no delivering call.
    trigger = turns.Trigger(event_id=str(uuid.uuid4()), type="task_assigned", source="api", text="Check")
    script = [
        _submit(summary="all checked"),
        _submit(outcome="no_action", summary="nothing needed doing"),
    ]
    with OpenAIServer(script) as server:
        eng = _server_engine(server)
        try:
            result = await eng.run("triage", trigger, workspace=Estate().workspace("triage"))
        finally:
            await eng.providers.aclose()
        second = _user_text(server.seen[1].body)
    assert "Correction: you submitted 'delivered', but no call of this turn delivered" in second
    assert (result.outcome, result.decision, result.iterations) == ("no_action", "skipped", 2)
    assert server.review_seen == []


async def test_two_self_iterates_of_the_same_artifact_stall() -> None:
    script = [_submit(summary="same"), _submit(summary="same")]
    with OpenAIServer(script) as server:
        server.reviews += [review_reply(OpenAIServer, "self_iterate", "more")] * 2
        eng = _server_engine(server)
        try:
            result = await eng.run("triage", api_trigger(), workspace=Estate().workspace("triage"))
        finally:
            await eng.providers.aclose()
    assert (result.outcome, result.error_kind, result.iterations) == ("failed", "stall", 2)
    assert not result.redeliver


async def test_max_iterations_then_max_iter() -> None:
    script = [_submit(summary="one"), _submit(summary="two"), _submit(summary="three")]
    with OpenAIServer(script) as server:
        server.reviews += [review_reply(OpenAIServer, "self_iterate", "again")] * 3
        eng = _server_engine(server)
        try:
            result = await eng.run("triage", api_trigger(), workspace=Estate().workspace("triage"))
        finally:
            await eng.providers.aclose()
    assert (result.outcome, result.error_kind, result.iterations) == ("failed", "max_iter", 3)
    assert [p.phase for p in result.phases] == ["execute", "review"] * 3


async def test_reviewer_failed_fails_the_turn() -> None:
    with OpenAIServer([_submit()]) as server:
        server.reviews.append(review_reply(OpenAIServer, "failed", "the ask cannot be met"))
        eng = _server_engine(server)
        try:
            result = await eng.run("triage", api_trigger(), workspace=Estate().workspace("triage"))
        finally:
            await eng.providers.aclose()
    assert (result.outcome, result.error_kind, result.decision) == ("failed", "review_failed", "failed")
    assert "the ask cannot be met" in (result.error or "")


async def test_a_reviewer_that_never_decides_is_rescued_and_the_result_stands() -> None:
    with OpenAIServer([_submit(summary="answered")]) as server:
        server.reviews += [openai_text("looks fine"), openai_text("yes"), openai_text("really")]
        eng = _server_engine(server)
        try:
            result = await eng.run("triage", api_trigger(), workspace=Estate().workspace("triage"))
        finally:
            await eng.providers.aclose()
        assert len(server.review_seen) == 3
    assert (result.outcome, result.decision) == ("delivered", "done")
    assert result.review is not None and result.review.rescued
    assert result.phases[1].rescued and result.phases[1].correctives == 2


async def test_a_reviewer_out_of_reach_after_a_write_lets_the_executors_result_stand() -> None:
    # ours: the comment already landed and a redelivery would not run, so the turn is not recorded
    # failed over work it did; with nothing written the failure stands and the message goes back
    estate = Estate()
    await _seed(estate)
    down = Reply({"error": {"message": "overloaded", "type": "overloaded_error"}}, status=529)
    comment = ("comment_on_work_item", {"key": "SUP-1", "body": "Fixed in the next build."})
    with OpenAIServer([openai_tools(comment), _submit(summary="commented")]) as server:
        server.reviews.append(down)
        eng = _server_engine(server)
        try:
            result = await eng.run("triage", api_trigger(), workspace=estate.workspace("triage"))
        finally:
            await eng.providers.aclose()
    assert (result.outcome, result.decision, result.error_kind) == ("delivered", "done", None)
    assert result.review is not None and result.review.rescued and "529" in result.review.notes
    assert not result.redeliver
    with OpenAIServer([_submit(summary="answered")]) as server:
        server.reviews.append(down)
        eng = _server_engine(server)
        try:
            result = await eng.run("triage", api_trigger(), workspace=Estate().workspace("triage"))
        finally:
            await eng.providers.aclose()
    assert (result.outcome, result.error_kind) == ("failed", "llm_unavailable")
    assert result.redeliver


def offline_chain(*steps: dict[str, Any], final: str = "done") -> ProviderChain:
    script, issues = validate_offline_script_data({"rules": [{"steps": list(steps), "final": final}]})
    assert script is not None, issues
    return ProviderChain(["scripted"], [providers.OfflineProvider("scripted", script=script)])


async def test_scheduled_timeout_is_checked_between_rounds() -> None:
    # CO-33: a scheduled task past its timeout_seconds fails scheduled_timeout before its next round.
    ticks = iter([100.0, 100.0, 100.5, 106.0])  # the start, round 1, round 2, round 3 (past 105)

    def clock() -> float:
        return next(ticks)

    trigger = turns.Trigger(
        event_id=str(uuid.uuid4()),
        type="task_assigned",
        source="schedule",
        text="Weekly triage sweep",
        payload={"timeout_seconds": 5, "schedule": "sweep"},
    )
    chain = offline_chain(*[{"tool": "list_work_items", "args": {}}] * 5)
    result = await engine(example_org(), clock=clock).run(
        "triage", trigger, workspace=Estate().workspace("triage"), chain=chain
    )
    assert (result.outcome, result.error_kind) == ("failed", "scheduled_timeout")
    assert len(result.rounds) == 2 and not result.redeliver


async def test_the_reviewer_uses_its_own_provider_when_the_role_names_one() -> None:
    # CO-30: per-phase models (llm_review; the llm: {default, review} mapping resolves the same way).
    with OpenAIServer([_submit()]) as main, OpenAIServer([]) as reviewer:
        llm = {
            "main": {"type": "openai-compatible", "model": "m", "base_url": main.base_url, "api_keys": ["k"]},
            "rev": {
                "type": "openai-compatible",
                "model": "r",
                "base_url": reviewer.base_url,
                "api_keys": ["k"],
            },
        }
        data = with_providers(llm, "main")
        for unit in data["units"]:
            for role in unit["roles"]:
                if role.get("handle") == "triage":
                    role["llm_review"] = "rev"
        eng = engine(make_org(data))
        try:
            result = await eng.run("triage", api_trigger(), workspace=Estate().workspace("triage"))
        finally:
            await eng.providers.aclose()
        assert main.review_seen == [] and len(reviewer.review_seen) == 1
    assert [(r.phase, r.provider_key) for r in result.rounds] == [("execute", "main"), ("review", "rev")]
    assert result.provider_keys == ["main", "rev"]


def test_review_chain_resolution() -> None:
    # per-phase key -> role llm -> default -> first provider (CO-30)
    offline = {"type": "offline", "script": "offline-script.yaml"}
    org = make_org(with_providers({"default": offline, "other": offline}, "other"))
    built = providers.build_providers(org.company, base_dir=EXAMPLES, env={})
    triage = org.seat("triage")
    assert triage is not None
    assert turns.review_chain_keys(built, triage.role) == ("other",)
    assert turns.review_chain_keys(built, None) == ("default",)
    phased = triage.role.model_copy(update={"llm": LlmPhases(default="other", review="default")})
    assert turns.review_chain_keys(built, phased) == ("default",)
    assert turns.review_chain_keys(built, triage.role.model_copy(update={"llm_review": ["default"]})) == (
        "default",
    )


async def test_llm_unavailable_carries_the_servers_retry_after() -> None:
    # For the dispatcher's NAK delay (CO-12, FL-121): the longest Retry-After of the attempts.
    limited = Reply(
        {"error": {"message": "slow down", "type": "rate_limit"}}, status=429, headers={"Retry-After": "7"}
    )
    with OpenAIServer([limited]) as server:
        eng = _server_engine(server)
        try:
            result = await eng.run("triage", api_trigger(), workspace=Estate().workspace("triage"))
        finally:
            await eng.providers.aclose()
    assert (result.outcome, result.error_kind) == ("failed", "llm_unavailable")
    assert result.retry_after == 7.0 and result.redeliver


async def test_offline_reviews_done_and_the_golden_offline_turn_reaches_its_asker() -> None:
    estate = Estate()
    eng = engine(example_org())
    triage = await eng.run(
        "triage", api_trigger("Crash when config file is empty"), workspace=estate.workspace("triage")
    )
    assert (triage.reply_mode, triage.outcome, triage.decision) == ("engine", "delivered", "done")
    assert triage.reply == "[offline] Filed SUP-1 for the engineering lead."
    lead = await eng.run("lead", wake("SUP-1"), workspace=estate.workspace("lead"))
    assert (lead.outcome, lead.decision, lead.iterations) == ("delivered", "done", 1)
    review = [c for c in lead.tool_calls if c.name == "submit_review"]
    assert len(review) == 1 and review[0].arguments == {
        "decision": "done",
        "notes": "[offline] reviewed; the work stands.",
    }


async def test_offline_without_a_rule_on_an_owed_message_submits_what_the_engine_accepts() -> None:
    # The default rule on an engine-owed message: no_action is refused, delivered (the reply) stands.
    result = await engine(example_org()).run(
        "lead", api_trigger("hello"), workspace=Estate().workspace("lead")
    )
    submits = [(c.arguments or {}).get("outcome") for c in result.tool_calls if c.name == "submit_work"]
    assert submits == ["no_action", "delivered"]
    assert result.outcome == "delivered" and result.reply == "[offline] No rule matched; nothing done."


async def test_an_offline_script_can_script_the_review() -> None:
    chain = offline_chain(
        {"tool": "list_work_items", "args": {}},
        {"tool": "submit_review", "args": {"decision": "failed", "notes": "scripted refusal"}},
    )
    result = await engine(example_org()).run(
        "triage", api_trigger(), workspace=Estate().workspace("triage"), chain=chain
    )
    assert (result.outcome, result.error_kind, result.decision) == ("failed", "review_failed", "failed")
    assert [c.name for c in result.tool_calls] == ["list_work_items", "submit_work", "submit_review"]


@pytest.mark.parametrize(
    ("trigger", "mode"),
    [
        (turns.Trigger(event_id="a", source="api"), "engine"),
        (turns.Trigger(event_id="b", type="task_assigned", source="api"), "none"),
        (turns.Trigger(event_id="c", type="task_assigned", source="schedule"), "none"),
        (turns.Trigger(event_id="d", type="a2a_request", source="a2a"), "engine"),
        (turns.Trigger(event_id="e", type="a2a_message", source="a2a"), "none"),
        (turns.Trigger(event_id="f", source="work", reason="assigned", work_item={"key": "X-1"}), "tool"),
        (turns.Trigger(event_id="g", source="work", reason="mentioned", work_item={"key": "X-1"}), "tool"),
        (turns.Trigger(event_id="h", source="github", reason="review_requested"), "tool"),
        (turns.Trigger(event_id="i", source="github", reason="unmatched"), "none"),
        (turns.Trigger(event_id="j", source="webhook:forms"), "none"),
        (turns.Trigger(event_id="k", source="webhook:forms", reply_mode="tool"), "tool"),
    ],
)
def test_reply_obligation_is_derived_from_the_trigger(trigger: turns.Trigger, mode: str) -> None:
    assert turns.reply_obligation(trigger) == mode


def test_a_merged_trigger_owes_what_its_strongest_part_owes() -> None:
    parts = [
        turns.Trigger(event_id="a", source="webhook:forms", timestamp="2026-01-01T00:00:00Z"),
        turns.Trigger(event_id="b", source="api", timestamp="2026-01-01T00:00:01Z"),
    ]
    assert turns.reply_obligation(turns.merge_triggers(parts)) == "engine"


def test_review_requests_are_recognised() -> None:
    assert is_review({"tools": [{"type": "function", "function": {"name": "submit_review"}}]})
    assert is_review({"tools": [{"name": "submit_review"}]})
    assert not is_review({"tools": [{"name": "submit_review"}, {"name": "submit_work"}]})


def test_finish_reply_gives_stand_in_models_an_accepted_submit_work() -> None:
    # tests.support.llm_servers.finish_reply, for fake models that used to end turns with text
    def outcome(body: dict[str, Any]) -> Any:
        reply = finish_reply(body, "answered")
        call = reply.body["choices"][0]["message"]["tool_calls"][0]["function"]
        return json.loads(call["arguments"])["outcome"]

    def refused(code: str) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": "x", "content": json.dumps({"error": "no", "code": code})}

    assert outcome({"messages": []}) == "delivered"
    assert outcome({"messages": [refused("reply_owed")]}) == "delivered"
    assert outcome({"messages": [refused("not_delivered")]}) == "blocked"
    assert outcome({"messages": [refused("not_found")]}) == "delivered"
    later = {"role": "user", "content": "## Prior work\n\n...\n\nCorrection: no"}
    assert outcome({"messages": [later]}) == "no_action"


async def test_an_answering_turn_is_charged_to_the_askers_item() -> None:
    # CO-19/CO-36: asked_by; the trigger renders as an ask.
    trigger = turns.Trigger(
        event_id=str(uuid.uuid4()),
        type="a2a_request",
        source="a2a",
        sender="lead",
        text="What is the release date?",
        payload={"asked_by": {"seat": "lead", "work_item": {"key": "ENG-4", "id": "i-4"}}},
    )
    chain = offline_chain({"tool": "list_work_items", "args": {}})
    result = await engine(example_org(), recorder=turns.MemoryRecorder()).run(
        "triage", trigger, workspace=Estate().workspace("triage"), chain=chain
    )
    assert result.reply_mode == "engine" and result.outcome == "delivered"
    assert result.work_item == turns.WorkItemCharge("ENG-4", "i-4", "ENG", "asked_by")
    assert "Ask from @lead:" in result.phase.user_prompt
