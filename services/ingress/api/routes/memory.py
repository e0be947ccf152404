"""``GET /agents/{handle}/memory``: one seat's diary, episodes, profiles and skills (AG-9).

Grant ``audit:read`` (a ``state:read`` token is 403). 200 answers
:func:`services.ingress.memory_view.agent_memory`'s shape (a failing section ``[]`` plus an
``errors`` entry); 404 ``no_such_agent`` for an unknown or human handle; 503 ``nobody_answered``
with each data node's reply when no data node serves the read.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from shared import estate
from shared.router import RouterError
from shared.runtime import NodeContext, api_error, require_grant

from ...memory_view import NoSuchAgent, agent_memory
from ._common import add, estate_http_error

__all__ = ["router"]


class MemoryRoutes:
    """The seat memory read over this node's estate router."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    async def get_agent_memory(self, handle: str) -> dict[str, Any]:
        """A seat's memory (AG-9)."""
        try:
            return await agent_memory(self.ctx, handle)
        except NoSuchAgent:
            raise api_error(
                404, "no_such_agent", f"{handle!r} is no agent seat of the active company", field="handle"
            ) from None
        except (estate.EstateError, RouterError) as e:
            raise estate_http_error(e) from None


def router(ctx: NodeContext) -> APIRouter:
    """Build the memory route (AG-9)."""
    r = APIRouter(tags=["memory"])
    h = MemoryRoutes(ctx)
    audit = [Depends(require_grant(ctx.cfg, "audit:read"))]
    add(r, "/agents/{handle}/memory", h.get_agent_memory, methods=["GET"], dependencies=audit)
    return r
