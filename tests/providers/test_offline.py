"""The offline provider (CO-15): rules, templates, labels, token estimate, determinism."""

from __future__ import annotations

import dataclasses
import json
import math

from shared import providers
from shared.config import OfflineScript, validate_offline_script_data
from shared.providers import (
    AssistantMessage,
    ChatRequest,
    RequestContext,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)


def _script(data: dict[str, object]) -> OfflineScript:
    script, issues = validate_offline_script_data(data)
    assert script is not None, issues
    return script


SCRIPT = _script(
    {
        "rules": [
            {
                "when": {"seat": "lead", "text_contains": "urgent"},
                "steps": [
                    {
                        "tool": "create_work_item",
                        "args": {
                            "project": "ENG",
                            "title": "{trigger.first_line}",
                            "body": "for {seat.reports[1]}",
                            "assignee": "{seat.reports[0]}",
                        },
                    },
                    {
                        "tool": "comment_on_work_item",
                        "args": {
                            "key": "{result[0].key}",
                            "body": "cc {seat.managers[0]} on {result[0].missing}.",
                        },
                    },
                ],
                "final": "Done {result[0].key} ({trigger.sender})",
            },
            {
                "when": {"source": "work", "reason": "assigned"},
                "steps": [],
                "final": "Woken on {trigger.work_item.key}.",
            },
        ],
        "default": {"final": "Nothing for {seat.handle}."},
    }
)
LEAD = RequestContext(
    seat="lead",
    managers=("founder",),
    reports=("dev", "docs"),
    trigger_type="external_notification",
    source="api",
    text="urgent: the CLI crashes\nmore",
    first_line="urgent: the CLI crashes",
    sender="rui",
)


async def test_steps_one_round_at_a_time_with_templates_and_labels() -> None:
    offline = providers.OfflineProvider("default", script=SCRIPT)
    first = ChatRequest("sys", (UserMessage("go"),), context=LEAD)
    one = await offline.complete(first)
    [call] = one.tool_calls
    assert (call.id, call.name, one.stop_reason, one.text) == (
        "offline-0",
        "create_work_item",
        "tool_use",
        "",
    )
    assert call.arguments == {
        "project": "ENG",
        "title": "[offline] urgent: the CLI crashes",
        "body": "[offline] for docs",
        "assignee": "dev",
    }
    second = dataclasses.replace(
        first,
        messages=(
            *first.messages,
            AssistantMessage("", one.tool_calls),
            ToolResultMessage("offline-0", "create_work_item", json.dumps({"key": "ENG-7"})),
        ),
    )
    two = await offline.complete(second)
    assert two.tool_calls[0].arguments == {"key": "ENG-7", "body": "[offline] cc founder on ."}
    third = dataclasses.replace(
        second,
        messages=(
            *second.messages,
            AssistantMessage("", two.tool_calls),
            ToolResultMessage("offline-1", "comment_on_work_item", "{}"),
        ),
    )
    three = await offline.complete(third)
    assert (three.text, three.tool_calls, three.stop_reason) == ("[offline] Done ENG-7 (rui)", (), "end")
    assert {one.model, two.model, three.model} == {"crewlet-offline-1"}
    assert three.provider_key == "default" and three.provider_type == "offline"


async def test_rule_order_and_default() -> None:
    offline = providers.OfflineProvider("o", script=SCRIPT)
    wake = RequestContext(seat="dev", source="work", reason="assigned", work_item_key="ENG-3")
    done = await offline.complete(ChatRequest("s", (UserMessage("x"),), context=wake))
    assert done.text == "[offline] Woken on ENG-3."
    calm = dataclasses.replace(LEAD, text="all fine")
    done = await offline.complete(ChatRequest("s", (UserMessage("x"),), context=calm))
    assert done.text == "[offline] Nothing for lead."
    assert offline.match(calm) is None and offline.match(LEAD) is SCRIPT.rules[0]


