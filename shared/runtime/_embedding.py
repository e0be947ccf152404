"""This node's embeddings provider (AG-10), built from the applied company and reused.

:func:`node_embedder` builds ``providers.embeddings`` of the resolved company (secrets resolved)
once per distinct entry and keeps it in ``ctx.extras["embedder"]``; a company without the entry
(or with one that cannot be built, logged ``embedder_unconfigured``) has none, and searches say
``semantic: off`` (AG-13).
"""

from __future__ import annotations

from typing import Any

from shared import logs
from shared.providers import Embedder, ProviderMisconfigured, build_embedder

__all__ = ["node_embedder"]

_log = logs.get("runtime")


def node_embedder(ctx: Any) -> Embedder | None:
    """Return this node's embedder for the applied company, or None (no entry, or not buildable).

    Args:
        ctx: The :class:`~shared.runtime.NodeContext` (its ``resolved`` company and ``extras``).
    """
    company = getattr(ctx, "resolved", None)
    entry = getattr(getattr(company, "providers", None), "embeddings", None)
    if entry is None:
        return None
    key = entry.model_dump_json()
    held = ctx.extras.get("embedder")
    if isinstance(held, tuple) and held[0] == key:
        return held[1]  # type: ignore[no-any-return]
    try:
        embedder = build_embedder(entry)
    except ProviderMisconfigured as e:
        _log.warning("embedder_unconfigured", reason=str(e))
        embedder = None
    ctx.extras["embedder"] = (key, embedder)
    return embedder
