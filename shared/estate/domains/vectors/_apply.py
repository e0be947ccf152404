"""How vectors records are applied (ES-68): a put replaces its window's rows, a withdraw deletes them.

Deterministic (ES-16): the record and the rows only. A put whose vector does not decode to its
declared width is skipped (logged ``vector_record_invalid``), never a stuck applier.
"""

from __future__ import annotations

import base64
import binascii

from sqlalchemy import Connection

from shared import logs

from ...log._applier import ApplyOutcome
from ...log._record import Record
from ...store import _sql as sql
from ._tables import T_VECTOR_CODES, T_VECTOR_WINDOWS
from ._wire import decode_vector, sign_code

__all__ = ["apply_vector_put", "apply_vector_withdraw"]

_log = logs.get("vectors")


def apply_vector_put(conn: Connection, rec: Record, seq: int) -> ApplyOutcome:
    """Apply one ``vector_put``: the window's vector and sign code become the record's (insert or replace)."""
    p = rec.payload
    try:
        dims = int(p["dims"])
        raw = base64.b64decode(str(p["vector"]), validate=True)
        vec = decode_vector(raw, dims)
        row = {
            "subject": rec.subject,
            "source_kind": str(p["source_kind"]),
            "source_id": str(p["source_id"]),
            "model": str(p["model"]),
            "dims": dims,
            "shard": int(p["shard"]),
            "seq": seq,
        }
        window = int(p["window"])
        windows = int(p.get("windows", 1))
        edit = int(p["edit_number"])
    except (KeyError, TypeError, ValueError, binascii.Error) as e:
        _log.warning("vector_record_invalid", subject=rec.subject, seq=seq, error=str(e))
        return ApplyOutcome("vectors", rec.subject)
    sql.insert_row(
        conn,
        T_VECTOR_WINDOWS,
        {**row, "window": window, "windows": windows, "edit_number": edit, "vector": raw},
        conflict="OR REPLACE",
    )
    sql.insert_row(conn, T_VECTOR_CODES, {**row, "code": sign_code(vec)}, conflict="OR REPLACE")
    return ApplyOutcome("vectors", rec.subject)


def apply_vector_withdraw(conn: Connection, rec: Record, seq: int) -> ApplyOutcome:
    """Apply one ``vector_withdraw``: the window's rows are deleted on this copy."""
    sql.run(conn, "DELETE FROM vector_windows WHERE subject = ?", (rec.subject,))
    sql.run(conn, "DELETE FROM vector_codes WHERE subject = ?", (rec.subject,))
    return ApplyOutcome("vectors", rec.subject)
