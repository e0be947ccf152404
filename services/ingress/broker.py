"""Broker membership as the ingress shows and changes it (FL-147..FL-150).

Used by the ``/fleet/broker`` routes (``services/ingress/api/routes/broker.py``; its docstring says
the wire): :func:`membership_of` is the node's :class:`~shared.broker.Membership`, :func:`live_nodes`
the live nodes it compares the voters with, :func:`remove_member` one removal.
"""

from __future__ import annotations

from typing import Any

from shared import leases, logs
from shared.broker import Membership, MembershipOutcomeUnknown, MembershipRefused
from shared.coordination import CoordinationUnavailable
from shared.runtime import NodeContext, api_error

__all__ = ["live_nodes", "membership_of", "remove_member"]

_log = logs.get("broker.membership")
_EXTRA = "broker_membership"


def membership_of(ctx: NodeContext) -> Membership:
    """This node's :class:`Membership` (``ctx.extras["broker_membership"]``), made on first use.

    Raises:
        HTTPException: 503 ``not_ready`` before the node has its broker link.
    """
    found = ctx.extras.get(_EXTRA)
    if isinstance(found, Membership):
        return found
    link = ctx.link
    if link is None:
        raise api_error(
            503, "not_ready", "the node has not connected to its broker yet", headers={"Retry-After": "5"}
        )
    emb = link.embedded
    m = Membership(
        link.nc,
        node_id=ctx.node_id,
        kind=link.kind,
        client_url=emb.url if emb is not None else "",
        monitor_url=emb.monitor_url if emb is not None else "",
    )
    ctx.extras[_EXTRA] = m
    return m


async def live_nodes(ctx: NodeContext) -> list[dict[str, Any]]:
    """The live nodes of the presence lease; 503 ``lease store unavailable`` when it cannot be read."""
    if ctx.coord is None:
        raise api_error(503, "lease store unavailable", "the node has not connected to its broker yet")
    try:
        view = await leases.fleet_view(ctx.coord)
    except CoordinationUnavailable as e:
        raise api_error(503, "lease store unavailable", str(e)) from None
    return list(view["nodes"])


async def remove_member(
    ctx: NodeContext, *, node: str | None, peer: str | None, force: bool
) -> dict[str, Any]:
    """Remove a dead broker member by node id or peer id (FL-149).

    Raises:
        HTTPException: 503 while presence cannot be read; the refusal's status and code (409);
            504 ``outcome_unknown`` when the carrying member went silent.
    """
    m = membership_of(ctx)
    presence = await live_nodes(ctx) if m.kind != "client" else []
    try:
        return await m.remove(presence, node=node, peer=peer, force=force)
    except MembershipRefused as e:
        _log.warning("broker_removal_refused", target=node or peer, code=e.code, detail=e.detail)
        raise api_error(e.status, e.code, e.detail) from None
    except MembershipOutcomeUnknown as e:
        _log.warning("broker_removal_outcome_unknown", target=node or peer, detail=str(e))
        raise api_error(504, "outcome_unknown", str(e)) from None
