"""AG-8's ``refresh_memory`` budget and a thin trigger, on the recall the seats role opens per turn.

The seat's memory is a stand-in (three diary rows); the rest is the real :class:`TurnMemory`: three
distinct hints per turn, a repeat (any case, any spacing) served from the turn's cache, a fourth
refused naming the three spent; a tracker wake renders the most recent entries and a hint to look
again, with no filter call and ``trigger_requires_recon`` in its ``prefetch_summary``.
"""

from __future__ import annotations

from typing import Any

import pytest

from services.seats.recall import TurnMemory
from shared.turns import Trigger
from tests.turns.helpers import example_org

pytestmark = pytest.mark.asyncio

ROWS = [
    {
        "_table": "agent_diary",
        "_subject": f"s{i}",
        "id": f"r{i}",
        "kind": "diary_long",
        "content": text,
        "retrieval_count": 0,
        "created_at": 1_700_000_000 + i,
    }  # fmt: skip
    for i, text in enumerate(
        ["Ana prefers terse answers.", "Billing export runs at 02:00.", "Carl owns dashboards."]
    )
]


class _Memory:
    writer = None

    async def rows(self, handle: str, tables: list[str], *, limit: int = 10_000) -> list[dict[str, Any]]:
        return [dict(r) for r in ROWS]


class _Owner:
    def __init__(self) -> None:
        self.memory = _Memory()
        self.filters: list[str] = []
        self.summaries: list[dict[str, Any]] = []
        self.stamped: list[str] = []

    async def filter(
        self, seat: Any, keys: Any, query: str, pool: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        self.filters.append(query)
        return pool

    async def stamp(self, handle: str, rows: list[dict[str, Any]]) -> None:
        self.stamped += [r["content"] for r in rows]

    def stamp_later(self, handle: str, rows: list[dict[str, Any]]) -> None:
        self.stamped += [r["content"] for r in rows]

    def summary(self, data: dict[str, Any]) -> None:
        self.summaries.append(data)


def _seat() -> Any:
    return example_org().seat("lead")


async def _open(trigger: Trigger) -> tuple[TurnMemory, _Owner]:
    owner = _Owner()
    turn = TurnMemory(owner, _seat(), trigger, "turn-1")  # type: ignore[arg-type]
    await turn.open()
    return turn, owner


async def test_three_distinct_hints_a_free_repeat_and_a_fourth_refused() -> None:
    turn, owner = await _open(Trigger(event_id="e1", source="api", text="When does the billing export run?"))
    assert "Billing export runs at 02:00." in dict((k, b) for k, _, b in turn.sections)["personal_memory"]
    for hint in ("billing", "dashboards", "Ana"):
        answer = await turn.refresh(hint)
        assert answer["cached"] is False
    again = await turn.refresh("  BILLING ")
    assert again["cached"] is True and again["hint"] == "billing"
    with pytest.raises(ValueError) as refused:
        await turn.refresh("something new")
    message = str(refused.value)
    assert (
        "at most 3" in message and "'billing'" in message and "'dashboards'" in message and "'ana'" in message
    )
    assert len(owner.summaries) == 1 and owner.summaries[0]["trigger_requires_recon"] is False


async def test_a_tracker_wake_is_thin() -> None:
    turn, owner = await _open(
        Trigger(event_id="e2", source="work", reason="assigned", work_item={"key": "SUP-1"})
    )
    body = dict((k, b) for k, _, b in turn.sections)["personal_memory"]
    assert body.startswith("- Carl owns dashboards.") and "refresh_memory" in body
    assert "similar_prior_work" not in [k for k, _, _ in turn.sections]
    (summary,) = owner.summaries
    assert summary["trigger_requires_recon"] is True and summary["filter_calls"] == 0
    assert summary["blocks"]["personal_memory"] == {"hit": True, "bytes": summary["blocks"]["personal_memory"]["bytes"],
                                                    "selection_count": 3}  # fmt: skip
    assert owner.filters == []
