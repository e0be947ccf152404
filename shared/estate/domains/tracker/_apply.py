"""Deterministic apply of tracker records (ES-16): rows from the record and the rows only.

Kinds: ``project_upsert``, ``task_create``, ``task_update``, ``comment_add``, ``file_put``. A record
that can no longer apply (its item vanished, a stale ``if_match`` that arbitration did not catch) is
*rejected*: no row changes and the ledger keeps the refusal every retry is answered with. Statements
are plain SQL through :mod:`~shared.estate._sql` (the drain rate of ES-19).

One item per ``external`` basis (CO-35) is decided here, not at decide time: two creates of one
basis decided on two data nodes both reach the log, and every copy applies them in the same order.
The first to apply files the item; a later one files nothing, takes no number (the project counter
does not move: the check comes before the number is drawn) and folds onto the first item —
``ApplyOutcome.resolved_to``, recorded in the ledger as outcome ``existing`` — so its writer and
every retry of it answer ``existing`` with that item. The unique index on ``tasks.external`` is the
safety net: a second row for a basis could only come from a defect, and it fails the apply.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection

from ..._errors import InvalidField, NotFound, VersionConflict
from ...log._applier import ApplyFn, ApplyOutcome
from ...log._ids import search_bucket
from ...log._record import Record
from ...store import _sql as sql
from ._decide import MAX_DEPTH, STATUS_GROUPS
from ._tables import T_BODY_REVISIONS, T_COMMENTS, T_HISTORY, T_PROJECTS, T_TASKS, T_WATCHERS

__all__ = ["KINDS"]

_UPDATABLE = {"title", "body", "status", "priority", "assignee", "parent_id", "due", "type", "labels", "url"}


def _fts(conn: Connection, task_id: str, title: str, body: str, *, new: bool = False) -> None:
    # The index row shares the task row's rowid, so replacing it is a keyed delete, not a scan.
    if not new:
        sql.run(conn, "DELETE FROM work_fts WHERE rowid = (SELECT rowid FROM tasks WHERE id = ?)", (task_id,))
    sql.run(
        conn,
        "INSERT INTO work_fts (rowid, task_id, title, body) "
        "VALUES ((SELECT rowid FROM tasks WHERE id = ?), ?, ?, ?)",
        (task_id, task_id, title, body),
    )


def _labels_json(labels: Any) -> str:
    return json.dumps(list(labels or []), ensure_ascii=False)


def _history(
    conn: Connection, rec: Record, seq: int, task_id: str, project_id: str, kind: str, fields: dict[str, Any]
) -> None:
    sql.insert_row(
        conn,
        T_HISTORY,
        {
            "record_seq": seq,
            "task_id": task_id,
            "project_id": project_id,
            "kind": kind,
            "fields": json.dumps(fields, sort_keys=True, ensure_ascii=False),
            "actor": str(rec.payload.get("author", "")),
            "actor_kind": str(rec.payload.get("author_kind", "")),
            "at": rec.at,
        },
        conflict="OR REPLACE",
    )


def _project(conn: Connection, rec: Record, seq: int) -> ApplyOutcome:
    p = rec.payload
    fields = {k: str(p.get(k) or "") for k in ("name", "purpose", "unit_id", "lead")}
    if sql.one(conn, "SELECT id FROM projects WHERE key = ?", (p["key"],)) is None:
        sql.insert_row(
            conn,
            T_PROJECTS,
            {
                "id": p["id"],
                "key": p["key"],
                "counter_next": 1,
                "last_change_at": rec.at,
                "last_change_by": rec.writer,
                "version": 1,
                "archived": False,
                "scoped_through": 0,
                **fields,
            },
        )
    else:
        sql.run(
            conn,
            "UPDATE projects SET name = ?, purpose = ?, unit_id = ?, lead = ?, version = version + 1, "
            "last_change_at = ?, last_change_by = ? WHERE key = ?",
            (*fields.values(), rec.at, rec.writer, p["key"]),
        )
    return ApplyOutcome("project", str(p["id"]))


def _task_create(conn: Connection, rec: Record, seq: int) -> ApplyOutcome:
    p = rec.payload
    tid = str(p["id"])
    prow = sql.one(conn, "SELECT id, key, counter_next FROM projects WHERE id = ?", (p["project_id"],))
    if prow is None:
        return ApplyOutcome("task", tid, NotFound("project", str(p.get("project", ""))))
    if sql.one(conn, "SELECT 1 FROM tasks WHERE id = ?", (tid,)) is not None:
        return ApplyOutcome("task", tid)
    external = p.get("external") or None
    if external is not None:
        held = sql.one(conn, "SELECT id FROM tasks WHERE external = ?", (external,))
        if held is not None:  # CO-35: the basis is taken earlier in log order; no number is drawn
            return ApplyOutcome("task", tid, resolved_to=str(held.id))
    depth = 0
    if p.get("parent_id"):
        parent = sql.one(conn, "SELECT depth FROM tasks WHERE id = ?", (p["parent_id"],))
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
    author = str(p.get("author") or "")
    sql.insert_row(
        conn,
        T_TASKS,
        {
            "id": tid,
            "key": key,
            "project_id": prow.id,
            "number": number,
            "type": p.get("type") or "task",
            "title": p["title"],
            "body": body,
            "body_version": 1 if body else 0,
            "status": status,
            "status_group": STATUS_GROUPS.get(status, "not_started"),
            "priority": p.get("priority") or "normal",
            "assignee": p.get("assignee"),
            "reporter": author,
            "parent_id": p.get("parent_id"),
            "depth": depth,
            "due": p.get("due"),
            "archived": False,
            "created_at": rec.at,
            "updated_at": rec.at,
            "created_by": author,
            "author_kind": p.get("author_kind") or "operator",
            "version": 1,
            "scoped_through": 0,
            "search_shard": search_bucket(tid),
            "external": external,
            "url": p.get("url") or None,
            "labels": _labels_json(p.get("labels")),
        },
    )
    sql.run(
        conn,
        "UPDATE projects SET counter_next = ?, last_change_at = ?, last_change_by = ? WHERE id = ?",
        (number + 1, rec.at, author, prow.id),
    )
    if body:
        sql.insert_row(
            conn,
            T_BODY_REVISIONS,
            {"task_id": tid, "version": 1, "body": body, "author": author, "at": rec.at},
        )
    _fts(conn, tid, str(p["title"]), body, new=True)
    created: dict[str, Any] = {"key": key, "title": p["title"]}
    if external is not None:
        created["external"] = external
    _history(conn, rec, seq, tid, str(prow.id), "created", created)
    return ApplyOutcome("task", tid)


def _task_update(conn: Connection, rec: Record, seq: int) -> ApplyOutcome:
    p = rec.payload
    tid = str(p["id"])
    task = sql.one(conn, "SELECT * FROM tasks WHERE id = ?", (tid,))
    if task is None:
        return ApplyOutcome("task", tid, NotFound("work_item", tid))
    if p.get("if_match") is not None and int(p["if_match"]) != task.version:
        return ApplyOutcome(
            "task",
            tid,
            VersionConflict(
                f"{task.key} is at version {task.version}, not {p['if_match']}", int(task.version)
            ),
        )
    changes: dict[str, Any] = dict(p.get("changes") or {})
    author = str(p.get("author") or "")
    watch = changes.pop("watch", None)
    values: dict[str, Any] = {k: v for k, v in changes.items() if k in _UPDATABLE}
    before_after: dict[str, Any] = {k: [getattr(task, k), v] for k, v in values.items()}
    if "labels" in values:
        before_after["labels"] = [json.loads(task.labels or "[]"), list(values["labels"])]
        values["labels"] = _labels_json(values["labels"])
    if "parent_id" in values:
        depth = 0
        if values["parent_id"]:
            parent = sql.one(conn, "SELECT depth FROM tasks WHERE id = ?", (values["parent_id"],))
            if parent is None:
                return ApplyOutcome("task", tid, NotFound("work_item", str(values["parent_id"])))
            depth = int(parent.depth) + 1
        values["depth"] = depth
    if "status" in values:
        values["status_group"] = STATUS_GROUPS.get(str(values["status"]), "not_started")
    if "body" in values:
        values["body_version"] = int(task.body_version) + 1
        sql.insert_row(
            conn,
            T_BODY_REVISIONS,
            {
                "task_id": tid,
                "version": values["body_version"],
                "body": str(values["body"]),
                "author": author,
                "at": rec.at,
            },
        )
    if watch is True:
        sql.insert_row(conn, T_WATCHERS, {"task_id": tid, "handle": author}, conflict="OR IGNORE")
        before_after["watch"] = [False, True]
    elif watch is False:
        sql.run(conn, "DELETE FROM task_watchers WHERE task_id = ? AND handle = ?", (tid, author))
        before_after["watch"] = [True, False]
    sql.update_row(
        conn, T_TASKS, {**values, "version": int(task.version) + 1, "updated_at": rec.at}, where={"id": tid}
    )
    if "title" in values or "body" in values:
        _fts(conn, tid, str(values.get("title", task.title)), str(values.get("body", task.body)))
    _history(conn, rec, seq, tid, str(task.project_id), "updated", before_after)
    return ApplyOutcome("task", tid)


def _comment(conn: Connection, rec: Record, seq: int) -> ApplyOutcome:
    p = rec.payload
    cid = str(p["id"])
    task = sql.one(conn, "SELECT project_id FROM tasks WHERE id = ?", (p["task_id"],))
    if task is None:
        return ApplyOutcome("comment", cid, NotFound("work_item", str(p["task_id"])))
    sql.insert_row(
        conn,
        T_COMMENTS,
        {
            "id": cid,
            "task_id": p["task_id"],
            "author": str(p.get("author") or ""),
            "author_kind": str(p.get("author_kind") or ""),
            "body": str(p["body"]),
            "created_at": rec.at,
            "position": seq,
        },
        conflict="OR IGNORE",
    )
    _history(conn, rec, seq, str(p["task_id"]), str(task.project_id), "commented", {"comment": cid})
    return ApplyOutcome("comment", cid)


KINDS: dict[str, ApplyFn] = {
    "project_upsert": _project,
    "task_create": _task_create,
    "task_update": _task_update,
    "comment_add": _comment,
}
"""Tracker record kind → its apply (the log's gate records are applied by the log, ES-51)."""
