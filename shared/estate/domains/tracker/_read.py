"""Tracker reads: work item views, listings, the catalogue and project listings (CO-24).

``list_work_items`` with ``text`` (``GET /work?text=``) ranks like the knowledge search (issue 12,
"Ranking people expect"): items holding the text as typed, then the words as an exact phrase, then
every word, then some word; BM25 over title (×2) and body within a class (see
:mod:`~shared.estate._fts`). Without ``text`` (or with ``text=""``) the list is newest change first.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sqlalchemy import Connection

from ..._errors import InvalidField, NotFound
from ...log._decide import Rules, iso
from ...store import _sql as sql
from ...store._fts import lexical_query
from ._decide import KEY_RE, PRIORITIES, STATUS_GROUPS, check_external, project_by_key, status_filter

__all__ = ["catalogue", "comment_view", "get_item", "list_items", "list_projects", "task_view"]


_TASK_SELECT = (
    "SELECT t.*, p.key AS project_key, pt.key AS parent_key, "
    "(SELECT group_concat(handle, char(31)) FROM (SELECT handle FROM task_watchers w WHERE w.task_id = t.id "
    "ORDER BY handle)) AS watcher_list "
    "FROM tasks t JOIN projects p ON p.id = t.project_id LEFT JOIN tasks pt ON pt.id = t.parent_id"
)


def _task_dict(t: Any, *, body: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": t.id,
        "key": t.key,
        "project": t.project_key,
        "type": t.type,
        "title": t.title,
        "status": t.status,
        "status_group": t.status_group,
        "priority": t.priority,
        "assignee": t.assignee,
        "reporter": t.reporter,
        "watchers": str(t.watcher_list).split("\x1f") if t.watcher_list else [],
        "parent": t.parent_key,
        "depth": t.depth,
        "due": t.due,
        "external": t.external,
        "url": t.url,
        "labels": json.loads(t.labels) if t.labels else [],
        "created_at": iso(t.created_at),
        "updated_at": iso(t.updated_at),
        "created_by": t.created_by,
        "version": t.version,
        "search_shard": t.search_shard,
    }
    if body:
        out["body"] = t.body
        out["body_version"] = t.body_version
    return out


def task_view(conn: sql.SqlConn, task_id: str) -> dict[str, Any]:
    """Return one work item's fields (the answer of a tracker write)."""
    t = sql.one(conn, _TASK_SELECT + " WHERE t.id = ?", (task_id,))
    return _task_dict(t) if t is not None else {"id": task_id}


def comment_view(conn: Connection, comment_id: str) -> dict[str, Any]:
    """Return one comment (the answer of ``comment_on_work_item``)."""
    c = sql.one(
        conn,
        "SELECT c.*, t.key AS task_key FROM comments c JOIN tasks t ON t.id = c.task_id WHERE c.id = ?",
        (comment_id,),
    )
    if c is None:
        return {"id": comment_id}
    key = c.task_key
    return {
        "id": c.id,
        "work_item": key,
        "author": c.author,
        "author_kind": c.author_kind,
        "body": c.body,
        "created_at": iso(c.created_at),
    }


_UUID_RE = re.compile(r"[0-9a-f-]{36}")


PAGE_LIMIT = 100
"""Most comments or history entries one ``work.get`` answer holds (``comments_limit``/``history_limit``)."""


def _page(args: dict[str, Any], what: str, total: int) -> tuple[int, int]:
    """``(offset, limit)`` of the ``what`` page: ``<what>_limit`` 1..100 (default 20); ``<what>_offset``
    from the oldest entry (default: the newest ``limit`` entries)."""
    limit, offset = args.get(f"{what}_limit"), args.get(f"{what}_offset")
    if limit is None:
        limit = 20
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= PAGE_LIMIT:
        raise InvalidField(f"{what}_limit", f"must be an integer from 1 to {PAGE_LIMIT}")
    if offset is None:
        return max(total - limit, 0), limit
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset <= 2**53 - 1:
        raise InvalidField(f"{what}_offset", "must be an integer from 0 (the oldest entry)")
    return offset, limit


