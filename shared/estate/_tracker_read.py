"""Tracker reads: work item views, listings, the catalogue and project listings (CO-24)."""

from __future__ import annotations

import json
import re
from typing import Any

from sqlalchemy import Connection, select

from ._decide import Rules, iso
from ._errors import InvalidField
from ._schema import T_COMMENTS, T_HISTORY, T_PROJECTS, T_TASKS, T_WATCHERS
from ._store import raw_sql
from ._tracker import PRIORITIES, STATUS_GROUPS, find_task, project_by_key, status_filter

__all__ = ["catalogue", "comment_view", "get_item", "list_items", "list_projects", "task_view"]


def _project_keys(conn: Connection) -> dict[str, str]:
    return {str(r.id): str(r.key) for r in conn.execute(select(T_PROJECTS.c.id, T_PROJECTS.c.key))}


def _task_dict(conn: Connection, t: Any, keys: dict[str, str], *, body: bool = True) -> dict[str, Any]:
    parent_key = None
    if t.parent_id:
        parent_key = conn.execute(select(T_TASKS.c.key).where(T_TASKS.c.id == t.parent_id)).scalar()
    watchers = [
        str(r.handle)
        for r in conn.execute(
            select(T_WATCHERS.c.handle).where(T_WATCHERS.c.task_id == t.id).order_by(T_WATCHERS.c.handle)
        )
    ]
    out: dict[str, Any] = {
        "id": t.id,
        "key": t.key,
        "project": keys.get(t.project_id, ""),
        "type": t.type,
        "title": t.title,
        "status": t.status,
        "status_group": t.status_group,
        "priority": t.priority,
        "assignee": t.assignee,
        "reporter": t.reporter,
        "watchers": watchers,
        "parent": parent_key,
        "depth": t.depth,
        "due": t.due,
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


def task_view(conn: Connection, task_id: str) -> dict[str, Any]:
    """Return one work item's fields (the answer of a tracker write)."""
    t = conn.execute(select(T_TASKS).where(T_TASKS.c.id == task_id)).first()
    if t is None:
        return {"id": task_id}
    return _task_dict(conn, t, _project_keys(conn))


def comment_view(conn: Connection, comment_id: str) -> dict[str, Any]:
    """Return one comment (the answer of ``comment_on_work_item``)."""
    c = conn.execute(select(T_COMMENTS).where(T_COMMENTS.c.id == comment_id)).first()
    if c is None:
        return {"id": comment_id}
    key = conn.execute(select(T_TASKS.c.key).where(T_TASKS.c.id == c.task_id)).scalar()
    return {
        "id": c.id,
        "work_item": key,
        "author": c.author,
        "author_kind": c.author_kind,
        "body": c.body,
        "created_at": iso(c.created_at),
    }


def get_item(conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
    """``get_work_item{key}``: fields, the last 20 comments and the last 20 history entries (CO-24).

    Raises:
        InvalidField, NotFound: malformed or unknown key.
    """
    t = find_task(conn, str(args.get("key") or ""))
    out = _task_dict(conn, t, _project_keys(conn))
    comments = conn.execute(
        select(T_COMMENTS)
        .where(T_COMMENTS.c.task_id == t.id)
        .order_by(T_COMMENTS.c.position.desc())
        .limit(20)
    ).all()
    out["comments"] = [
        {
            "id": c.id,
            "author": c.author,
            "author_kind": c.author_kind,
            "body": c.body,
            "created_at": iso(c.created_at),
        }
        for c in reversed(comments)
    ]
    hist = conn.execute(
        select(T_HISTORY).where(T_HISTORY.c.task_id == t.id).order_by(T_HISTORY.c.record_seq.desc()).limit(20)
    ).all()
    out["history"] = [
        {
            "kind": h.kind,
            "fields": json.loads(h.fields),
            "actor": h.actor,
            "actor_kind": h.actor_kind,
            "at": iso(h.at),
            "seq": h.record_seq,
        }
        for h in reversed(hist)
    ]
    return out


def _fts_query(text: str) -> str:
    words = re.findall(r"\w+", text, flags=re.UNICODE)
    if not words:
        raise InvalidField("text", "give at least one word to search for")
    return " OR ".join(f'"{w}"' for w in words[:32])


def list_items(conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
    """``list_work_items{project?, status?, status_group?, assignee?, type?, text?, limit ≤ 100 (20), offset?}``.

    ``assignee`` is a handle (``me`` is resolved by the caller); ``status`` accepts statuses or groups.

    Returns:
        ``{"items": [...], "count": n, "limit": l, "offset": o}``, newest change first.

    Raises:
        InvalidField, NotFound: a filter is malformed, or the project is unknown.
    """
    limit = args.get("limit", 20)
    offset = args.get("offset", 0)
    if not isinstance(limit, int) or not 1 <= limit <= 100:
        raise InvalidField("limit", "must be 1..100")
    if not isinstance(offset, int) or offset < 0:
        raise InvalidField("offset", "must be ≥ 0")
    q = select(T_TASKS)
    if args.get("project"):
        q = q.where(T_TASKS.c.project_id == project_by_key(conn, str(args["project"])).id)
    statuses: list[str] = []
    if args.get("status"):
        statuses = status_filter(str(args["status"]))
    if args.get("status_group"):
        group = status_filter(str(args["status_group"]), field="status_group")
        statuses = [s for s in statuses if s in group] if statuses else group
    if statuses:
        q = q.where(T_TASKS.c.status.in_(statuses))
    if args.get("assignee"):
        q = q.where(T_TASKS.c.assignee == str(args["assignee"]))
    if args.get("type"):
        q = q.where(T_TASKS.c.type == str(args["type"]))
    if args.get("text"):
        ids = [
            r[0]
            for r in raw_sql(
                conn, "SELECT task_id FROM work_fts WHERE work_fts MATCH :q", q=_fts_query(str(args["text"]))
            )
        ]
        q = q.where(T_TASKS.c.id.in_(ids))
    rows = conn.execute(
        q.order_by(T_TASKS.c.updated_at.desc(), T_TASKS.c.key).offset(offset).limit(limit)
    ).all()
    keys = _project_keys(conn)
    items = [_task_dict(conn, t, keys, body=False) for t in rows]
    return {"items": items, "count": len(items), "limit": limit, "offset": offset}


def list_projects(conn: Connection) -> list[dict[str, Any]]:
    """Every project with its item counts."""
    out = []
    for p in conn.execute(select(T_PROJECTS).order_by(T_PROJECTS.c.key)).all():
        counts = {g: 0 for g in ("not_started", "active", "done", "closed")}
        for r in conn.execute(select(T_TASKS.c.status_group).where(T_TASKS.c.project_id == p.id)):
            counts[str(r[0])] = counts.get(str(r[0]), 0) + 1
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
