"""The node's fleet budgets (FL-120, CO-37) as the ingress reads and resets them.

Used by ``GET /budgets`` and ``POST /budgets/reset`` (``services/ingress/api/routes/budgets.py``):
:func:`budgets_of` is the node's :class:`~shared.budgets.Budgets`, made on first use.
"""

from __future__ import annotations

from shared.budgets import Budgets
from shared.runtime import NodeContext

__all__ = ["budgets_of"]

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