def get_item(conn: sql.SqlConn, args: dict[str, Any]) -> dict[str, Any]:
    """``get_work_item{key}``: fields, a page of its comments and of its history (CO-24).

    Comments and history are each one page in chronological order (oldest first), with their
    totals (issue 38: only the last 20 were returned, with no count and no way to page):
    ``comments_offset``/``history_offset`` count from the oldest entry (default: the page ending
    with the newest), ``comments_limit``/``history_limit`` 1..100 (default 20). The answer says
    ``comments_total``, ``comments_offset``, ``history_total``, ``history_offset``.

    Literal SQL only (``exec_driver_sql``), so it runs on the inline read path as well
    (``EstateStore.read_inline``, issue 16): the item is found by key or id in the view's own
    query, with :func:`~shared.estate._tracker.find_task`'s checks and errors.

    Raises:
        InvalidField, NotFound: malformed or unknown key; a paging argument out of range.
    """
    key_or_id = str(args.get("key") or "")
    if not key_or_id:
        raise InvalidField("key", "a work item key like ENG-4 is required")
    if KEY_RE.match(key_or_id):
        t = sql.one(conn, _TASK_SELECT + " WHERE t.key = ?", (key_or_id,))
    elif _UUID_RE.fullmatch(key_or_id):
        t = sql.one(conn, _TASK_SELECT + " WHERE t.id = ?", (key_or_id,))
    else:
        raise InvalidField("key", f"{key_or_id!r} is not a work item key (PROJECT-N, e.g. ENG-4) or id")
    if t is None:
        raise NotFound("work_item", key_or_id)
    out = _task_dict(t)
    total = sql.one(conn, "SELECT count(*) AS n FROM comments WHERE task_id = ?", (t.id,)).n
    offset, limit = _page(args, "comments", total)
    comments = sql.rows(
        conn,
        "SELECT * FROM comments WHERE task_id = ? ORDER BY position, id LIMIT ? OFFSET ?",
        (t.id, limit, offset),
    )
    out["comments"] = [
        {
            "id": c.id,
            "author": c.author,
            "author_kind": c.author_kind,
            "body": c.body,
            "created_at": iso(c.created_at),
        }
        for c in comments
    ]
    out["comments_total"], out["comments_offset"] = total, offset
    total = sql.one(conn, "SELECT count(*) AS n FROM task_history WHERE task_id = ?", (t.id,)).n
    offset, limit = _page(args, "history", total)
    hist = sql.rows(
        conn,
        "SELECT * FROM task_history WHERE task_id = ? ORDER BY record_seq LIMIT ? OFFSET ?",
        (t.id, limit, offset),
    )
    out["history"] = [
        {
            "kind": h.kind,
            "fields": json.loads(h.fields),
            "actor": h.actor,
            "actor_kind": h.actor_kind,
            "at": iso(h.at),
            "seq": h.record_seq,
        }
        for h in hist
    ]
    out["history_total"], out["history_offset"] = total, offset
    return out


