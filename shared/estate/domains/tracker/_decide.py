"""The native work tracker: vocabulary, validation and decisions (CO-24, ES-10, ES-13).

Projects come from units (``project: KEY``) and are seeded as ordinary records. A work item's key
``KEY-N`` is given by the *apply* of its create record, from the project's counter, in log order: every
copy assigns the same number, two creates can never share one, and a key is never reused. The item's
id derives from the create's op id, so a re-run create files one item (ES-13). Updates carry the
subject expectation (ES-10) and, when given, ``if_match`` (CO-24); comments are additive.

An item may mirror an outside object (CO-35: "work item basis ``trigger`` with id ``<repository
id>#<number>``"): its ``external`` basis (``github:186853002#1``) is unique, one item per basis.
A create naming a basis this copy already holds answers ``existing`` with that item and appends
nothing; two creates of one basis that race through two data nodes both append, and the *apply*
decides, in log order, so every copy agrees: the first record files the item, a later one files
nothing and takes no number (see :mod:`~shared.estate._tracker_apply`).
"""

from __future__ import annotations

import json
import re
from datetime import date
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Connection, select

from shared.text import hidden_character

from ..._errors import InvalidField, NotFound, TooLarge, VersionConflict
from ...log._decide import DecideCtx, Decision, anchor_of, derived_id
from ...log._ids import object_subject
from ...store import _sql as sql
from ._tables import T_PROJECTS, T_WATCHERS, Project, Task

__all__ = [
    "BODY_LIMIT",
    "BUILTIN_TYPES",
    "COMMENT_LIMIT",
    "EXTERNAL_LIMIT",
    "KEY_RE",
    "LABEL_LIMIT",
    "MAX_LABELS",
    "PRIORITIES",
    "STATUS_GROUPS",
    "URL_LIMIT",
    "check_external",
    "check_labels",
    "check_url",
    "decide_comment",
    "decide_create",
    "decide_project",
    "decide_update",
    "find_task",
    "project_by_key",
    "status_filter",
]

BUILTIN_TYPES = ("task", "bug", "epic", "story", "spike", "chore")
STATUS_GROUPS = {
    "todo": "not_started",
    "reopened": "not_started",
    "in_progress": "active",
    "in_review": "active",
    "done": "done",
    "cancelled": "done",
    "closed": "closed",
}
PRIORITIES = ("none", "low", "normal", "high", "urgent")
KEY_RE = re.compile(r"^(?P<project>[A-Z][A-Z0-9_]{0,31})-(?P<n>[1-9][0-9]{0,9})$")
PROJECT_RE = re.compile(r"^[A-Z][A-Z0-9_]{0,31}$")
BODY_LIMIT = 32 * 1024
"""Largest work item body in bytes (§21: ``task_body_revisions.body`` ≤ 32 KiB)."""
TITLE_LIMIT = 300
COMMENT_LIMIT = 32 * 1024
"""Largest comment body in bytes (UTF-8)."""
MAX_DEPTH = 5
MAX_WATCHERS = 64
EXTERNAL_LIMIT = 200
"""Longest ``external`` basis, in characters (``github:<repository id>#<number>``, CO-35)."""
URL_LIMIT = 2000
"""Longest ``url``, in characters."""
LABEL_LIMIT = 100
"""Longest label, in characters."""
MAX_LABELS = 50
"""Most labels on one item (after de-duplication)."""
_UPDATABLE = ("title", "body", "status", "priority", "assignee", "parent", "due", "type", "labels", "url")


def project_by_key(conn: Connection, key: str, *, field: str = "project") -> Project:
    """Return the project ``key``.

    Raises:
        InvalidField: ``key`` is not a project key shape (names ``field``).
        NotFound: no such project.
    """
    if not isinstance(key, str) or not PROJECT_RE.match(key):
        raise InvalidField(field, f"{key!r} is not a project key (upper-case letters and digits, e.g. ENG)")
    row = sql.one(conn, "SELECT * FROM projects WHERE key = ?", (key,))
    if row is None:
        raise NotFound("project", key)
    return Project(**row._mapping)


def find_task(conn: Connection, key_or_id: str, *, field: str = "key") -> Task:
    """Return the work item named by key (``ENG-4``) or id.

    Raises:
        InvalidField: neither a key nor an id shape (names ``field``).
        NotFound: no such work item.
    """
    if not isinstance(key_or_id, str) or not key_or_id:
        raise InvalidField(field, "a work item key like ENG-4 is required")
    if KEY_RE.match(key_or_id):
        row = sql.one(conn, "SELECT * FROM tasks WHERE key = ?", (key_or_id,))
    elif re.fullmatch(r"[0-9a-f-]{36}", key_or_id):
        row = sql.one(conn, "SELECT * FROM tasks WHERE id = ?", (key_or_id,))
    else:
        raise InvalidField(field, f"{key_or_id!r} is not a work item key (PROJECT-N, e.g. ENG-4) or id")
    if row is None:
        raise NotFound("work_item", key_or_id)
    return Task(**row._mapping)


