"""The tracker's tables (spec/estate.md §21, CO-24): projects, work items, body revisions, watchers,
comments, the activity feed, and the lexical index ``work_fts`` (derived data, maintained by apply).
"""

from __future__ import annotations

from sqlalchemy import Index, text
from sqlmodel import Field

from ...store._schema import EstateModel, table_of

__all__ = [
    "Comment",
    "Project",
    "T_BODY_REVISIONS",
    "T_COMMENTS",
    "T_HISTORY",
    "T_PROJECTS",
    "T_TASKS",
    "T_WATCHERS",
    "Task",
    "TaskBodyRevision",
    "TaskHistory",
    "TaskWatcher",
    "WORK_FTS",
]


class Project(EstateModel, table=True):
    """``projects`` (CO-24): one per unit with ``project:``."""

    __tablename__ = "projects"
    id: str = Field(primary_key=True)
    key: str = Field(unique=True)
    name: str = ""
    purpose: str = ""
    unit_id: str = ""
    lead: str = ""
    archived: bool = False
    counter_next: int = 1
    last_change_at: int = 0
    last_change_by: str = ""
    version: int = 1
    scoped_through: int = 0


class Task(EstateModel, table=True):
    """``tasks`` (CO-24, §21): a work item ``KEY-N``.

    ``external`` is the basis of the outside object the item mirrors (``github:<repository
    id>#<number>``, CO-35), unique where set: one item per basis, decided at apply in log order
    (the unique index is the safety net). ``url`` links that object; ``labels`` is a JSON list of
    strings.

    .. versionchanged:: 0.1 ``external``, ``url`` and ``labels`` (issue 10); an older file gains them at
       open (:meth:`~shared.estate.EstateStore.open`).
    """

    __tablename__ = "tasks"
    __table_args__ = (
        Index("ix_tasks_project_number", "project_id", "number"),
        Index("ux_tasks_external", "external", unique=True, sqlite_where=text("external IS NOT NULL")),
    )
    id: str = Field(primary_key=True)
    key: str = Field(unique=True)
    project_id: str = Field(index=True)
    number: int
    type: str = "task"
    title: str
    body: str = ""
    body_version: int = 0
    status: str = "todo"
    status_group: str = "not_started"
    priority: str = "normal"
    assignee: str | None = Field(default=None, index=True)
    reporter: str = ""
    parent_id: str | None = None
    depth: int = 0
    due: str | None = None
    archived: bool = False
    created_at: int
    updated_at: int
    created_by: str = ""
    author_kind: str = "operator"
    version: int = 1
    scoped_through: int = 0
    search_shard: int = 0
    # Added after the first release: last, so an old file's ALTER TABLE gives the same column order.
    external: str | None = None
    url: str | None = None
    labels: str = Field(default="[]", sa_column_kwargs={"server_default": "[]"})


class TaskBodyRevision(EstateModel, table=True):
    """``task_body_revisions``: every body save, immutable (CO-24)."""

    __tablename__ = "task_body_revisions"
    task_id: str = Field(primary_key=True)
    version: int = Field(primary_key=True)
    body: str
    author: str
    at: int


class TaskWatcher(EstateModel, table=True):
    """``task_watchers`` (≤ 64 per task)."""

    __tablename__ = "task_watchers"
    task_id: str = Field(primary_key=True)
    handle: str = Field(primary_key=True)


class Comment(EstateModel, table=True):
    """``comments`` on a work item."""

    __tablename__ = "comments"
    id: str = Field(primary_key=True)
    task_id: str = Field(index=True)
    author: str
    author_kind: str
    body: str
    created_at: int
    position: int


class TaskHistory(EstateModel, table=True):
    """``task_history``: the activity feed, one row per applied change (``fields`` JSON before/after)."""

    __tablename__ = "task_history"
    record_seq: int = Field(primary_key=True)
    task_id: str = Field(primary_key=True)
    project_id: str
    kind: str
    fields: str = "{}"
    actor: str = ""
    actor_kind: str = ""
    at: int = 0


WORK_FTS = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS work_fts USING fts5(task_id UNINDEXED, title, body, "
    "tokenize='unicode61 remove_diacritics 2')"
)
"""The lexical index (CO-25: SQLite FTS5 with ``bm25()``)."""

T_PROJECTS = table_of(Project)
T_TASKS = table_of(Task)
T_BODY_REVISIONS = table_of(TaskBodyRevision)
T_WATCHERS = table_of(TaskWatcher)
T_COMMENTS = table_of(Comment)
T_HISTORY = table_of(TaskHistory)
