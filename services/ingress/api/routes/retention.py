"""``POST /retention/evict`` and ``POST /retention/readmit`` (ES-51): the operator's gate gestures.

Both are an admin request to the data node this ingress sits on (ingress always pairs with
``data``, FL-17), guarded by ``fleet:operate``. The body is ``{"node", "confirm", "force"?,
"op_id"?}``; the gesture is judged once before anything is written and then writes one gate record
per counted log (see :mod:`shared.estate._evict`). Answers:

- 200 ``{"gesture", "action", "node", "forced_unjudged", "logs": [{"log", "outcome", ...}]}``;
- 409 with ``code`` ``self_evict`` (a node never evicts itself: ask another data node) / ``node_live`` / ``below_floor`` (with the position, floor, first_seq,
  generation) / ``leases_unreadable``;
- 422 for a bad node id, a ``confirm`` that does not repeat it, or an ``op_id`` the engine did not
  mint (``op_id_invalid``);
- 503 when this node's estate is not open.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends

from shared.estate._evict import GestureRefused, run_gesture
from shared.runtime import NodeContext, api_error, require_grant

__all__ = ["router"]

_STATUS = {"node_live": 409, "below_floor": 409, "leases_unreadable": 409, "self_evict": 409}


def router(ctx: NodeContext) -> APIRouter:
    """Build the retention gesture routes."""
    r = APIRouter(tags=["retention"])

    async def gesture(action: str, body: dict[str, Any]) -> dict[str, Any]:
        est = ctx.extras.get("estate")
        if est is None:
            raise api_error(503, "estate unavailable", "this node's estate copy is not open")
        node = body.get("node")
        confirm = body.get("confirm", "")
        force = body.get("force", False)
        op_id = body.get("op_id") or ""
        if node is None or node == "":
            raise api_error(422, "node_missing", 'the body must name the node: {"node": ..., "confirm": ...}')
        for field, value, kind in (("node", node, str), ("confirm", confirm, str), ("op_id", op_id, str)):
            if not isinstance(value, kind):
                raise api_error(422, "invalid", f"{field} must be a string (got {type(value).__name__})")
        if not isinstance(force, bool):
            raise api_error(422, "invalid", f"force must be true or false (got {type(force).__name__})")
        try:
            return await run_gesture(
                est,
                ctx.coord,
                action=action,
                node=node,
                confirm=confirm,
                writer=ctx.node_id,
                force=force and action == "evict",
                gesture=op_id,
            )
        except GestureRefused as e:
            detail: Any = {"message": e.detail, **e.facts} if e.facts else e.detail
            raise api_error(_STATUS.get(e.code, 422), e.code, detail) from None

    @r.post("/retention/evict", dependencies=[Depends(require_grant(ctx.cfg, "fleet:operate"))])
    async def evict(body: dict[str, Any] = Body(...)) -> dict[str, Any]:  # noqa: B008
        return await gesture("evict", body)

    @r.post("/retention/readmit", dependencies=[Depends(require_grant(ctx.cfg, "fleet:operate"))])
    async def readmit(body: dict[str, Any] = Body(...)) -> dict[str, Any]:  # noqa: B008
        return await gesture("readmit", body)

    return r
