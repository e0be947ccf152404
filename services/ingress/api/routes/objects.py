"""``GET /objects``: the company's object store and what the collector last found (ES-71, ES-75, FL-5).

Grant ``state:read``. Answers ``{"store": the recorded identity ({"type", "bucket", "endpoint_url"?})
or null, "findings": the last pass's findings or null before the first pass, "missing": the count
of named files absent or mismatching (0 before the first pass)}``; the findings' shape is
:mod:`services.workers.objects`'s (``missing`` names each file as ``<project>/<path>@<version>``).
Read from the ``objects`` coordination slot, so any ingress node answers whichever node collects.
503 ``objects_slot_unavailable`` (with ``Retry-After``) when the slot cannot be read.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from shared.runtime import NodeContext, require_grant

from ...objects_view import FINDINGS_KEY, objects_view
from ._common import add

__all__ = ["FINDINGS_KEY", "router"]


class ObjectRoutes:
    """The object store view's endpoint."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    async def objects_status(self) -> dict[str, Any]:
        """The objects collector's last findings (ES-75, FL-5): the store, the missing files, their count."""
        return await objects_view(self.ctx)


def router(ctx: NodeContext) -> APIRouter:
    """Build the objects route."""
    r = APIRouter(tags=["objects"])
    h = ObjectRoutes(ctx)
    add(
        r,
        "/objects",
        h.objects_status,
        methods=["GET"],
        dependencies=[Depends(require_grant(ctx.cfg, "state:read"))],
    )
    return r
