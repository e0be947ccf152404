"""Reads of the memory domain (AG-4, AG-8, AG-9): a seat's rows of one table, newest first.

Rows come back as the writer published them plus ``_subject``, ``_seq`` and ``_at`` (the writer's
instant, unix µs). The learning duty, recall on a data node and ``GET /agents/{handle}/memory`` read
through these; a satellite holder reads its scratch cache instead (AG-7).
"""

from __future__ import annotations

import json
from typing import Any

from ..._errors import InvalidField
from ...log._decide import Rules
from ...store import _sql as sql
from ._wire import TABLES

__all__ = ["MAX_ROWS", "memory_count", "memory_rows"]

MAX_ROWS = 10_000
"""Most rows one ``memory.rows`` read answers."""


def _handle(args: dict[str, Any]) -> str:
    handle = args.get("handle")
    if not isinstance(handle, str) or not handle:
        raise InvalidField("handle", "a seat handle is required")
    return handle


def memory_rows(conn: Any, rules: Rules, args: dict[str, Any]) -> dict[str, Any]:
    """``memory.rows {handle, tables?: [name], limit?: 1..10000}`` → ``{rows: [...]}``, newest first.

    Raises:
        InvalidField: no ``handle``, an unknown table, or ``limit`` outside 1..10 000.
    """
    handle = _handle(args)
    tables = args.get("tables") or list(TABLES)
    if not isinstance(tables, list) or any(t not in TABLES for t in tables):
        raise InvalidField("tables", f"each table is one of {', '.join(TABLES)}")
    limit = args.get("limit", MAX_ROWS)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_ROWS:
        raise InvalidField("limit", f"an integer 1..{MAX_ROWS}")
    marks = ",".join("?" for _ in tables)
    found = sql.rows(
        conn,
        f"SELECT subject, tbl, row, seq, at FROM memory_rows WHERE handle = ? AND tbl IN ({marks}) "
        "ORDER BY at DESC, seq DESC LIMIT ?",
        (handle, *tables, limit),
    )
    out = []
    for r in found:
        row = json.loads(r.row)
        row.update({"_subject": r.subject, "_table": r.tbl, "_seq": int(r.seq), "_at": int(r.at)})
        out.append(row)
    return {"rows": out}


def memory_count(conn: Any, rules: Rules, args: dict[str, Any]) -> dict[str, Any]:
    """``memory.count {handle}`` → ``{rows: N, by_table: {table: n}}`` (what hydration reports, AG-7)."""
    handle = _handle(args)
    found = sql.rows(
        conn, "SELECT tbl, count(*) AS n FROM memory_rows WHERE handle = ? GROUP BY tbl", (handle,)
    )
    by = {str(r.tbl): int(r.n) for r in found}
    return {"rows": sum(by.values()), "by_table": by}