async def test_token_estimate_is_a_quarter_of_the_bytes() -> None:
    offline = providers.OfflineProvider("o", script=SCRIPT)
    tools = (ToolSpec("t", "d", {"type": "object"}),)
    request = ChatRequest("système", (UserMessage("héllo"),), tools, context=RequestContext(seat="x"))
    done = await offline.complete(request)
    prompt = request.system + json.dumps(
        [dataclasses.asdict(m) for m in request.messages] + [dataclasses.asdict(t) for t in tools],
        ensure_ascii=False,
        sort_keys=True,
    )
    assert done.input_tokens == math.ceil(len(prompt.encode()) / 4)
    assert done.output_tokens == math.ceil(len(done.text.encode()) / 4)
    assert (done.cache_read_tokens, done.cache_write_tokens) == (0, 0)


async def test_same_conversation_same_answer() -> None:
    offline = providers.OfflineProvider("o", script=SCRIPT)
    request = ChatRequest("sys", (UserMessage("go"),), context=LEAD)
    assert await offline.complete(request) == await offline.complete(request)


READER = _script(
    {
        "rules": [
            {
                "when": {"text_matches": r"(?i)^\s*what\b.*\bopen\b"},
                "steps": [{"tool": "list_work_items", "args": {"project": "SUP"}}],
                "final": "Open: {result[0].items:open} | all: {result[0].items}",
            },
            {
                "when": {"text_matches": r"\?\s*$"},
                "steps": [{"tool": "search_knowledge", "args": {"query": "{trigger.text}"}}],
                "final": "Pages: {result[0].hits}",
            },
        ],
    }
)


async def _read_answer(text: str, result: object) -> str:
    offline = providers.OfflineProvider("o", script=READER)
    context = RequestContext(seat="triage", text=text)
    first = await offline.complete(ChatRequest("s", (UserMessage(text),), context=context))
    call = first.tool_calls[0]
    messages = (
        UserMessage(text),
        AssistantMessage(tool_calls=(call,)),
        ToolResultMessage(call.id, call.name, json.dumps(result)),
    )
    done = await offline.complete(ChatRequest("s", messages, context=context))
    return done.text


async def test_a_question_is_answered_from_what_the_read_tools_returned() -> None:
    # issue 38: list results render as short lines; ``:open`` drops done/cancelled/closed items
    items = [
        {"key": "SUP-2", "title": "Login fails", "status": "in_progress", "assignee": "dev"},
        {"key": "SUP-1", "title": "Old crash", "status": "done", "assignee": "lead"},
        {"key": "SUP-3", "title": "Typo", "status": "todo", "assignee": None},
    ]
    assert await _read_answer("What is open on SUP?", {"items": items}) == (
        "[offline] Open: SUP-2 Login fails (in_progress, dev); SUP-3 Typo (todo, unassigned) | all: "
        "SUP-2 Login fails (in_progress, dev); SUP-1 Old crash (done, lead); SUP-3 Typo (todo, unassigned)"
    )
    assert await _read_answer("what is open", {"items": []}) == "[offline] Open: (none) | all: (none)"
    hits = [{"space": "ENG", "title": "Release checklist"}, {"space": "SUP", "title": "FAQ"}]
    assert await _read_answer("How do I release?", {"hits": hits}) == (
        "[offline] Pages: ENG/Release checklist; SUP/FAQ"
    )
    assert providers.OfflineProvider("o", script=READER).match(RequestContext(seat="x", text="Crash")) is None


def test_text_matches_must_compile_and_open_is_the_only_suffix() -> None:
    _, issues = validate_offline_script_data(
        {
            "rules": [
                {"when": {"text_matches": "[a-"}, "final": "x"},
                {"steps": [{"tool": "list_work_items"}], "final": "{result[0].items:closed}"},
            ]
        }
    )
    assert [(i.path, i.type) for i in issues] == [
        ("rules[0].when.text_matches", issues[0].type),
        ("rules[1].final", "invalid"),
    ]
    assert "not a regular expression" in issues[0].message
