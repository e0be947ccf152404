"""``GET /objects``: the company's object store and what the collector last found (ES-71, ES-75, FL-5).

Grant ``state:read``. Answers ``{"store": the recorded identity ({"type", "bucket", "endpoint_url"?})
or null, "findings": the last pass's findings or null before the first pass, "missing": the count
of named files absent or mismatching (0 before the first pass)}``; the findings' shape is
:mod:`services.workers.objects`'s (``missing`` names each file as ``<project>/<path>@<version>``).
Read from the ``objects`` coordination slot, so any ingress node answers whichever node collects.
503 ``objects_slot_unavailable`` (with ``Retry-After``) when the slot cannot be read.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends

from shared import objects
from shared.coordination import CoordinationUnavailable
from shared.runtime import NodeContext, api_error, require_grant

from ._common import add

__all__ = ["FINDINGS_KEY", "router"]

FINDINGS_KEY = "findings"
"""The slot key the collector writes (``services.workers.objects.FINDINGS_KEY``; roles never import each other)."""


def _json(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return {"unreadable": raw.decode(errors="replace")[:200]}


class ObjectRoutes:
    """The object store view's endpoint."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    async def objects_status(self) -> dict[str, Any]:
        """The objects collector's last findings (ES-75, FL-5): the store, the missing files, their count."""
        if self.ctx.coord is None:
            raise api_error(503, "objects_slot_unavailable", "the node has no coordination store yet")
        try:
            store = await self.ctx.coord.get("objects", objects.SLOT_KEY)
            found = await self.ctx.coord.get("objects", FINDINGS_KEY)
        except CoordinationUnavailable as e:
            raise api_error(503, "objects_slot_unavailable", str(e), headers={"Retry-After": "5"}) from None
        findings = _json(found.value if found is not None else None)
        missing = (
            findings.get("missing_count", len(findings.get("missing") or []))
            if isinstance(findings, dict)
            else 0
        )
        return {
            "node": self.ctx.node_id,
            "store": _json(store.value if store is not None else None),
            "findings": findings,
            "missing": missing,
        }


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
