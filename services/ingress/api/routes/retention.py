"""``POST /retention/evict``, ``/retention/readmit`` (ES-51) and ``/retention/ack`` (ES-49): operator gestures.

``POST /retention/ack`` with ``{"stream": "CREWLET_TRACKER_LOG", "position": 1234}`` records that the
operator has the log backed up through ``position`` (``retention.backup_floor: operator``): the
``trim_floors`` key ``ack.<domain>`` (``{"stream", "seq", "at", "by"}``), which the trim's
``backup_floor`` term reads. Refused: a stream that is not a counted log (422 ``invalid``, naming
the two), a position that is not a whole number ≥ 0 or is past the log's last record (422), and a
position below the last ack (409 ``ack_lowered``: the term never moves down).

Both are an admin request to the data node this ingress sits on (ingress always pairs with
``data``, FL-17), guarded by ``fleet:operate``. The body is ``{"node", "confirm", "force"?,
"op_id"?}``; the gesture is judged once before anything is written and then writes one gate record
per counted log (see :mod:`shared.estate.life`). Answers:

- 200 ``{"gesture", "action", "node", "forced_unjudged", "logs": [{"log", "outcome", ...}]}``;
- 409 with ``code`` ``self_evict`` (a node never evicts itself: ask another data node) / ``node_live`` / ``below_floor`` (with the position, floor, first_seq,
  generation) / ``leases_unreadable``;
- 422 for a bad node id, a ``confirm`` that does not repeat it, an ``op_id`` the engine did not
  mint (``op_id_invalid``), or a key the body does not take (named);
- 503 when this node's estate is not open.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends

from shared.runtime import NodeContext, require_grant

from ...retention import record_ack, run_retention_gesture
from ._common import add

__all__ = ["router"]


class RetentionRoutes:
    """The retention gestures' endpoints (``fleet:operate``)."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    async def ack(self, body: dict[str, Any] = Body(...)) -> dict[str, Any]:  # noqa: B008
        return await record_ack(self.ctx, body)

    async def evict(self, body: dict[str, Any] = Body(...)) -> dict[str, Any]:  # noqa: B008
        return await run_retention_gesture(self.ctx, "evict", body)

    async def readmit(self, body: dict[str, Any] = Body(...)) -> dict[str, Any]:  # noqa: B008
        return await run_retention_gesture(self.ctx, "readmit", body)


def router(ctx: NodeContext) -> APIRouter:
    """Build the retention gesture routes."""
    r = APIRouter(tags=["retention"])
    operate = [Depends(require_grant(ctx.cfg, "fleet:operate"))]
    h = RetentionRoutes(ctx)
    add(r, "/retention/ack", h.ack, methods=["POST"], dependencies=operate)
    add(r, "/retention/evict", h.evict, methods=["POST"], dependencies=operate)
    add(r, "/retention/readmit", h.readmit, methods=["POST"], dependencies=operate)
    return r
