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
per counted log (see :mod:`shared.estate.life._evict`). Answers:

- 200 ``{"gesture", "action", "node", "forced_unjudged", "logs": [{"log", "outcome", ...}]}``;
- 409 with ``code`` ``self_evict`` (a node never evicts itself: ask another data node) / ``node_live`` / ``below_floor`` (with the position, floor, first_seq,
  generation) / ``leases_unreadable``;
- 422 for a bad node id, a ``confirm`` that does not repeat it, an ``op_id`` the engine did not
  mint (``op_id_invalid``), or a key the body does not take (named);
- 503 when this node's estate is not open.
"""

from __future__ import annotations

import json
import time
from typing import Any

from fastapi import APIRouter, Body, Depends

from shared import estate
from shared.coordination import CoordinationUnavailable
from shared.estate import DOMAINS, STREAMS
from shared.estate.life import GestureRefused, run_gesture
from shared.runtime import NodeContext, api_error, require_grant

__all__ = ["router"]

_GESTURE_KEYS = frozenset({"node", "confirm", "force", "op_id"})
"""The keys an evict/readmit body may hold (any other is refused, naming it)."""
_STATUS = {"node_live": 409, "below_floor": 409, "leases_unreadable": 409, "self_evict": 409}


def router(ctx: NodeContext) -> APIRouter:
    """Build the retention gesture routes."""
    r = APIRouter(tags=["retention"])

    async def gesture(action: str, body: dict[str, Any]) -> dict[str, Any]:
        est = ctx.extras.get("estate")
        if est is None:
            raise api_error(503, "estate unavailable", "this node's estate copy is not open")
        unknown = sorted(str(k) for k in body if k not in _GESTURE_KEYS)
        if unknown:  # a misspelt "force" must not evict unforced, nor "confirm" read as missing
            raise api_error(
                422,
                "invalid",
                f"unknown key(s) {', '.join(unknown)}; the body takes {', '.join(sorted(_GESTURE_KEYS))}",
                field=unknown[0],
            )
        node = body.get("node")
        confirm = body.get("confirm", "")
        force = body.get("force", False)
        op_id = body.get("op_id") or ""
        if node is None or node == "":
            raise api_error(
                422,
                "node_missing",
                'the body must name the node: {"node": ..., "confirm": ...}',
                field="node",
            )
        for field, value, kind in (("node", node, str), ("confirm", confirm, str), ("op_id", op_id, str)):
            if not isinstance(value, kind):
                raise api_error(
                    422, "invalid", f"{field} must be a string (got {type(value).__name__})", field=field
                )
        if not isinstance(force, bool):
            raise api_error(
                422, "invalid", f"force must be true or false (got {type(force).__name__})", field="force"
            )
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

    @r.post("/retention/ack", dependencies=[Depends(require_grant(ctx.cfg, "fleet:operate"))])
    async def ack(body: dict[str, Any] = Body(...)) -> dict[str, Any]:  # noqa: B008
        est = ctx.extras.get("estate")
        if est is None or ctx.coord is None:
            raise api_error(503, "estate unavailable", "this node's estate copy or coordination is not open")
        unknown = sorted(str(k) for k in body if k not in ("stream", "position"))
        if unknown:
            raise api_error(
                422,
                "invalid",
                f"unknown key(s) {', '.join(unknown)}; the body takes position, stream",
                field=unknown[0],
            )
        stream, position = body.get("stream"), body.get("position")
        domains = {STREAMS[d]: d for d in DOMAINS}
        if not isinstance(stream, str) or stream not in domains:
            raise api_error(
                422, "invalid", f"stream must be one of {', '.join(sorted(domains))}", field="stream"
            )
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise api_error(422, "invalid", "position must be a whole number of at least 0", field="position")
        domain = domains[stream]
        try:
            _first, last = await est.log.head(domain)
        except estate.Refused as e:
            raise api_error(503, e.refusal, str(e)) from None
        if position > last:
            raise api_error(
                422,
                "invalid",
                field="position",
                detail=f"position {position} is past {stream}'s last record ({last})",
            )
        key = f"ack.{domain}"
        try:
            old = await ctx.coord.get("trim_floors", key)
            prev = json.loads(old.value).get("seq", 0) if old is not None else 0
            if isinstance(prev, int) and position < prev:
                raise api_error(
                    409, "ack_lowered", f"{stream} is acked through {prev}; an ack never moves down"
                )
            rec = {"stream": stream, "seq": position, "at": int(time.time() * 1_000_000), "by": ctx.node_id}
            await ctx.coord.put("trim_floors", key, json.dumps(rec).encode())
        except CoordinationUnavailable as e:
            raise api_error(503, "coordination unavailable", str(e)) from None
        return {"domain": domain, **rec}

    @r.post("/retention/evict", dependencies=[Depends(require_grant(ctx.cfg, "fleet:operate"))])
    async def evict(body: dict[str, Any] = Body(...)) -> dict[str, Any]:  # noqa: B008
        return await gesture("evict", body)

    @r.post("/retention/readmit", dependencies=[Depends(require_grant(ctx.cfg, "fleet:operate"))])
    async def readmit(body: dict[str, Any] = Body(...)) -> dict[str, Any]:  # noqa: B008
        return await gesture("readmit", body)

    return r
