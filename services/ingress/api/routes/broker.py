"""``GET /fleet/broker`` and the removal of a dead broker member (FL-147..FL-150).

- ``GET /fleet/broker`` (``state:read``): what each live node advertises beside how the metadata
  group counts it, and every disagreement named (FL-147). An unread group is absent with
  ``group_error``, never empty; on an external cluster the answer is ``external: true`` and nothing
  else. While the lease store cannot be read (lost quorum) it still answers the group, with no
  ``nodes`` or ``findings`` (they compare voters with presence) and ``presence_error`` saying why;
  a removal then answers 503.
- ``POST /fleet/broker/remove/{node}?confirm={node}[&force=true]`` and
  ``POST /fleet/broker/remove-peer/{peer}?confirm={peer}[&force=true]`` (``fleet:operate``): 400
  ``confirm_required`` when ``confirm`` is missing or does not repeat the target; 409 with the
  refusal code (``external``, ``node_live``, ``no_meta_group``, ``not_a_peer``,
  ``membership_changing``, ``no_leader`` with the quorum arithmetic, ``removing_self``, ``failed``)
  and nothing changed; 504 ``outcome_unknown`` when the carrying member went silent (read the list
  before retrying); 200 ``{"node", "peer", "by", "group"}``. One removal takes at most 2 min 5 s.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException

from shared.runtime import NodeContext, api_error, require_grant

from ...broker import live_nodes, membership_of, remove_member
from ._common import add

__all__ = ["membership_of", "router"]


def _confirm(target: str, confirm: str | None, what: str) -> None:
    if not confirm or confirm != target:
        got = f"got {confirm!r}" if confirm else "it is missing"
        raise api_error(400, "confirm_required", f"repeat the {what} as confirm={target} ({got})")


class BrokerRoutes:
    """The broker membership endpoints (FL-147, FL-149)."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    async def get_broker(self) -> dict[str, Any]:
        m = membership_of(self.ctx)
        if m.kind == "client":
            return await m.view([])
        try:
            presence = await live_nodes(self.ctx)
        except HTTPException as e:
            # Lost quorum is when an operator most needs the voters: answer the group alone, with
            # no findings (they compare voters with presence, which cannot be read now).
            view = await m.view([])
            detail = e.detail.get("detail") if isinstance(e.detail, dict) else e.detail
            return {
                **view,
                "nodes": [],
                "findings": [],
                "presence_error": f"lease store unavailable: {detail}",
            }
        return await m.view(presence)

    async def remove_node(self, node: str, confirm: str | None = None, force: bool = False) -> dict[str, Any]:
        _confirm(node, confirm, "node id")
        return await remove_member(self.ctx, node=node, peer=None, force=force)

    async def remove_peer(self, peer: str, confirm: str | None = None, force: bool = False) -> dict[str, Any]:
        _confirm(peer, confirm, "peer id")
        return await remove_member(self.ctx, node=None, peer=peer, force=force)


def router(ctx: NodeContext) -> APIRouter:
    """Build the broker membership routes (FL-147, FL-149)."""
    r = APIRouter(tags=["fleet"])
    h = BrokerRoutes(ctx)
    operate = [Depends(require_grant(ctx.cfg, "fleet:operate"))]
    add(
        r,
        "/fleet/broker",
        h.get_broker,
        methods=["GET"],
        dependencies=[Depends(require_grant(ctx.cfg, "state:read"))],
    )
    add(r, "/fleet/broker/remove/{node}", h.remove_node, methods=["POST"], dependencies=operate)
    add(r, "/fleet/broker/remove-peer/{peer}", h.remove_peer, methods=["POST"], dependencies=operate)
    return r
