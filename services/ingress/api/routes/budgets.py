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

from shared.budgets import Budgets, BudgetUnavailable, UnknownScope
from shared.runtime import NodeContext, api_error, require_grant

__all__ = ["budgets_of", "router"]

_EXTRA = "budgets"


def budgets_of(ctx: NodeContext) -> Budgets:
    """This node's :class:`Budgets` (``ctx.extras["budgets"]``), made on first use.

    The one made here reads the store and the org from ``ctx`` on every call, so it follows a
    store opened later and every applied revision.
    """
    found = ctx.extras.get(_EXTRA)
    if isinstance(found, Budgets):
        return found
    made = Budgets(lambda: ctx.coord, lambda: ctx.org)
    ctx.extras[_EXTRA] = made
    return made


def _unavailable(e: BudgetUnavailable) -> Exception:
    return api_error(503, "budgets_unavailable", f"cannot read the budget counters: {e}")


def router(ctx: NodeContext) -> APIRouter:
    """Build the budgets routes (FL-120)."""
    r = APIRouter(tags=["budgets"])
    write = require_grant(ctx.cfg, "config:write")

    @r.get("/budgets", dependencies=[Depends(require_grant(ctx.cfg, "state:read"))])
    async def get_budgets() -> dict[str, Any]:
        try:
            view = await budgets_of(ctx).snapshot()
        except BudgetUnavailable as e:
            raise _unavailable(e) from None
        view["asked"] = ctx.node_id
        return view

    @r.post("/budgets/reset")
    async def reset_budgets(scope: str | None = None, who: str = Depends(write)) -> dict[str, Any]:  # noqa: B008
        if scope is not None and not scope.strip():
            raise api_error(
                400,
                "invalid",
                "scope must be 'org' or 'agent:<agent id or handle>' (got an empty one)",
                field="scope",
            )
        try:
            zeroed = await budgets_of(ctx).reset(scope)
        except UnknownScope as e:
            raise api_error(404, "unknown_scope", str(e), field="scope") from None
        except BudgetUnavailable as e:
            raise _unavailable(e) from None
        return {"scope": scope or "all", "zeroed": zeroed, "by": who, "node": ctx.node_id}

    return r
