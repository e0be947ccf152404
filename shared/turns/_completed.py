"""The ``agent_turn_completed`` event's payload: what the reflect dispatcher's gates read (AG-6).

A settled turn (not fenced, not handed back for redelivery) is published on
``crewlet.events.agent_turn_completed`` (stream ``CREWLET_EVENTS``) with this payload; the reflect
dispatcher (``services.reflect``) turns it into memory rows. Texts are cut here so a payload stays
small: task and plan summaries to 2 000 characters, the tool sequence to 200 calls (AG-4), each
sender's salient body to 500 characters [ours].
"""

from __future__ import annotations

from typing import Any

from ._result import TurnResult
from ._trigger import Trigger

__all__ = [
    "COMPLETED_SUBJECT",
    "PAYLOAD_FIELDS",
    "SALIENT_BODY_CHARS",
    "SUMMARY_CHARS",
    "TOOL_SEQUENCE_MAX",
    "completed_payload",
    "settled",
]

COMPLETED_SUBJECT = "crewlet.events.agent_turn_completed"
"""Where a settled turn's ``agent_turn_completed`` is published (CREWLET_EVENTS, AG-6)."""
SUMMARY_CHARS = 2000
"""Task and plan summaries, in characters (AG-4, ours)."""
TOOL_SEQUENCE_MAX = 200
"""Tool calls kept in order (AG-4, ours)."""
SALIENT_BODY_CHARS = 500
"""A sender's salient body, in characters (ours)."""

PAYLOAD_FIELDS = (
    "turn_id",
    "work_key",
    "seat",
    "agent_id",
    "role",
    "outcome",
    "review_outcome",
    "settled_as",
    "tools_called",
    "skills_offered",
    "reflect_and_persist_ran",
    "senders",
)
"""The fields a gate reads; a payload missing one is ``malformed`` (AG-6)."""


def settled(result: TurnResult) -> bool:
    """True when the turn is over for good: not fenced and not handed back for redelivery."""
    return result.outcome != "fenced" and not result.redeliver


def _senders(trigger: Trigger) -> list[dict[str, Any]]:
    """One entry per distinct sender of the trigger's constituents (CO-38 groups a sender's
    messages): ``{sender, platform, body, event_ids}``, bodies joined and cut to 500 chars."""
    by: dict[tuple[str, str], dict[str, Any]] = {}
    for part in trigger.parts or (trigger,):
        if not part.sender:
            continue
        key = (part.sender, part.source)
        entry = by.setdefault(
            key, {"sender": part.sender, "platform": part.source, "body": "", "event_ids": []}
        )
        if part.text:
            entry["body"] = (entry["body"] + "\n" + part.text).strip()[:SALIENT_BODY_CHARS]
        entry["event_ids"].append(part.event_id)
    return list(by.values())


def completed_payload(result: TurnResult, *, role: str, node: str) -> dict[str, Any]:
    """The ``agent_turn_completed`` payload of a finished turn (AG-6).

    Args:
        result: The finished turn.
        role: The seat's role name (``agent_role`` of the episode, AG-4).
        node: The node that ran it.

    Returns:
        ``{turn_id, work_key, seat, agent_id, role, node, outcome, review_outcome (done |
        self_iterate | failed | None), settled_as (done | failed), error_kind, tools_called
        [names, ≤ 200], skills_offered [], reflect_and_persist_ran, senders [{sender, platform,
        body, event_ids}], work_item, conversation_key, trigger_type, source, task_summary,
        plan_summary, started_at, ended_at (unix s), duration_ms, tokens {input, output}}``.
    """
    start = result.start
    trigger = start.trigger
    item = result.work_item.key if result.work_item is not None else (trigger.work_item_key or None)
    plan = ""
    if result.submission is not None:
        plan = result.submission.summary
    plan = plan or result.final_text
    task = trigger.text or str((trigger.work_item or {}).get("title") or "") or trigger.reason
    review = result.review.decision if result.review is not None else None
    return {
        "turn_id": result.turn_id,
        "work_key": result.work_key,
        "seat": result.seat,
        "agent_id": start.agent_id,
        "role": role,
        "node": node,
        "outcome": result.outcome,
        "review_outcome": review,
        "settled_as": "failed" if result.failed else "done",
        "error_kind": result.error_kind,
        "tools_called": [t.name for t in result.tool_calls][:TOOL_SEQUENCE_MAX],
        "skills_offered": [],
        "reflect_and_persist_ran": result.persisted,
        "senders": _senders(trigger),
        "work_item": item,
        "conversation_key": trigger.conversation_key,
        "trigger_type": trigger.type,
        "source": trigger.source,
        "task_summary": task[:SUMMARY_CHARS],
        "plan_summary": plan[:SUMMARY_CHARS],
        "started_at": start.started_at,
        "ended_at": result.ended_at,
        "duration_ms": round(result.duration_seconds * 1000, 1),
        "tokens": {"input": result.input_tokens, "output": result.output_tokens},
    }
