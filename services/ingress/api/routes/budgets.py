"""``GET /budgets`` and ``POST /budgets/reset``: the fleet's token budgets (FL-120, CO-37).

- ``GET /budgets`` (``state:read``): caps, the counters of the current windows, refusing scopes and
  ``refused_at`` per scope, read from the shared ``budgets`` slot, so every node answers the same
  figures (see :meth:`shared.budgets.Budgets.snapshot` for the shape). An unreadable store answers
  503 ``budgets_unavailable`` — never an empty or zeroed view.
- ``POST /budgets/reset[?scope=org|agent:<agent id or handle>]`` (``config:write``, the grant of the
  config write routes; always needs a token, FL-120): zeroes the current day, week and month counters
  of one scope, or of ``org`` and every capped seat without ``scope``. 200 ``{"scope", "zeroed":
  [{"scope", "period", "window", "was"}], "by", "node"}``; 404 ``unknown_scope`` naming the scope;
  503 ``budgets_unavailable``. A reset on one node is visible on every node's next ``GET /budgets``.

Both use the node's :class:`~shared.budgets.Budgets` (``ctx.extras["budgets"]``), made on first use
when the node runner has not put one there.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from shared.budgets import BudgetUnavailable, UnknownScope
from shared.runtime import NodeContext, api_error, require_grant

from ...budgets import budgets_of
from ._common import GRANTED, add

__all__ = ["budgets_of", "router"]


def _unavailable(e: BudgetUnavailable) -> Exception:
    return api_error(503, "budgets_unavailable", f"cannot read the budget counters: {e}")


class BudgetRoutes:
    """The fleet budget endpoints over the node's :class:`~shared.budgets.Budgets`."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    async def get_budgets(self) -> dict[str, Any]:
        try:
            view = await budgets_of(self.ctx).snapshot()
        except BudgetUnavailable as e:
            raise _unavailable(e) from None
        view["asked"] = self.ctx.node_id
        return view

    async def reset_budgets(self, scope: str | None = None, who: str = GRANTED) -> dict[str, Any]:
        if scope is not None and not scope.strip():
            raise api_error(
                400,
                "invalid",
                "scope must be 'org' or 'agent:<agent id or handle>' (got an empty one)",
                field="scope",
            )
        try:
            zeroed = await budgets_of(self.ctx).reset(scope)
        except UnknownScope as e:
            raise api_error(404, "unknown_scope", str(e), field="scope") from None
        except BudgetUnavailable as e:
            raise _unavailable(e) from None
        return {"scope": scope or "all", "zeroed": zeroed, "by": who, "node": self.ctx.node_id}


def router(ctx: NodeContext) -> APIRouter:
    """Build the budgets routes (FL-120)."""
    r = APIRouter(tags=["budgets"])
    h = BudgetRoutes(ctx)
    write = {"who": Depends(require_grant(ctx.cfg, "config:write"))}
    add(
        r,
        "/budgets",
        h.get_budgets,
        methods=["GET"],
        dependencies=[Depends(require_grant(ctx.cfg, "state:read"))],
    )
    add(r, "/budgets/reset", h.reset_budgets, methods=["POST"], given=write)
    return r
