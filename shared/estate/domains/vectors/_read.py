"""Reads of the vectors domain: what the embedding duty must do, and coverage (AG-11, ES-67).

``vectors.pending`` compares the copy's pages with their vectors: a published page is **changed**
when it has no window 0 of the asked model and width, or that window was made from another
``edit_number`` (a rename changes the title only, not the edit number, so it is not a change:
ES-67); a window whose page is gone or no longer published is **withdrawn**. ``vectors.coverage``
counts the published pages with a current window 0 (the coverage gauge, ES-67).

The pages table is read by its literal SQL name: every data node's copy holds both domains in one
file; nothing of the pages domain is imported (the domains stay independent).
"""

from __future__ import annotations

import time
from typing import Any

from ..._errors import InvalidField
from ...log._decide import Rules
from ...store import _sql as sql
from ._wire import MAX_WINDOWS, OVERLAP, WINDOW

__all__ = ["ANSWER_CHARS", "coverage", "pending"]

ANSWER_CHARS = 512 * 1024
"""Body characters one ``vectors.pending`` answer carries at most (it rides one NATS message)."""
_SPAN = WINDOW + (MAX_WINDOWS - 1) * (WINDOW - OVERLAP)
"""Body characters the windows of one source can cover; the rest is counted, never sent."""


def _model(args: dict[str, Any]) -> tuple[str, int]:
    model, dims = args.get("model"), args.get("dims")
    if not isinstance(model, str) or not model:
        raise InvalidField("model", "the embedding model id is required")
    if not isinstance(dims, int) or isinstance(dims, bool) or not 1 <= dims <= 4096:
        raise InvalidField("dims", "the vector width is required (1..4096)")
    return model, dims


_COVER: dict[tuple[Any, ...], tuple[float, tuple[int, int]]] = {}
COVERAGE_TTL = 2.0
"""Seconds a search reuses a coverage count (the join reads every page in scope; a search only
reports it, ES-67). The duty's ``vectors.pending`` always counts afresh."""


def coverage(
    conn: Any,
    model: str,
    dims: int,
    *,
    space: str | None = None,
    buckets: tuple[int, int] | None = None,
    ttl: float = 0.0,
) -> tuple[int, int]:
    """``(current, total)``: published pages in scope, and those with a current window 0 of ``model``/``dims``.

    ``ttl`` > 0 reuses a count of this file and scope made less than ``ttl`` seconds ago.
    """
    key = (str(sql.rows(conn, "PRAGMA database_list")[0].file), model, dims, space, buckets)
    hit = _COVER.get(key)
    now = time.monotonic()
    if ttl > 0 and hit is not None and now - hit[0] < ttl:
        return hit[1]
    where = "p.status = 'published'"
    binds: list[Any] = []
    if space is not None:
        where += " AND p.container = ?"
        binds.append(space)
    if buckets is not None:
        where += " AND p.search_shard BETWEEN ? AND ?"
        binds += list(buckets)
    row = sql.one(
        conn,
        "SELECT count(*) AS total, count(v.subject) AS current FROM pages p LEFT JOIN vector_windows v "
        "ON v.source_kind = 'page' AND v.source_id = p.id AND v.window = 0 AND v.model = ? AND v.dims = ? "
        f"AND v.edit_number = p.edit_number WHERE {where}",
        (model, dims, *binds),
    )
    found = (int(row.current or 0), int(row.total or 0))
    _COVER[key] = (now, found)
    return found


def pending(conn: Any, rules: Rules, args: dict[str, Any]) -> dict[str, Any]:
    """``vectors.pending {model, dims, limit?: 1..1024 (128), withdraw_limit?: 1..1024}``: the duty's work.

    Returns:
        ``{embed: [{source_kind, source_id, edit_number, title, body, shard, had, truncated}],
        withdraw: [{source_kind, source_id, window}], coverage: {current, total}}``: changed
        published pages by id (bodies cut to what :data:`~._wire.MAX_WINDOWS` windows cover, and
        at most :data:`ANSWER_CHARS` characters of bodies in all, at least one page); ``had`` the
        windows the page has now (any model); ``truncated`` the windows beyond the cap.

    Raises:
        InvalidField: naming ``model``, ``dims``, ``limit`` or ``withdraw_limit``.
    """
    model, dims = _model(args)
    limit = args.get("limit", 128)
    if not isinstance(limit, int) or not 1 <= limit <= 1024:
        raise InvalidField("limit", "must be 1..1024")
    wlimit = args.get("withdraw_limit", 1024)
    if not isinstance(wlimit, int) or not 1 <= wlimit <= 1024:
        raise InvalidField("withdraw_limit", "must be 1..1024")
    rows = sql.rows(
        conn,
        "SELECT p.id, p.edit_number, p.title, substr(p.body, 1, ?) AS body, length(p.body) AS chars, "
        "p.search_shard, (SELECT count(*) FROM vector_windows w WHERE w.source_kind = 'page' "
        "AND w.source_id = p.id) AS had FROM pages p LEFT JOIN vector_windows v ON v.source_kind = 'page' "
        "AND v.source_id = p.id AND v.window = 0 AND v.model = ? AND v.dims = ? "
        "WHERE p.status = 'published' AND (v.subject IS NULL OR v.edit_number != p.edit_number) "
        "ORDER BY p.id LIMIT ?",
        (_SPAN, model, dims, limit),
    )
    embed: list[dict[str, Any]] = []
    budget = ANSWER_CHARS
    for r in rows:
        body = str(r.body or "")
        if embed and len(body) > budget:
            break
        budget -= len(body)
        stride = WINDOW - OVERLAP
        chars = int(r.chars or 0)
        need = 1 if chars <= WINDOW else 1 + -(-(chars - WINDOW) // stride)
        embed.append(
            {
                "source_kind": "page",
                "source_id": r.id,
                "edit_number": int(r.edit_number),
                "title": r.title,
                "body": body,
                "shard": int(r.search_shard),
                "had": int(r.had or 0),
                "truncated": max(0, need - MAX_WINDOWS),
            }
        )
    gone = sql.rows(
        conn,
        "SELECT v.source_kind, v.source_id, v.window FROM vector_windows v LEFT JOIN pages p "
        "ON p.id = v.source_id WHERE v.source_kind = 'page' AND (p.id IS NULL OR p.status != 'published') "
        "ORDER BY v.source_id, v.window LIMIT ?",
        (wlimit,),
    )
    current, total = coverage(conn, model, dims)
    return {
        "embed": embed,
        "withdraw": [
            {"source_kind": g.source_kind, "source_id": g.source_id, "window": int(g.window)} for g in gone
        ],
        "coverage": {"current": current, "total": total},
    }
