"""The budgets seam's public names are pinned (STYLE: ``__all__`` is tested)."""

from __future__ import annotations

import shared.budgets as budgets


def test_public_names() -> None:
    assert sorted(budgets.__all__) == sorted(
        [
            "CAS_DEADLINE_SECONDS",
            "NEAR_FRACTION",
            "ORG",
            "PERIODS",
            "REPORT_INTERVAL_SECONDS",
            "BudgetError",
            "BudgetExhausted",
            "BudgetUnavailable",
            "Budgets",
            "Caps",
            "Charge",
            "ChargedWindow",
            "Period",
            "Scope",
            "UnknownScope",
            "Window",
            "caps_of",
            "scope_key",
            "window_of",
            "windows_at",
        ]
    )
    for name in budgets.__all__:
        assert getattr(budgets, name) is not None


def test_error_tree() -> None:
    from shared.errors import CrewletError, ServiceError

    assert issubclass(budgets.BudgetExhausted, budgets.BudgetError)
    assert issubclass(budgets.BudgetUnavailable, budgets.BudgetError)
    assert issubclass(budgets.BudgetUnavailable, ServiceError)
    assert not issubclass(budgets.BudgetExhausted, ServiceError)
    assert not issubclass(budgets.BudgetUnavailable, budgets.BudgetExhausted)
    assert issubclass(budgets.BudgetError, CrewletError)
    assert budgets.scope_key("agent:1234-ab") == "agent-1234-ab" and budgets.scope_key("org") == "org"
