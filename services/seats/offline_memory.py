"""The offline provider's memory (issue 27): a diary entry and an episode for its turns, by rule.

The offline provider (CO-15) has no judgement to reflect with, so a turn every round of which it
answered writes its memory by a fixed rule once it settled (not a ``self_iterate`` or failed one):

- one ``diary_long`` entry: ``<work item or "A message"> (<why>): <what it was about>. I answered:
  <the turn's answer>`` (first lines only, ≤ 2 000 characters), keyed by its content (AG-3);
- one ``episodes`` row keyed ``(agent_handle, work_key)`` (AG-4): the task, the answer as the plan
  summary, the tools called, the review's decision.

Both go through the node's :class:`~shared.memory.MemoryWriter` like any other memory write, so the
seat's next turn recalls them (:mod:`~services.seats.recall`) and the offline provider can quote
them back (its ``{memory.recalled}`` placeholder reads the prompt's ``personal_memory`` section).
"""

from __future__ import annotations

from typing import Any

from shared.config import OFFLINE_MODEL, Seat
from shared.memory import MemoryWriter, diary_id
from shared.turns import Trigger, TurnResult

__all__ = ["DIARY_CHARS", "answered_offline", "remember"]

DIARY_CHARS = 2_000
"""A diary entry's limit (AG-3)."""
_LINE = 300


def answered_offline(result: TurnResult) -> bool:
    """True when every round of a settled turn was the offline provider's."""
    if result.outcome not in ("delivered", "no_action", "blocked") or not result.rounds:
        return False
    return all(r.model == OFFLINE_MODEL for r in result.rounds)


def _line(text: str) -> str:
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return first[:_LINE]


def _about(trigger: Trigger, work_item: dict[str, Any] | None) -> tuple[str, str]:
    item = {**(work_item or {}), **dict(trigger.work_item or {})}
    key = trigger.work_item_key or ""
    why = trigger.reason or trigger.type.replace("_", " ")
    if trigger.sender:
        why += f" by {trigger.sender}"
    what = (_line(trigger.text) or _line(str(item.get("title", ""))) or "no text").rstrip(".")
    return key, f"{key or 'A message'} ({why}): {what}"


async def remember(
    writer: MemoryWriter,
    seat: Seat,
    trigger: Trigger,
    result: TurnResult,
    work_item: dict[str, Any] | None = None,
) -> None:
    """Write the turn's diary entry and episode (see the module docstring); ``work_item`` is the
    trigger's item as the turn read it (its title says what a tracker wake was about)."""
    key, about = _about(trigger, work_item)
    answer = result.final_text or (result.submission.summary if result.submission else "")
    content = f"{about}. I answered: {_line(answer) or result.outcome}"[:DIARY_CHARS]
    row_id = diary_id(str(seat.agent_id), content)
    now = result.ended_at or result.start.started_at
    diary: dict[str, Any] = {
        "id": row_id,
        "kind": "diary_long",
        "content": content,
        "retrieval_count": 0,
        "last_retrieved_at": None,
        "created_at": now,
        "source": "offline_rule",
    }
    await writer.create(seat.handle, "agent_diary", (row_id,), diary)
    work_key = result.start.work_key or result.turn_id
    episode: dict[str, Any] = {
        "agent_handle": seat.handle,
        "agent_role": seat.name,
        "turn_id": result.turn_id,
        "work_key": work_key,
        "work_item": key or None,
        "conversation_key": trigger.conversation_key,
        "started_at": result.start.started_at,
        "ended_at": now,
        "duration_ms": round(result.duration_seconds * 1000),
        "task_summary": about[:DIARY_CHARS],
        "plan_summary": answer[:DIARY_CHARS],
        "tool_sequence": [c.name for c in result.tool_calls][:200],
        "skills_used": [],
        "review_outcome": result.decision or result.outcome,
        "kind": "raw",
        "count": 1,
        "source": "offline_rule",
    }
    await writer.create(seat.handle, "episodes", (seat.handle, work_key), episode)
