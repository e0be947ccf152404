"""Reading usage (AG-48): one data node's copy summed across every node's days.

``usage.query{from, to, seat?, schedule?, group_by}`` answers the window's groups, its total, the
nodes whose days contributed and the copy's ``horizon`` (first and last day it holds), so a window
older than the data says so rather than drawing zeros. Without ``schedule`` it sums seat objects;
with one, that schedule's objects (a schedule's turns are also its seat's: the two never add).
"""

from __future__ import annotations

from datetime import date
from typing import Any

from ..._errors import InvalidField
from ...store import _sql as sql
from ._apply import RETENTION_DAYS
from ._derive import DURATION_BUCKETS

__all__ = ["GROUP_BY", "MAX_SPAN_DAYS", "check_query", "read_usage"]

GROUP_BY: tuple[str, ...] = ("day", "seat", "node", "model", "phase", "worker")
"""What a usage read may group by (AG-48)."""
MAX_SPAN_DAYS = RETENTION_DAYS
"""Most company days one read spans, both ends included (AG-48: 181)."""
_SUMS = "SUM(input_tokens), SUM(output_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens), SUM(rounds)"
_TURN_GROUPS = ("day", "seat", "node")


def _day(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str):
        raise InvalidField(name, f"{name} is a company day YYYY-MM-DD")
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError:
        raise InvalidField(name, f"{name}: {value!r} is not a company day YYYY-MM-DD") from None


def check_query(args: dict[str, Any]) -> dict[str, Any]:
    """Return the usage read's arguments checked and normalised (AG-48).

    Args:
        args: ``from``, ``to`` (``YYYY-MM-DD``, company days), ``seat``, ``schedule`` (optional
            text), ``group_by`` (one of :data:`GROUP_BY`, default ``day``).

    Raises:
        InvalidField: naming ``from``/``to`` (not a date), ``from`` (after ``to``), ``to`` (the span
            is over 181 days), ``group_by`` (unknown), ``seat``/``schedule`` (not text).
    """
    end = _day(args, "to")  # first: a default ``from`` is derived from ``to``
    start = _day(args, "from")
    if start > end:
        raise InvalidField("from", f"from {start} is after to {end}")
    span = (date.fromisoformat(end) - date.fromisoformat(start)).days + 1
    if span > MAX_SPAN_DAYS:
        raise InvalidField("to", f"the window spans {span} days; at most {MAX_SPAN_DAYS} (from {start})")
    group_by = args.get("group_by") or "day"
    if group_by not in GROUP_BY:
        raise InvalidField("group_by", f"group_by {group_by!r} is not one of {', '.join(GROUP_BY)}")
    out: dict[str, Any] = {"from": start, "to": end, "group_by": group_by}
    for name in ("seat", "schedule"):
        value = args.get(name)
        if value is not None and not isinstance(value, str):
            raise InvalidField(name, f"{name} is text")
        out[name] = value or None
    return out


def _where(q: dict[str, Any]) -> tuple[str, list[Any]]:
    where = ["day >= ?", "day <= ?", "kind = ?"]
    params: list[Any] = [q["from"], q["to"], "schedule" if q["schedule"] else "seat"]
    if q["seat"]:
        where.append("seat = ?")
        params.append(q["seat"])
    if q["schedule"]:
        where.append("schedule = ?")
        params.append(q["schedule"])
    return " AND ".join(where), params


def _tokens(row: Any) -> dict[str, int]:
    i, o, cr, cw, n = (int(v or 0) for v in row)
    return {
        "input_tokens": i,
        "output_tokens": o,
        "total_tokens": i + o,
        "cache_read_tokens": cr,
        "cache_write_tokens": cw,
        "rounds": n,
    }


def _days(conn: Any, where: str, params: list[Any], group_by: str) -> tuple[dict[str, Any], dict[str, int]]:
    """The counts of the window's day objects (summed in SQLite, JSON included): the total and, for
    day/seat/node, turns per group."""
    sums = sql.one(
        conn,
        "SELECT SUM(turns), SUM(json_array_length(page_reads)), SUM(reads_dropped), SUM(fires), "
        f"SUM(sandbox_runs), SUM(approvals) FROM usage_days WHERE {where}",
        params,
    )
    names = ("turns", "page_reads", "reads_dropped", "fires", "sandbox_runs", "approvals")
    total: dict[str, Any] = {k: int(v or 0) for k, v in zip(names, sums or (0,) * 6, strict=True)}
    for column in ("outcomes", "durations"):
        q = f"SELECT j.key, SUM(j.value) FROM usage_days, json_each(usage_days.{column}) j WHERE {where} GROUP BY j.key"
        total[column] = {str(k): int(v or 0) for k, v in sql.rows(conn, q, params)}
    total["durations"] = {str(b): total["durations"].get(str(b), 0) for b in (*DURATION_BUCKETS, "over")}
    q = f"SELECT DISTINCT node FROM usage_days WHERE {where} ORDER BY node"
    total["nodes"] = [r[0] for r in sql.rows(conn, q, params)]
    per: dict[str, int] = {}
    if group_by in _TURN_GROUPS:
        q = f"SELECT {group_by}, SUM(turns) FROM usage_days WHERE {where} GROUP BY {group_by}"
        per = {str(k): int(v or 0) for k, v in sql.rows(conn, q, params)}
    return total, per


def read_usage(conn: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Answer ``usage.query`` on this copy (AG-48): every node's days in the window, summed.

    Returns:
        ``{from, to, group_by, seat, schedule, groups: [{key, input_tokens, output_tokens,
        total_tokens, cache_read_tokens, cache_write_tokens, rounds, turns?}], total: {the same
        tokens, turns, outcomes, durations, page_reads, reads_dropped, fires, sandbox_runs,
        approvals}, nodes, horizon: {first_day, last_day}}``; ``turns`` per group only for
        ``day``/``seat``/``node`` (a turn is not split by model, phase or worker); ``horizon`` days
        are None on an empty copy.

    Raises:
        InvalidField: see :func:`check_query`.
    """
    q = check_query(args)
    where, params = _where(q)
    col = q["group_by"]
    groups = []
    counts, per = _days(conn, where, params, col)
    for row in sql.rows(conn, f"SELECT {col}, {_SUMS} FROM usage_spend WHERE {where} GROUP BY {col}", params):
        group: dict[str, Any] = {"key": row[0], **_tokens(row[1:])}
        if col in _TURN_GROUPS:
            group["turns"] = per.pop(row[0], 0)
        groups.append(group)
    for key, turns in per.items():  # a group with turns and no spend (every turn refused before a model)
        groups.append({"key": key, **_tokens((0, 0, 0, 0, 0)), "turns": turns})
    groups.sort(key=lambda g: str(g["key"]))
    total = _tokens(sql.one(conn, f"SELECT {_SUMS} FROM usage_spend WHERE {where}", params) or (0,) * 5)
    nodes = counts.pop("nodes")
    first, last = sql.one(conn, "SELECT min(day), max(day) FROM usage_days") or (None, None)
    return {
        **q,
        "groups": groups,
        "total": {**total, **counts},
        "nodes": nodes,
        "horizon": {"first_day": first, "last_day": last},
    }
