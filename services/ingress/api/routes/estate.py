"""``GET /estate``: the estate's placement and its life over time (FL-138, ES-23, ES-47..ES-59, ES-86).

Layout 0: every data node is a complete replica, so ``placement`` is always ``whole`` (FL-138). The
rest is read from the coordination slots, never by asking peers, so every ingress node answers
the same: each data node's positions rows (``positions``, ES-23), the trim floors per log
(``trim_floors``, ES-48), the live trim holds (``trim_holds``), the announced backups
(``backups``, ES-82); plus each log's capacity figures from the broker (``stream_info``, ES-86)
and the alarms active in this process (ES-92). Grant ``state:read``.

Answer::

    {"layout": 0, "placement": "whole", "asked": node_id, "at": unix µs,
     "nodes": [{"node", "domain", "stream", "seq", "applied_through", "generation", "log_first",
                "log_last", "lag", "state", "log_diverged", "snapshot": {"seq", "taken_at",
                "age_seconds", "sha256", "bytes"} | null, "snapshot_skip", "store_bytes", "wal_bytes",
                "at", "age_seconds", "stale", "live"}],
     "logs": {domain: {"stream", "bytes", "max_bytes" (-1 = unlimited), "first_seq", "last_seq",
                       "reserve_bytes" | null, "headroom_fraction" | null, "error"?}},
     "floors": {domain: trim_floors record | null},
     "holds": [trim_holds records], "backups": [backups records],
     "alarms": [kind], "alarm_detail": {kind: {"since", "measurement", "remedy"}},
     "evicted": {domain: {node: evicted-at µs}} (ES-51, from this node's copy),
     "retention": {the node's retention knobs in seconds / bytes},
     "unreadable": [slot names that could not be read]}

A row is ``stale`` when its last report is older than :data:`STALE_AFTER` seconds; ``live`` says
whether the node holds a presence lease (null when the lease store could not be read). Fields a
row lacks (an older build, or a field not yet written) are null. A coordination slot that cannot
be read is named in ``unreadable`` and answers empty; when the store is not connected at all the
route answers 503.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from shared.runtime import NodeContext, api_error, require_grant

from ...estate_view import REMEDY, STALE_AFTER, capacity, estate_view
from ._common import add

__all__ = ["REMEDY", "STALE_AFTER", "capacity", "router"]


class EstateRoutes:
    """The estate view's endpoint."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    async def get_estate(self) -> dict[str, Any]:
        if self.ctx.coord is None:
            raise api_error(503, "coordination unavailable", "the node has not connected to its broker yet")
        return await estate_view(self.ctx)


def router(ctx: NodeContext) -> APIRouter:
    """Build the estate route."""
    r = APIRouter(tags=["estate"])
    read = [Depends(require_grant(ctx.cfg, "state:read"))]
    add(r, "/estate", EstateRoutes(ctx).get_estate, methods=["GET"], dependencies=read)
    return r
