"""The reflect gates the process tests do not reach (AG-6): ``no_workers``, ``no_budget`` and an
unreadable counter, the 1 024-key duplicate ring, and ``learning`` validating by path (AG §13.9)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.reflect import DUPLICATE_RING, GATES, RecentKeys
from services.reflect._gates import Gated, first_gate
from shared import config
from shared.budgets import BudgetUnavailable
from tests.turns.helpers import example_data, make_org


def _payload(**changes: Any) -> dict[str, Any]:
    base = {
        "turn_id": "t1",
        "work_key": "wk1",
        "seat": "triage",
        "agent_id": "",
        "role": "Support Triage",
        "outcome": "delivered",
        "review_outcome": "done",
        "settled_as": "done",
        "tools_called": ["search_knowledge", "submit_work"],
        "skills_offered": [],
        "reflect_and_persist_ran": False,
        "senders": [],
    }
    return {**base, **changes}


class _Budgets:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    async def refusal(self, agent_id: Any) -> Any:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _gate(payload: Any, org: Any, budgets: Any = None, recent: RecentKeys | None = None) -> str | None:
    try:
        asyncio.run(first_gate(payload, org, budgets, recent or RecentKeys()))
    except Gated as g:
        return g.gate
    return None


def test_gates_in_order() -> None:
    assert GATES == (
        "malformed",
        "no_workers",
        "no_role",
        "opted_out",
        "no_budget",
        "duplicate",
        "no_engagement",
    )
    org = make_org(example_data())
    assert _gate(_payload(), org) is None
    assert _gate(b"junk", org) == "malformed"
    data = example_data()
    data["learning"] = {"reflect": {"enabled": False}, "counterparty": {"enabled": False}}
    assert _gate(_payload(), make_org(data)) == "no_workers"
    data["learning"] = {"enabled": False}
    assert _gate(_payload(), make_org(data)) == "opted_out"


def test_no_budget_skips_and_an_unreadable_counter_does_not() -> None:
    org = make_org(example_data())
    full = _Budgets({"scope": "seat:triage", "period": "day"})
    assert _gate(_payload(), org, full) == "no_budget"
    assert _gate(_payload(), org, _Budgets(BudgetUnavailable("counters unreadable"))) is None


def test_the_duplicate_ring_remembers_1024_work_keys() -> None:
    org = make_org(example_data())
    recent = RecentKeys()
    assert _gate(_payload(), org, recent=recent) is None
    assert _gate(_payload(turn_id="t2"), org, recent=recent) == "duplicate"
    for i in range(DUPLICATE_RING):
        recent.seen(f"triage/other-{i}")
    assert _gate(_payload(turn_id="t3"), org, recent=recent) is None  # wk1 fell out of the ring


def test_learning_values_are_refused_by_path() -> None:
    data = example_data()
    data["learning"] = {"reflect": {"budget_tokens": -1}, "enabled": "maybe"}
    _, issues = config.validate_company_data(data)
    assert {i.path for i in issues} >= {"learning.reflect.budget_tokens", "learning.enabled"}
    data = example_data()
    data["units"][0]["roles"][0]["learning_enabled"] = False
    assert make_org(data).seat("lead").role.learning_enabled is False  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ["diary_long", "diary_short"])
def test_diary_kinds_are_the_tool_enum(kind: str) -> None:
    from shared.tools import DIARY_KINDS, builtin_tools

    tool = builtin_tools().get("reflect_and_persist")
    assert tool is not None and kind in DIARY_KINDS
    assert tool.parameters["properties"]["kind"]["enum"] == list(DIARY_KINDS)