def status_filter(value: str, *, field: str = "status") -> list[str]:
    """Expand a status or status group (comma-separated allowed) into statuses (CO-24: filters accept either).

    Raises:
        InvalidField: a value is neither a status nor a group.
    """
    out: list[str] = []
    for part in (p.strip() for p in value.split(",") if p.strip()):
        if part in STATUS_GROUPS:
            out.append(part)
        elif part in set(STATUS_GROUPS.values()):
            out += [s for s, g in STATUS_GROUPS.items() if g == part]
        else:
            raise InvalidField(
                field,
                f"{part!r} is not a status ({', '.join(STATUS_GROUPS)}) or group "
                f"({', '.join(sorted(set(STATUS_GROUPS.values())))})",
            )
    return out


def _title(args: dict[str, Any], *, required: bool) -> str | None:
    """``args["title"]``: text within :data:`TITLE_LIMIT`, not blank, nothing hidden (issue 38: a NUL
    or a bidirectional control, e.g. U+202E, would show another title than the one stored)."""
    title = _text(args, "title", required=required, limit=TITLE_LIMIT)
    if title is not None and not title.strip():
        raise InvalidField("title", "must not be empty")
    why = hidden_character(title) if title is not None else None
    if why is not None:
        raise InvalidField("title", f"{why}; write the title as it should read")
    return title


def _text(args: dict[str, Any], name: str, *, required: bool = False, limit: int = TITLE_LIMIT) -> str | None:
    v = args.get(name)
    if v is None:
        if required:
            raise InvalidField(name, "is required")
        return None
    if not isinstance(v, str):
        raise InvalidField(name, "must be a string")
    if required and not v.strip():
        raise InvalidField(name, "must not be empty")
    size = len(v.encode())
    if size > limit:
        raise TooLarge(name, limit, size)
    return v


def check_external(value: Any, *, field: str = "external") -> str:
    """Return ``value`` as an external basis: 1..200 printable characters, no whitespace (CO-35).

    Raises:
        InvalidField: not such a string (names ``field``).
    """
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= EXTERNAL_LIMIT
        or not value.isprintable()
        or any(c.isspace() for c in value)
    ):
        raise InvalidField(
            field,
            f"must be 1..{EXTERNAL_LIMIT} printable characters without whitespace, "
            "naming the outside object (e.g. github:186853002#1)",
        )
    return value


def check_url(value: Any) -> str | None:
    """Return ``value`` as an item's link: an ``http(s)`` URL of at most 2 000 characters.

    ``""`` means "no link" (None): an update with it removes the link.

    Raises:
        InvalidField: not an http(s) URL with a host (names ``url``).
    """
    if value == "":
        return None
    if isinstance(value, str) and len(value) <= URL_LIMIT and value.isprintable() and " " not in value:
        try:
            parts = urlsplit(value)
        except ValueError:
            parts = None
        if parts is not None and parts.scheme in ("http", "https") and parts.netloc:
            return value
    raise InvalidField("url", f"must be an http(s) URL of at most {URL_LIMIT} characters")


def check_labels(value: Any) -> list[str]:
    """Return ``value`` as labels: strings of 1..100 printable characters, at most 50, de-duplicated.

    Duplicates are dropped keeping the first occurrence's place.

    Raises:
        InvalidField: not a list of such strings, or more than 50 distinct ones (names ``labels``).
    """
    if not isinstance(value, list):
        raise InvalidField("labels", "must be a list of strings")
    out: list[str] = []
    for label in value:
        if not isinstance(label, str) or not 1 <= len(label) <= LABEL_LIMIT or not label.isprintable():
            raise InvalidField("labels", f"{label!r} is not a label (1..{LABEL_LIMIT} printable characters)")
        if label not in out:
            out.append(label)
    if len(out) > MAX_LABELS:
        raise InvalidField("labels", f"at most {MAX_LABELS} labels, not {len(out)}")
    return out