def list_items(conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
    """``list_work_items``: the items matching every filter given (CO-24).

    Arguments: ``{project?, status?, status_group?, assignee?, type?, text?, external?, limit?,
    offset?}``. ``assignee`` is a handle (``me`` is resolved by the caller); ``status`` accepts
    statuses or groups; ``external`` is an exact basis (``github:186853002#1``, CO-35): at most one
    item has it. ``limit`` is 1..100 (default 20).

    ``text`` keeps the items holding at least one of its words and ranks them (issue 12, "Ranking
    people expect"): the text as typed in title or body first, then its words as an exact phrase,
    then every word scattered, then some word; within a class BM25 over title (×2) and body, then
    newest change, then key. So ``multi-agent`` lists "multi-agent orchestration" above "agent
    agent agent". An empty ``text`` is no filter; a text without a word (blanks or punctuation
    only, e.g. ``?!...``) is refused naming ``text``, the knowledge search's shape.

    Returns:
        ``{"items": [...], "count": n, "limit": l, "offset": o}``: best match first with ``text``,
        else newest change first.

    Raises:
        InvalidField, NotFound: a filter is malformed, or the project is unknown.
    """
    limit = args.get("limit", 20)
    offset = args.get("offset", 0)
    if not isinstance(limit, int) or not 1 <= limit <= 100:
        raise InvalidField("limit", "must be 1..100")
    if not isinstance(offset, int) or not 0 <= offset <= 1_000_000_000:
        raise InvalidField("offset", "must be 0..1000000000")
    where: list[str] = []
    params: list[Any] = []
    if args.get("project"):
        where.append("t.project_id = ?")
        params.append(project_by_key(conn, str(args["project"])).id)
    statuses: list[str] = []
    if args.get("status"):
        statuses = status_filter(str(args["status"]))
    if args.get("status_group"):
        group = status_filter(str(args["status_group"]), field="status_group")
        statuses = [s for s in statuses if s in group] if statuses else group
    if statuses:
        where.append(f"t.status IN ({', '.join('?' * len(statuses))})")
        params += statuses
    if args.get("assignee"):
        where.append("t.assignee = ?")
        params.append(str(args["assignee"]))
    if args.get("type"):
        where.append("t.type = ?")
        params.append(str(args["type"]))
    if args.get("external") is not None:
        where.append("t.external = ?")
        params.append(check_external(args["external"]))
    query = _TASK_SELECT
    order = "t.updated_at DESC, t.key"
    if args.get("text"):
        lexical = lexical_query(str(args["text"]), field="text")
        ranked: list[Any] = []

        def bind(value: str) -> str:
            ranked.append(value)
            return "?"

        rank = lexical.rank_sql("work_fts", ("work_fts.title", "work_fts.body"), bind)
        query += (
            f" JOIN (SELECT work_fts.rowid AS fts_rowid, bm25(work_fts, 0.0, 2.0, 1.0) AS fts_score, "
            f"{rank} AS fts_class FROM work_fts WHERE work_fts MATCH ?) m ON m.fts_rowid = t.rowid"
        )
        params = [*ranked, lexical.some, *params]
        order = "m.fts_class, m.fts_score, " + order
    query += (" WHERE " + " AND ".join(where) if where else "") + f" ORDER BY {order} LIMIT ? OFFSET ?"
    items = [_task_dict(t, body=False) for t in sql.rows(conn, query, (*params, limit, offset))]
    return {"items": items, "count": len(items), "limit": limit, "offset": offset}


def list_projects(conn: Connection) -> list[dict[str, Any]]:
    """Every project with its item counts."""
    out = []
    for p in sql.rows(conn, "SELECT * FROM projects ORDER BY key"):
        counts = {g: 0 for g in ("not_started", "active", "done", "closed")}
        for r in sql.rows(
            conn,
            "SELECT status_group, count(*) AS n FROM tasks WHERE project_id = ? GROUP BY status_group",
            (p.id,),
        ):
            counts[str(r.status_group)] = int(r.n)
        out.append(
            {
                "key": p.key,
                "name": p.name,
                "purpose": p.purpose,
                "unit": p.unit_id,
                "lead": p.lead,
                "next_number": p.counter_next,
                "task_counts": counts,
                "version": p.version,
            }
        )
    return out


def catalogue(conn: Connection, rules: Rules, args: dict[str, Any]) -> dict[str, Any]:
    """``get_work_catalogue{project?}``: types, statuses with groups, priorities and projects (CO-24)."""
    projects = list_projects(conn)
    if args.get("project"):
        key = project_by_key(conn, str(args["project"])).key
        projects = [p for p in projects if p["key"] == key]
    return {
        "types": list(rules.types),
        "statuses": [{"status": s, "group": g} for s, g in STATUS_GROUPS.items()],
        "priorities": list(PRIORITIES),
        "projects": projects,
    }
