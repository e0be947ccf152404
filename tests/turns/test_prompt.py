"""Prompt assembly (CO-17) and turn identity (CO-19)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shared import tools, turns
from tests.turns.helpers import api_trigger, example_org, wake

GOLDEN = Path(__file__).parent / "golden"
ITEM = {
    "key": "SUP-1",
    "title": "Crash when config file is empty",
    "status": "todo",
    "assignee": "lead",
    "body": "Running `lantern` with an empty lantern.toml exits with a traceback.",
    "comments": [{"author": "seat:triage", "body": f"note {i}"} for i in range(7)],
}
KNOWLEDGE = [{"space": "ENG", "title": "Config loading", "text": "The loader reads lantern.toml first."}]


def _lead_wake() -> turns.Prompt:
    org = example_org()
    seat = org.seat("lead")
    assert seat is not None
    return turns.build_prompt(
        org, seat, wake("SUP-1"), list(tools.builtin_tools()), knowledge=KNOWLEDGE, work_item=ITEM
    )


def test_lead_wake_prompt_matches_the_golden_file() -> None:
    # CO-17's check. Regenerate with CREWLET_REGEN_GOLDEN=1 after an intended change.
    prompt = _lead_wake()
    rendered = prompt.system + "=====\n" + prompt.user
    path = GOLDEN / "lead_assignment_wake.txt"
    if os.environ.get("CREWLET_REGEN_GOLDEN"):
        path.write_text(rendered)
    assert rendered == path.read_text()


def test_section_lengths_sum_to_the_prompt() -> None:
    prompt = _lead_wake()
    assert sum(s.bytes for s in prompt.system_sections) == len(prompt.system.encode())
    assert sum(s.bytes for s in prompt.user_sections) == len(prompt.user.encode())
    assert [s.key for s in prompt.system_sections] == [
        "identity",
        "company_context",
        "background",
        "responsibilities",
        "behavioral_guidelines",
        "unit",
        "policies",
        "team",
        "your_turn",
        "available_tools",
    ]
    assert [s.key for s in prompt.user_sections] == ["task", "relevant_knowledge"]
    assert (
        "note 1" not in prompt.user and "note 2" in prompt.user and "note 6" in prompt.user
    )  # last 5 comments


def test_the_system_prompt_is_stable_across_triggers() -> None:
    org = example_org()
    seat = org.seat("triage")
    assert seat is not None
    surface = list(tools.builtin_tools())
    one = turns.build_prompt(org, seat, api_trigger("first"), surface, knowledge=KNOWLEDGE)
    two = turns.build_prompt(org, seat, api_trigger("second", sender="rui"), surface)
    assert one.system == two.system and one.user != two.user
    assert "Message from rui:" in two.user and "team" not in [s.key for s in one.system_sections]


def test_work_key_is_order_free_and_reproducible() -> None:
    assert turns.work_key(["b", "a"]) == turns.work_key(["a", "b", "a"]) != turns.work_key(["a"])
    trigger = api_trigger()
    assert trigger.work_key == turns.work_key([trigger.event_id])
    with pytest.raises(ValueError):
        turns.work_key([])


def test_trigger_from_envelope() -> None:
    envelope = {
        "id": "0f3c5b1e-0000-4000-8000-000000000001",
        "type": "external_notification",
        "source": "ingress",
        "timestamp": "2026-01-01T00:00:00Z",
        "payload": {"source": "work", "reason": "assigned", "work_item": "SUP-1", "future_field": [1]},
        "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        "span_id": "00f067aa0ba902b7",
        "delegation_depth": 1,
        "brand_new_top_level": True,
    }
    trigger = turns.Trigger.from_envelope(envelope)
    assert (trigger.source, trigger.reason, trigger.work_item_key) == ("work", "assigned", "SUP-1")
    assert trigger.trace_headers == {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    assert trigger.delegation_depth == 1 and trigger.payload["future_field"] == [1]
    headed = turns.Trigger.from_envelope(
        envelope, headers={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01", "Nats-Msg-Id": "x"}
    )
    assert headed.trace_headers == {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    with pytest.raises(ValueError):
        turns.Trigger.from_envelope({"type": "x"})


def test_first_line() -> None:
    assert turns.first_line("\n  \n  Crash when empty  \nmore") == "Crash when empty"
    assert len(turns.first_line("x" * 1000)) == turns.FIRST_LINE_MAX_CHARS
    assert turns.first_line("") == ""
