"""Budgets seam: fleet-wide token budgets on the company clock (CO-37, FL-119, FL-120).

Caps come from the applied company (``token_budget`` on the company and on roles) and stay in
memory; usage lives in the coordination ``budgets`` slot, charged by compare-and-set, org first,
then the seat. Use::

    budgets = Budgets(ctx.coord, lambda: ctx.org)
    charge = await budgets.charge(seat.agent_id, estimate)   # BudgetExhausted / BudgetUnavailable
    ...                                                      # run the round
    await budgets.settle(charge, actual)
"""

from ._budgets import (
    CAS_DEADLINE_SECONDS,
    REPORT_INTERVAL_SECONDS,
    Budgets,
    Charge,
    ChargedWindow,
    UnknownScope,
)
from ._caps import ORG, Caps, Scope, caps_of, scope_key
from ._errors import BudgetError, BudgetExhausted, BudgetUnavailable
from ._snapshot import NEAR_FRACTION
from ._windows import PERIODS, Period, Window, window_of, windows_at

__all__ = [
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
