"""Applying usage days (ES-69): a record replaces its object's rows; old days leave in the same
transaction.

Kind ``usage_day``, one per publish of one day object; its payload is the object's whole value
(:meth:`~._derive.DayObject.payload`). No arbitration: a node is the only writer of its own objects
and the compacted log keeps the newest value per subject. Retention is deterministic (ES-16): the
newest day among the rows and the record sets the horizon, and every row older than
:data:`RETENTION_DAYS` days before it is deleted in the transaction applying the record, with no
sweep. A record for a day already past the horizon applies nothing.
"""

from __future__ import annotations

import json
from datetime import date, timedelta
from typing import Any

from sqlalchemy import Connection

from ..._errors import InvalidField
from ...log._applier import ApplyFn, ApplyOutcome
from ...log._record import Record
from ...store import _sql as sql
from ._derive import object_id
from ._tables import T_USAGE_DAYS, T_USAGE_SPEND

__all__ = ["KINDS", "RETENTION_DAYS", "horizon_start"]

RETENTION_DAYS = 181
"""Company days a data node keeps (ES-69): the newest day and the 180 before it."""
_TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "rounds")


def horizon_start(newest: str) -> str:
    """Return the oldest day kept when ``newest`` (``YYYY-MM-DD``) is the newest day (ES-69)."""
    return (date.fromisoformat(newest) - timedelta(days=RETENTION_DAYS - 1)).isoformat()


def _str(p: dict[str, Any], name: str) -> str:
    value = p.get(name, "")
    if not isinstance(value, str):
        raise InvalidField(name, f"a usage day's {name} is text, not {type(value).__name__}")
    return value


def _int(p: dict[str, Any], name: str) -> int:
    value = p.get(name, 0)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


def _spend_rows(oid: str, p: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for i, line in enumerate(p.get("spend") or ()):
        if not isinstance(line, dict):
            continue
        rows.append(
            {
                "day_id": oid,
                "line": i,
                "node": p["node"],
                "day": p["day"],
                "kind": p["kind"],
                "seat": p["seat"],
                "schedule": p.get("schedule", ""),
                "phase": str(line.get("phase") or "execute"),
                "worker": str(line.get("worker") or ""),
                "provider": str(line.get("provider") or ""),
                "model": str(line.get("model") or ""),
                **{k: _int(line, k) for k in _TOKENS},
            }
        )
    return rows


def _retire(conn: Connection, day: str) -> str:
    """Delete every row older than the horizon the newest day (rows or ``day``) sets; return its start."""
    newest = sql.one(conn, "SELECT max(day) FROM usage_days")
    top = max(day, newest[0]) if newest is not None and newest[0] else day
    start = horizon_start(top)
    sql.run(conn, "DELETE FROM usage_spend WHERE day < ?", (start,))
    sql.run(conn, "DELETE FROM usage_days WHERE day < ?", (start,))
    return start


def apply_usage_day(conn: Connection, rec: Record, seq: int) -> ApplyOutcome:
    """Replace one day object's rows with the record's value (ES-69), retiring days past the horizon.

    Raises:
        InvalidField: the payload names no node, day, kind or seat, or a day that is no date (the
            applier retries then faults: a defect, never a silent skip).
    """
    p = rec.payload
    node, day, kind, seat = _str(p, "node"), _str(p, "day"), _str(p, "kind"), _str(p, "seat")
    schedule = _str(p, "schedule")
    if not node or kind not in ("seat", "schedule"):
        raise InvalidField(
            "kind" if node else "node", f"a usage day needs a node and kind seat|schedule: {p!r:.200}"
        )
    try:
        date.fromisoformat(day)
    except ValueError:
        raise InvalidField("day", f"{day!r} is not a company day YYYY-MM-DD") from None
    oid = object_id(node, day, kind, seat, schedule)
    start = _retire(conn, day)
    sql.run(conn, "DELETE FROM usage_spend WHERE day_id = ?", (oid,))
    if day < start:  # already past the horizon: nothing to keep
        sql.run(conn, "DELETE FROM usage_days WHERE id = ?", (oid,))
        return ApplyOutcome("usage_day", oid)
    reads = [r for r in p.get("page_reads") or () if isinstance(r, dict)]
    sql.insert_row(
        conn,
        T_USAGE_DAYS,
        {
            "id": oid,
            "node": node,
            "day": day,
            "kind": kind,
            "seat": seat,
            "schedule": schedule,
            "turns": _int(p, "turns"),
            "outcomes": json.dumps(p.get("outcomes") or {}, sort_keys=True),
            "durations": json.dumps(p.get("durations") or {}, sort_keys=True),
            "page_reads": json.dumps(reads, ensure_ascii=False),
            "reads_dropped": _int(p, "reads_dropped"),
            "fires": _int(p, "fires"),
            "sandbox_runs": _int(p, "sandbox_runs"),
            "approvals": _int(p, "approvals"),
            "at": rec.at,
            "seq": seq,
        },
        conflict="OR REPLACE",
    )
    for row in _spend_rows(oid, {**p, "node": node, "day": day, "kind": kind, "seat": seat}):
        sql.insert_row(conn, T_USAGE_SPEND, row)
    return ApplyOutcome("usage_day", oid)


KINDS: dict[str, ApplyFn] = {"usage_day": apply_usage_day}
"""The usage log's record kinds → their apply (gate records are the log's own)."""
