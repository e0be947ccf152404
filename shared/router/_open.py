"""Building the router of a node from its context (called once at boot by the node runner)."""

from __future__ import annotations

from typing import Any

from shared.runtime import NodeContext

from ._router import EstateRouter, LocalEstate

__all__ = ["open_router", "router_of"]


def _local_of(ctx: NodeContext) -> LocalEstate | None:
    estate: Any = ctx.extras.get("estate")
    service: LocalEstate | None = getattr(estate, "service", None)
    return service


def open_router(ctx: NodeContext) -> EstateRouter:
    """Return this node's router, creating it on first use (stored in ``ctx.extras["router"]``).

    The local copy is looked up on every call (``ctx.extras["estate"]``, set by the data role when
    its estate is open), so the router may be built before the roles start.
    """
    existing = ctx.extras.get("router")
    if isinstance(existing, EstateRouter):
        return existing
    router = EstateRouter(
        ctx.link.nc if ctx.link is not None else None,
        ctx.coord,
        node_id=ctx.node_id,
        local=lambda: _local_of(ctx),
    )
    ctx.extras["router"] = router
    return router


def router_of(ctx: NodeContext) -> EstateRouter:
    """Return the node's router, building it if the runner has not (same as :func:`open_router`)."""
    return open_router(ctx)
