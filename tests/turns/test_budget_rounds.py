"""Every model round is charged before it runs (CO-37, FL-119): the turn loop over real budgets.

The example company on its offline provider (whose estimate is exact), the budgets over the
in-memory coordination store: a ceiling that holds one round refuses the next before it reaches the
provider and ends the turn ``budget_exhausted`` with the refusal's figures (the dispatcher parks
the seat); the counter equals what the admitted rounds spent; a store that
cannot answer fails the turn ``budget_unavailable``, never as out of budget.
"""

from __future__ import annotations

from typing import Any

from shared.budgets import Budgets
from shared.coordination import FaultyCoordination, MemoryCoordination
from tests.turns.helpers import api_trigger, engine, example_data, make_org, wake
from tests.turns.workspace import Estate


def _org(cap: int) -> Any:
    data = example_data()
    data["token_budget"] = {"day": cap}
    return make_org(data)


async def _spent(budgets: Budgets) -> int:
    view = await budgets.snapshot()
    return int(view["scopes"][0]["windows"]["day"]["spent"])


async def test_a_round_that_would_cross_the_ceiling_is_refused_before_it_runs() -> None:
    # the lead's assignment rule runs three rounds (two tool calls and a final answer); size the
    # ceiling from a first, uncapped run so that exactly the first round fits
    async def fresh() -> tuple[Estate, str]:  # the same tracker state for both runs
        estate = Estate()
        item = await estate.workspace("triage").create_work_item("ENG", "task", "Crash", "", "lead")
        return estate, str(item["key"])

    estate, key = await fresh()
    first = await engine(_org(10_000_000)).run("lead", wake(key), workspace=estate.workspace("lead"))
    assert len(first.rounds) >= 2, first.error
    one_round = first.rounds[0].input_tokens + first.rounds[0].output_tokens

    org = _org(one_round + 1)
    budgets = Budgets(MemoryCoordination(), lambda: org)
    eng = engine(org, budgets=budgets)
    estate, key = await fresh()
    result = await eng.run("lead", wake(key), workspace=estate.workspace("lead"))
    assert result.outcome == "failed" and result.error_kind == "budget_exhausted", result.error
    assert len(result.rounds) == 1  # round 2 never reached the provider
    assert result.budget is not None
    assert result.budget["scope"] == "org" and result.budget["period"] == "day"
    assert result.budget["ceiling"] == one_round + 1 and result.budget["spent"] == one_round
    # round 1 already updated the item (an effect), and still the delivery goes back: the seat's
    # deliveries are parked, the refused one included (CO-37)
    assert result.delivered_any and result.redeliver
    assert await _spent(budgets) == result.input_tokens + result.output_tokens == one_round
    assert await budgets.refusal(str(org.seat("lead").agent_id)) is not None


async def test_a_budgets_store_that_cannot_answer_fails_the_turn_as_a_store_error() -> None:
    org = _org(1_000_000)
    broken = FaultyCoordination()
    eng = engine(org, budgets=Budgets(broken, lambda: org))
    result = await eng.run("triage", api_trigger("hello"), workspace=Estate().workspace("triage"))
    assert result.error_kind == "budget_unavailable", (result.error_kind, result.error)
    assert result.budget is None and result.rounds == []
    assert result.redeliver


async def test_an_engine_without_budgets_enforces_no_cap() -> None:
    result = await engine(_org(1)).run("triage", api_trigger("hi"), workspace=Estate().workspace("triage"))
    assert result.outcome == "delivered" and result.error_kind is None, result.error
    assert result.input_tokens > 1