def _check_common(ctx: DecideCtx, args: dict[str, Any]) -> None:
    if "type" in args and args["type"] is not None and args["type"] not in ctx.rules.types:
        raise InvalidField(
            "type", f"{args['type']!r} is not a declared type; declared: {', '.join(ctx.rules.types)}"
        )
    if args.get("status") is not None and args["status"] not in STATUS_GROUPS:
        raise InvalidField(
            "status", f"{args['status']!r} is not a status; use one of {', '.join(STATUS_GROUPS)}"
        )
    if args.get("priority") is not None and args["priority"] not in PRIORITIES:
        raise InvalidField(
            "priority", f"{args['priority']!r} is not a priority; use one of {', '.join(PRIORITIES)}"
        )
    assignee = args.get("assignee")
    if assignee is not None and assignee != "":
        if not isinstance(assignee, str):
            raise InvalidField("assignee", "must be one seat handle")
        if ctx.rules.seats is not None and assignee not in ctx.rules.seats:
            raise InvalidField("assignee", f"{assignee!r} is not a seat of this company")
    due = args.get("due")
    if due is not None and (not isinstance(due, str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", due)):
        raise InvalidField("due", "must be a date YYYY-MM-DD")
    if due is not None:  # decided here only (never re-checked at apply): a calendar date
        try:
            date.fromisoformat(due)
        except ValueError:
            raise InvalidField("due", f"{due!r} is not a calendar date") from None


def _parent(conn: Connection, ref: Any, project_id: str) -> Task:
    parent = find_task(conn, str(ref), field="parent")
    if parent.project_id != project_id:
        raise InvalidField("parent", f"{parent.key} is in another project")
    if parent.depth + 1 > MAX_DEPTH:
        raise InvalidField("parent", f"nesting under {parent.key} would exceed depth {MAX_DEPTH}")
    return parent


def decide_project(conn: Connection, ctx: DecideCtx, args: dict[str, Any]) -> Decision:
    """Decide a project upsert (a seed from a unit's ``project:``, CO-24)."""
    key = str(args.get("key", ""))
    if not PROJECT_RE.match(key):
        raise InvalidField("key", f"{key!r} is not a project key")
    pid = derived_id("project", key)
    fields = {k: str(args.get(k) or "") for k in ("name", "purpose", "unit_id", "lead")}
    row = conn.execute(select(T_PROJECTS).where(T_PROJECTS.c.key == key)).first()
    if row is not None and all(getattr(row, k) == v for k, v in fields.items()):
        return Decision("project", pid, noop={"key": key, **fields})
    subject = object_subject("tracker", "project", key)
    rec = ctx.record(
        kind="project_upsert",
        domain="tracker",
        subject=subject,
        payload={"id": pid, "key": key, **fields},
        scope=(f"project:{key}",),
    )
    return Decision("project", pid, rec, expect=anchor_of(conn, "tracker", subject))


def decide_create(conn: Connection, ctx: DecideCtx, args: dict[str, Any]) -> Decision:
    """Decide ``create_work_item`` (CO-24, CO-35).

    Arguments: ``{project, title, type="task", body?, priority="normal", assignee?, parent?,
    external?, url?, labels?}``.

    When ``external`` names a basis an item of this copy already holds, nothing is appended: the
    decision folds onto that item (outcome ``existing``, CO-35), whatever project or title this
    call gave. A basis this copy does not hold yet is appended as a plain create and the apply
    settles a race (:func:`~shared.estate._tracker_apply.apply_tracker`).

    Raises:
        InvalidField, TooLarge, NotFound: a field breaks its rule; the project or parent is unknown.
    """
    project = project_by_key(conn, str(args.get("project") or ""))
    title = _title(args, required=True)
    body = _text(args, "body", limit=BODY_LIMIT) or ""
    _check_common(ctx, args)
    external = check_external(args["external"]) if args.get("external") is not None else None
    url = check_url(args["url"]) if args.get("url") is not None else None
    labels = check_labels(args["labels"]) if args.get("labels") is not None else []
    task_id = derived_id("task", ctx.op_id)
    if external is not None:
        held = sql.one(conn, "SELECT id FROM tasks WHERE external = ?", (external,))
        if held is not None and str(held.id) != task_id:
            return Decision("task", task_id, resolved_to=str(held.id))
    parent_id = None
    if args.get("parent"):
        parent_id = _parent(conn, args["parent"], project.id).id
    payload = {
        "id": task_id,
        "project_id": project.id,
        "project": project.key,
        "title": title,
        "body": body,
        "type": args.get("type") or "task",
        "status": args.get("status") or "todo",
        "priority": args.get("priority") or "normal",
        "assignee": args.get("assignee") or None,
        "parent_id": parent_id,
        "due": args.get("due"),
        "external": external,
        "url": url,
        "labels": labels,
        "author": str(args.get("author") or ""),
        "author_kind": str(args.get("author_kind") or "operator"),
    }
    rec = ctx.record(
        kind="task_create",
        domain="tracker",
        subject=object_subject("tracker", "task", task_id),
        payload=payload,
        scope=(f"task:{task_id}", f"project:{project.key}"),
    )
    return Decision("task", task_id, rec, expect=None)


def _new_parent(conn: Connection, task: Task, value: Any) -> str | None:
    """The parent id ``value`` names for ``task`` (None: no parent), refusing itself and a cycle."""
    new_parent = _parent(conn, value, task.project_id).id if value else None
    if new_parent == task.id:
        raise InvalidField("parent", "an item cannot be its own parent")
    ancestor = new_parent
    for _ in range(MAX_DEPTH + 1):  # walk up from the new parent: meeting this item is a cycle
        if ancestor is None:
            break
        if ancestor == task.id:
            raise InvalidField("parent", f"{value} is under {task.key}: that would make a cycle")
        ancestor = find_task(conn, ancestor, field="parent").parent_id
    return new_parent


def _watch_change(conn: Connection, task: Task, watch: Any, author: str, changes: dict[str, Any]) -> None:
    """Add ``changes["watch"]`` when ``watch`` (None: left alone) changes whether ``author`` watches
    ``task``, refusing a watcher past :data:`MAX_WATCHERS`."""
    if watch is None:
        return
    watching = (
        conn.execute(
            select(T_WATCHERS).where(T_WATCHERS.c.task_id == task.id, T_WATCHERS.c.handle == author)
        ).first()
        is not None
    )
    if bool(watch) != watching:
        changes["watch"] = bool(watch)
        if watch:
            n = len(conn.execute(select(T_WATCHERS).where(T_WATCHERS.c.task_id == task.id)).all())
            if n >= MAX_WATCHERS:
                raise InvalidField("watch", f"{task.key} already has {MAX_WATCHERS} watchers")


def decide_update(conn: Connection, ctx: DecideCtx, args: dict[str, Any]) -> Decision:
    """Decide ``update_work_item`` (CO-24).

    Arguments: ``{key, if_match?, title?, body?, status?, priority?, assignee?, parent?, watch?,
    labels?, url?}``.

    Fields left out are unchanged; without ``if_match`` other fields are last-writer-wins, and a
    body change always needs ``if_match`` (CO-24). ``labels`` replaces the whole list; ``url: ""``
    removes the link. An item's ``external`` basis is set at create and never changes (CO-35).

    Raises:
        InvalidField, TooLarge, NotFound: a field breaks its rule or names nothing.
        VersionConflict: ``if_match`` is not the item's version; carries the current one.
    """
    task = find_task(conn, str(args.get("key") or ""))
    if_match = args.get("if_match")
    if if_match is not None and (not isinstance(if_match, int) or isinstance(if_match, bool)):
        raise InvalidField("if_match", "must be the integer version you read")
    if if_match is not None and if_match != task.version:
        raise VersionConflict(f"{task.key} is at version {task.version}, not {if_match}", task.version)
    _title(args, required=False)
    _text(args, "body", limit=BODY_LIMIT)
    _check_common(ctx, args)
    changes: dict[str, Any] = {}
    for name in _UPDATABLE:
        if name not in args or args[name] is None:
            continue
        value = args[name]
        if name == "labels":
            labels = check_labels(value)
            if labels != json.loads(task.labels or "[]"):
                changes["labels"] = labels
            continue
        if name == "url":
            value = check_url(value)
        if name == "parent":
            new_parent = _new_parent(conn, task, value)
            if new_parent != task.parent_id:
                changes["parent_id"] = new_parent
            continue
        if name == "assignee" and value == "":
            value = None
        if getattr(task, name) != value:
            changes[name] = value
    if "body" in changes and if_match is None:
        raise InvalidField("if_match", "a body change must state the version it edited (if_match)")
    author = str(args.get("author") or "")
    _watch_change(conn, task, args.get("watch"), author, changes)
    subject = object_subject("tracker", "task", task.id)
    if not changes:
        return Decision("task", task.id)
    payload = {
        "id": task.id,
        "changes": changes,
        "if_match": if_match,
        "author": author,
        "author_kind": str(args.get("author_kind") or "operator"),
    }
    rec = ctx.record(
        kind="task_update", domain="tracker", subject=subject, payload=payload, scope=(f"task:{task.id}",)
    )
    return Decision("task", task.id, rec, expect=anchor_of(conn, "tracker", subject))


def decide_comment(conn: Connection, ctx: DecideCtx, args: dict[str, Any]) -> Decision:
    """Decide ``comment_on_work_item{key, body}`` (additive: no expectation).

    Raises:
        InvalidField, TooLarge, NotFound: empty body, over 32 KiB, or unknown item.
    """
    task = find_task(conn, str(args.get("key") or ""))
    body = _text(args, "body", required=True, limit=COMMENT_LIMIT)
    cid = derived_id("comment", ctx.op_id)
    payload = {
        "id": cid,
        "task_id": task.id,
        "body": body,
        "author": str(args.get("author") or ""),
        "author_kind": str(args.get("author_kind") or "operator"),
    }
    rec = ctx.record(
        kind="comment_add",
        domain="tracker",
        subject=object_subject("tracker", "comment", cid),
        payload=payload,
        scope=(f"task:{task.id}",),
    )
    return Decision("comment", cid, rec, expect=None)
