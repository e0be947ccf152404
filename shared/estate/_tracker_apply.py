"""Deterministic apply of tracker records (ES-16): rows from the record and the rows only.

Kinds: ``project_upsert``, ``task_create``, ``task_update``, ``comment_add``, ``file_put``. A record
that can no longer apply (its item vanished, a stale ``if_match`` that arbitration did not catch) is
*rejected*: no row changes and the ledger keeps the refusal every retry is answered with.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select, update

from ._applier import ApplyOutcome
from ._errors import InvalidField, NotFound, VersionConflict
from ._ids import search_bucket
from ._record import Record
from ._schema import T_BODY_REVISIONS, T_COMMENTS, T_FILES, T_HISTORY, T_PROJECTS, T_TASKS, T_WATCHERS, Task
from ._store import raw_sql
from ._tracker import MAX_DEPTH, STATUS_GROUPS

__all__ = ["apply_tracker"]


def _fts(conn: Connection, task_id: str, title: str, body: str) -> None:
    raw_sql(conn, "DELETE FROM work_fts WHERE task_id = :id", id=task_id)
    raw_sql(
        conn, "INSERT INTO work_fts (task_id, title, body) VALUES (:id, :t, :b)", id=task_id, t=title, b=body
    )


def _history(
    conn: Connection, rec: Record, seq: int, task_id: str, project_id: str, kind: str, fields: dict[str, Any]
) -> None:
    conn.execute(
        insert(T_HISTORY).values(
            record_seq=seq,
            task_id=task_id,
            project_id=project_id,
            kind=kind,
            fields=json.dumps(fields, sort_keys=True, ensure_ascii=False),
            actor=str(rec.payload.get("author", "")),
            actor_kind=str(rec.payload.get("author_kind", "")),
            at=rec.at,
        )
    )


def _project(conn: Connection, rec: Record, seq: int) -> ApplyOutcome:
    p = rec.payload
    row = conn.execute(select(T_PROJECTS).where(T_PROJECTS.c.key == p["key"])).first()
    fields = {k: str(p.get(k) or "") for k in ("name", "purpose", "unit_id", "lead")}
    if row is None:
        conn.execute(
            insert(T_PROJECTS).values(
                id=p["id"],
                key=p["key"],
                counter_next=1,
                last_change_at=rec.at,
                last_change_by=rec.writer,
                version=1,
                **fields,
            )
        )
    else:
        conn.execute(
            update(T_PROJECTS)
            .where(T_PROJECTS.c.key == p["key"])
            .values(
                version=T_PROJECTS.c.version + 1, last_change_at=rec.at, last_change_by=rec.writer, **fields
            )
        )
    return ApplyOutcome("project", str(p["id"]))


def _task_create(conn: Connection, rec: Record, seq: int) -> ApplyOutcome:
    p = rec.payload
    tid = str(p["id"])
    prow = conn.execute(select(T_PROJECTS).where(T_PROJECTS.c.id == p["project_id"])).first()
    if prow is None:
        return ApplyOutcome("task", tid, NotFound("project", str(p.get("project", ""))))
    if conn.execute(select(T_TASKS.c.id).where(T_TASKS.c.id == tid)).first() is not None:
        return ApplyOutcome("task", tid)
    depth = 0
    if p.get("parent_id"):
        parent = conn.execute(select(T_TASKS.c.depth).where(T_TASKS.c.id == p["parent_id"])).first()
        if parent is None:
            return ApplyOutcome("task", tid, NotFound("work_item", str(p["parent_id"])))
        depth = int(parent.depth) + 1
        if depth > MAX_DEPTH:
            return ApplyOutcome(
                "task", tid, InvalidField("parent", f"nesting would exceed depth {MAX_DEPTH}")
            )
    number = int(prow.counter_next)
    key = f"{prow.key}-{number}"
    status = str(p.get("status") or "todo")
    body = str(p.get("body") or "")
    conn.execute(
        insert(T_TASKS).values(
            id=tid,
            key=key,
            project_id=prow.id,
            number=number,
            type=p.get("type") or "task",
            title=p["title"],
            body=body,
            body_version=1 if body else 0,
            status=status,
            status_group=STATUS_GROUPS.get(status, "not_started"),
            priority=p.get("priority") or "normal",
            assignee=p.get("assignee"),
            reporter=p.get("author") or "",
            parent_id=p.get("parent_id"),
            depth=depth,
            due=p.get("due"),
            created_at=rec.at,
            updated_at=rec.at,
            created_by=p.get("author") or "",
            author_kind=p.get("author_kind") or "operator",
            version=1,
            search_shard=search_bucket(tid),
        )
    )
    conn.execute(
        update(T_PROJECTS)
        .where(T_PROJECTS.c.id == prow.id)
        .values(counter_next=number + 1, last_change_at=rec.at, last_change_by=str(p.get("author") or ""))
    )
    if body:
        conn.execute(
            insert(T_BODY_REVISIONS).values(
                task_id=tid, version=1, body=body, author=str(p.get("author") or ""), at=rec.at
            )
        )
    _fts(conn, tid, str(p["title"]), body)
    _history(conn, rec, seq, tid, str(prow.id), "created", {"key": key, "title": p["title"]})
    return ApplyOutcome("task", tid)


def _task_update(conn: Connection, rec: Record, seq: int) -> ApplyOutcome:
    p = rec.payload
    tid = str(p["id"])
    row = conn.execute(select(T_TASKS).where(T_TASKS.c.id == tid)).first()
    if row is None:
        return ApplyOutcome("task", tid, NotFound("work_item", tid))
    task = Task(**row._mapping)
    if p.get("if_match") is not None and int(p["if_match"]) != task.version:
        return ApplyOutcome(
            "task",
            tid,
            VersionConflict(f"{task.key} is at version {task.version}, not {p['if_match']}", task.version),
        )
    changes: dict[str, Any] = dict(p.get("changes") or {})
    author = str(p.get("author") or "")
    values: dict[str, Any] = {}
    before_after: dict[str, Any] = {}
    watch = changes.pop("watch", None)
    for name, value in changes.items():
        before_after[name] = [getattr(task, name), value]
        values[name] = value
    if "parent_id" in values:
        depth = 0
        if values["parent_id"]:
            parent = conn.execute(select(T_TASKS.c.depth).where(T_TASKS.c.id == values["parent_id"])).first()
            if parent is None:
                return ApplyOutcome("task", tid, NotFound("work_item", str(values["parent_id"])))
            depth = int(parent.depth) + 1
        values["depth"] = depth
    if "status" in values:
        values["status_group"] = STATUS_GROUPS.get(str(values["status"]), "not_started")
    if "body" in values:
        values["body_version"] = task.body_version + 1
        conn.execute(
            insert(T_BODY_REVISIONS).values(
                task_id=tid, version=task.body_version + 1, body=str(values["body"]), author=author, at=rec.at
            )
        )
    if watch is True:
        conn.execute(insert(T_WATCHERS).prefix_with("OR IGNORE").values(task_id=tid, handle=author))
        before_after["watch"] = [False, True]
    elif watch is False:
        conn.execute(delete(T_WATCHERS).where(T_WATCHERS.c.task_id == tid, T_WATCHERS.c.handle == author))
        before_after["watch"] = [True, False]
    conn.execute(
        update(T_TASKS)
        .where(T_TASKS.c.id == tid)
        .values(version=task.version + 1, updated_at=rec.at, **values)
    )
    if "title" in values or "body" in values:
        _fts(conn, tid, str(values.get("title", task.title)), str(values.get("body", task.body)))
    _history(conn, rec, seq, tid, task.project_id, "updated", before_after)
    return ApplyOutcome("task", tid)


def _comment(conn: Connection, rec: Record, seq: int) -> ApplyOutcome:
    p = rec.payload
    cid = str(p["id"])
    task = conn.execute(select(T_TASKS.c.project_id).where(T_TASKS.c.id == p["task_id"])).first()
    if task is None:
        return ApplyOutcome("comment", cid, NotFound("work_item", str(p["task_id"])))
    conn.execute(
        insert(T_COMMENTS)
        .prefix_with("OR IGNORE")
        .values(
            id=cid,
            task_id=p["task_id"],
            author=str(p.get("author") or ""),
            author_kind=str(p.get("author_kind") or ""),
            body=str(p["body"]),
            created_at=rec.at,
            position=seq,
        )
    )
    _history(conn, rec, seq, str(p["task_id"]), str(task.project_id), "commented", {"comment": cid})
    return ApplyOutcome("comment", cid)


def _file_put(conn: Connection, rec: Record, seq: int) -> ApplyOutcome:
    p = rec.payload
    fid = str(p["file_id"])
    if conn.execute(select(T_PROJECTS.c.id).where(T_PROJECTS.c.id == p["project_id"])).first() is None:
        return ApplyOutcome("file", fid, NotFound("project", str(p.get("project", ""))))
    current = conn.execute(
        select(func.max(T_FILES.c.version)).where(
            T_FILES.c.project_id == p["project_id"], T_FILES.c.path == p["path"]
        )
    ).scalar()
    version = int(current or 0)
    if p.get("if_match") is not None and int(p["if_match"]) != version:
        return ApplyOutcome(
            "file", fid, VersionConflict(f"{p['path']} is at version {version}, not {p['if_match']}", version)
        )
    conn.execute(
        update(T_FILES)
        .where(T_FILES.c.project_id == p["project_id"], T_FILES.c.path == p["path"])
        .values(current=False)
    )
    conn.execute(
        insert(T_FILES).values(
            id=fid,
            project_id=p["project_id"],
            path=p["path"],
            version=version + 1,
            content_type=p.get("content_type") or "application/octet-stream",
            size=int(p["size"]),
            sha256=p["sha256"],
            object_key=p["object_key"],
            author=str(p.get("author") or ""),
            author_kind=str(p.get("author_kind") or ""),
            created_at=rec.at,
            current=True,
        )
    )
    return ApplyOutcome("file", fid)


_KINDS = {
    "project_upsert": _project,
    "task_create": _task_create,
    "task_update": _task_update,
    "comment_add": _comment,
    "file_put": _file_put,
}


def apply_tracker(conn: Connection, rec: Record, seq: int) -> ApplyOutcome:
    """Apply one tracker record (the tracker domain's :data:`~shared.estate._applier.ApplyFn`).

    Raises:
        ValueError: an unknown kind (the applier then retries and, past its budget, faults: ES-20).
    """
    fn = _KINDS.get(rec.kind)
    if fn is None:
        raise ValueError(f"unknown tracker record kind {rec.kind!r}")
    return fn(conn, rec, seq)
