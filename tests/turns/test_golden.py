"""The offline provider runs the section 6.4 script end to end (CO-15, section 11 steps 3-5)."""

from __future__ import annotations

import uuid
from typing import Any

from shared import turns
from tests.turns.helpers import engine, example_org, github_issue_text, wake
from tests.turns.workspace import Estate


def _github_trigger() -> turns.Trigger:
    return turns.Trigger(
        event_id=str(uuid.uuid4()),
        type="external_notification",
        source="github",
        text=github_issue_text(),
        delivery_id="72d3162e-cc78-11e3-81ab-4c9367dc0958",
    )


async def _golden(estate: Estate) -> tuple[turns.TurnResult, turns.TurnResult]:
    eng = engine(example_org(), recorder=turns.MemoryRecorder())
    triage = await eng.run("triage", _github_trigger(), workspace=estate.workspace("triage"))
    lead = await eng.run("lead", wake("SUP-1"), workspace=estate.workspace("lead"))
    return triage, lead


async def test_triage_files_sup_1_for_lead_and_lead_picks_it_up() -> None:
    estate = Estate()
    triage, lead = await _golden(estate)

    assert triage.outcome == "delivered", triage.error
    item = estate.items["SUP-1"]
    assert item["assignee"] == "lead"
    assert item["reporter"] == "seat:triage"
    assert item["type"] == "task"
    assert "Spelling error in the README file" in item["title"]
    assert item["title"].startswith("[offline] ")
    assert item["body"].startswith("[offline] Spelling error in the README file")
    assert "two 't's" in item["body"]
    assert triage.final_text == "[offline] Filed SUP-1 for the engineering lead."
    assert triage.work_item == turns.WorkItemCharge("SUP-1", item["id"], "SUP", "sole_write")
    # a step, the final text with submit_work, then the review (CO-30)
    assert [(r.phase, r.provider_key) for r in triage.rounds] == [
        ("execute", "default"),
        ("execute", "default"),
        ("review", "default"),
    ]
    assert (triage.decision, triage.iterations, triage.reply_mode) == ("done", 1, "none")
    assert {r.model for r in triage.rounds} == {"crewlet-offline-1"}

    assert lead.outcome == "delivered", lead.error
    assert item["status"] == "in_progress"
    page = estate.pages[("ENG", "Notes SUP-1")]
    assert page["body"] == "[offline] Scope for SUP-1: reproduce, fix, document."
    assert page["author"] == "seat:lead"
    [comment] = estate.comments["SUP-1"]
    assert comment["author"] == "seat:lead"
    assert comment["body"] == "[offline] Accepted; plan in ENG page Notes SUP-1."
    assert lead.final_text == "[offline] Accepted SUP-1."
    assert [c.name for c in lead.tool_calls] == [
        "update_work_item",
        "write_page",
        "comment_on_work_item",
        "submit_work",
        "submit_review",
    ]
    assert lead.work_item is not None and lead.work_item.basis == "trigger" and lead.work_item.key == "SUP-1"
    assert len(lead.rounds) == 5 and lead.reply_mode == "tool" and lead.decision == "done"
    # CO-22: the rounds sum to the turn totals.
    for result in (triage, lead):
        assert result.input_tokens == sum(r.input_tokens for r in result.rounds) > 0
        assert result.output_tokens == sum(r.output_tokens for r in result.rounds) > 0


def _stable(result: turns.TurnResult) -> Any:
    data = result.to_dict()
    for key in ("turn_id", "work_key", "started_at", "ended_at", "duration_seconds", "trace_id", "trigger"):
        data.pop(key)
    for phase in data["phases"]:
        phase.pop("started_at")
        phase.pop("duration_seconds")
    for row in data["rounds"] + data["tool_calls"]:
        row.pop("started_at")
        row.pop("duration_seconds")
    return data


async def test_same_trigger_same_state_gives_identical_records() -> None:
    # CO-15's check: byte-identical turn records except ids and timestamps.
    first = await _golden(Estate())
    second = await _golden(Estate())
    assert [_stable(r) for r in first] == [_stable(r) for r in second]
