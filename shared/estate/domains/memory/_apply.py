"""How memory records are applied (AG-1): a put replaces the subject's row, a tombstone deletes it.

Deterministic (ES-16): the record and the rows only. A record naming a table this build does not
know is skipped, logged ``memory_row_unknown_table`` (a newer writer's table, AG-1).
"""

from __future__ import annotations

import json

from sqlalchemy import Connection

from shared import logs

from ...log._applier import ApplyOutcome
from ...log._record import Record
from ...store import _sql as sql
from ._tables import T_MEMORY
from ._wire import TABLES

__all__ = ["apply_memory_put", "apply_memory_tombstone"]

_log = logs.get("memory")


def _known(rec: Record, seq: int) -> bool:
    table = str(rec.payload.get("table", ""))
    if table in TABLES:
        return True
    _log.warning("memory_row_unknown_table", table=table, subject=rec.subject, seq=seq)
    return False


def apply_memory_put(conn: Connection, rec: Record, seq: int) -> ApplyOutcome:
    """Apply one ``memory_put``: the subject's row becomes the record's row (insert or replace)."""
    if not _known(rec, seq):
        return ApplyOutcome("memory", rec.subject)
    p = rec.payload
    sql.insert_row(
        conn,
        T_MEMORY,
        {
            "subject": rec.subject,
            "handle": str(p["handle"]),
            "tbl": str(p["table"]),
            "key": str(p["key"]),
            "row": json.dumps(p.get("row") or {}, separators=(",", ":"), ensure_ascii=False),
            "seq": seq,
            "writer": rec.writer,
            "at": rec.at,
        },
        conflict="OR REPLACE",
    )
    return ApplyOutcome("memory", rec.subject)


def apply_memory_tombstone(conn: Connection, rec: Record, seq: int) -> ApplyOutcome:
    """Apply one ``memory_tombstone``: the subject's row is deleted on this copy (AG-1, FL-71 amended)."""
    if _known(rec, seq):
        sql.run(conn, "DELETE FROM memory_rows WHERE subject = ?", (rec.subject,))
    return ApplyOutcome("memory", rec.subject)
