"""The retention gestures as the ingress runs them (ES-49, ES-51): the operator's backup ack, and the
eviction and readmission of a data node.

Used by ``services/ingress/api/routes/retention.py`` (its docstring says the wire):
:func:`record_ack` checks and records an ack in the ``trim_floors`` slot; :func:`run_retention_gesture`
checks an evict/readmit body and runs the gesture (:func:`shared.estate.life.run_gesture`).
Refusals are raised as the HTTP errors the routes answer.
"""

from __future__ import annotations

import json
import time
from typing import Any

from shared import estate
from shared.coordination import CoordinationUnavailable
from shared.estate import DOMAINS, STREAMS
from shared.estate.life import GestureRefused, run_gesture
from shared.estate.log import is_compacted
from shared.runtime import NodeContext, api_error

__all__ = ["record_ack", "run_retention_gesture"]

_GESTURE_KEYS = frozenset({"node", "confirm", "force", "op_id"})
"""The keys an evict/readmit body may hold (any other is refused, naming it)."""
_STATUS = {"node_live": 409, "below_floor": 409, "leases_unreadable": 409, "self_evict": 409}


async def record_ack(ctx: NodeContext, body: dict[str, Any]) -> dict[str, Any]:
    """Record that the operator has a log backed up through ``position`` (ES-49): ``trim_floors``
    key ``ack.<domain>``; answers ``{"domain", "stream", "seq", "at", "by"}``.

    Raises:
        HTTPException: 503 without an open estate or coordination (or the log's head unreadable);
            422 ``invalid`` naming the field; 409 ``ack_lowered`` below the last ack.
    """
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
    domains = {STREAMS[d]: d for d in DOMAINS if not is_compacted(d)}  # a compacted log is never trimmed
    if not isinstance(stream, str) or stream not in domains:
        raise api_error(422, "invalid", f"stream must be one of {', '.join(sorted(domains))}", field="stream")
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
            raise api_error(409, "ack_lowered", f"{stream} is acked through {prev}; an ack never moves down")
        rec = {"stream": stream, "seq": position, "at": int(time.time() * 1_000_000), "by": ctx.node_id}
        await ctx.coord.put("trim_floors", key, json.dumps(rec).encode())
    except CoordinationUnavailable as e:
        raise api_error(503, "coordination unavailable", str(e)) from None
    return {"domain": domain, **rec}


async def run_retention_gesture(ctx: NodeContext, action: str, body: dict[str, Any]) -> dict[str, Any]:
    """Judge and run an ``evict`` / ``readmit`` gesture (ES-51) on this node's estate copy.

    Raises:
        HTTPException: 503 without an open estate; 422 for a bad body (naming the key); the
            refusal's status (409 ``self_evict`` / ``node_live`` / ``below_floor`` /
            ``leases_unreadable``, else 422) with its code and facts.
    """
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
