"""The object store view (ES-71, ES-75, FL-5): the recorded store and the collector's last findings.

Used by ``GET /objects`` (``services/ingress/api/routes/objects.py``; its docstring says the answer):
:func:`objects_view` reads the ``objects`` coordination slot, so any ingress node answers whichever
node collects.
"""

from __future__ import annotations

import json
from typing import Any

from shared import objects
from shared.coordination import CoordinationUnavailable
from shared.runtime import NodeContext, api_error

__all__ = ["FINDINGS_KEY", "objects_view"]

FINDINGS_KEY = "findings"
"""The slot key the collector writes (``services.workers.objects.FINDINGS_KEY``; roles never import each other)."""


def _json(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return {"unreadable": raw.decode(errors="replace")[:200]}


async def objects_view(ctx: NodeContext) -> dict[str, Any]:
    """``{"node", "store", "findings", "missing"}`` from the ``objects`` slot.

    Raises:
        HTTPException: 503 ``objects_slot_unavailable`` without a coordination store or when the
            slot cannot be read (with ``Retry-After``).
    """
    if ctx.coord is None:
        raise api_error(503, "objects_slot_unavailable", "the node has no coordination store yet")
    try:
        store = await ctx.coord.get("objects", objects.SLOT_KEY)
        found = await ctx.coord.get("objects", FINDINGS_KEY)
    except CoordinationUnavailable as e:
        raise api_error(503, "objects_slot_unavailable", str(e), headers={"Retry-After": "5"}) from None
    findings = _json(found.value if found is not None else None)
    missing = (
        findings.get("missing_count", len(findings.get("missing") or [])) if isinstance(findings, dict) else 0
    )
    return {
        "node": ctx.node_id,
        "store": _json(store.value if store is not None else None),
        "findings": findings,
        "missing": missing,
    }
