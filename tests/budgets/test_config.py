"""``token_budget`` in the company document (CO-37): ``0`` refused by name, and no longer inert."""

from __future__ import annotations

import pytest

from shared.budgets import caps_of
from shared.config import inert_paths, validate_company_data

from .conftest import company_data, org_of


@pytest.mark.parametrize("where", ["company", "role"])
def test_a_zero_budget_is_refused_naming_the_key(where: str) -> None:
    if where == "company":
        data = company_data(org={"day": 0, "month": 100})
        path = "token_budget.day"
    else:
        data = company_data(seats={"a": {"week": 0}})
        path = "roles[0].token_budget.week"
    company, issues = validate_company_data(data)
    assert company is None
    assert [(i.path, i.type) for i in issues] == [(path, "out_of_range")]
    assert "1" in issues[0].message and "0" in issues[0].message


def test_token_budget_is_built_so_never_reported_inert() -> None:
    data = company_data(org={"day": 100}, seats={"a": {"month": 1000}, "b": None})
    company, issues = validate_company_data(data)
    assert company is not None and issues == []
    assert not [p for p in inert_paths(company) if "token_budget" in p]


def test_caps_come_from_the_company_and_its_agent_roles() -> None:
    data = company_data(
        org={"day": 100, "week": 500}, seats={"a": {"month": 1000}, "b": None}, tz="Europe/Lisbon"
    )
    data["roles"].append({"name": "Human", "handle": "h", "kind": "human", "token_budget": {"day": 5}})
    org = org_of(data)
    caps = caps_of(org)
    assert caps.timezone == "Europe/Lisbon"
    assert caps.org.caps == {"day": 100, "week": 500}
    a, b = org.seat("a"), org.seat("b")
    assert a is not None and b is not None
    assert caps.agent(a.agent_id).caps == {"month": 1000} and caps.agent(a.agent_id).handle == "a"
    assert caps.agent(b.agent_id).caps == {}
    assert [s.name for s in caps.capped()] == ["org", f"agent:{a.agent_id}"]  # humans run no turns
    assert caps.resolve("agent:a") == caps.resolve(f"agent:{a.agent_id}")
    assert caps.resolve("agent:h") is None and caps.resolve("nobody") is None
    assert caps_of(org.company).org.caps == caps.org.caps
    assert caps_of(None).org.caps == {}
