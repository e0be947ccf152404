"""Companies with token budgets for the budgets tests (CO-37)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from shared.config import OrgModel, validate_company_data


def company_data(
    *,
    org: dict[str, int] | None = None,
    seats: dict[str, dict[str, int] | None] | None = None,
    tz: str = "UTC",
) -> dict[str, Any]:
    """A small valid company: agent seats ``a`` and ``b`` (or ``seats``), their caps, the org's caps."""
    seats = seats if seats is not None else {"a": None, "b": None}
    roles: list[dict[str, Any]] = []
    for handle, cap in seats.items():
        role: dict[str, Any] = {"name": f"Seat {handle}", "handle": handle}
        if cap is not None:
            role["token_budget"] = cap
        roles.append(role)
    data: dict[str, Any] = {
        "name": "Budget Co",
        "timezone": tz,
        "providers": {
            "llm": {"default": {"type": "offline", "model": "crewlet-offline-1", "script": "./offline.yaml"}}
        },
        "roles": roles,
    }
    if org is not None:
        data["token_budget"] = org
    return data


def org_of(data: dict[str, Any]) -> OrgModel:
    """Validate ``data`` and return its org model (fails the test on any issue)."""
    company, issues = validate_company_data(data)
    assert company is not None, [(i.path, i.message) for i in issues]
    return OrgModel.from_company(company)


class Clock:
    """A settable clock for the budgets (aware UTC)."""

    def __init__(self, at: datetime = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at
