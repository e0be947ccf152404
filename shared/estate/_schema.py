"""The estate file's tables (spec/estate.md §21), as SQLModel classes on a registry of their own.

Only the P0 subset is built: the framework tables (checkpoint, anchors, ledger), the tracker
(projects, tasks, body revisions, watchers, comments, history, project files) and the knowledge
base (containers, pages, revisions). Instants are unix microseconds taken from records, never from
a clock (ES-16), so every data node's copy is identical. Every object row carries ``version`` and
``scoped_through``; indexed documents carry ``search_shard`` (ES-60).

The lexical index is two FTS5 tables (``work_fts``, ``pages_fts``) maintained in the same
transaction as the rows; they are derived data and are left out of :func:`digest` comparisons.
"""

from __future__ import annotations

from typing import cast

from sqlalchemy import Index, Table, UniqueConstraint, text
from sqlalchemy.orm import registry
from sqlmodel import Field, SQLModel

__all__ = [
    "FTS_DDL",
    "Anchor",
    "Checkpoint",
    "Comment",
    "Container",
    "EstateModel",
    "LedgerRow",
    "LedgerWatermark",
    "Page",
    "PageRevision",
    "Project",
    "ProjectFile",
    "T_ANCHOR",
    "T_BODY_REVISIONS",
    "T_CHECKPOINT",
    "T_COMMENTS",
    "T_CONTAINERS",
    "T_FILES",
    "T_HISTORY",
    "T_LEDGER",
    "T_LEDGER_WATERMARK",
    "T_PAGES",
    "T_PAGE_REVISIONS",
    "T_PROJECTS",
    "T_TASKS",
    "T_WATCHERS",
    "Task",
    "TaskBodyRevision",
    "TaskHistory",
    "TaskWatcher",
]


class EstateModel(SQLModel, registry=registry()):
    """Base of every estate table (its own metadata, apart from any other SQLModel user)."""


class Checkpoint(EstateModel, table=True):
    """``statelog_checkpoint``: per domain, how far this copy applied (ES-16)."""

    __tablename__ = "statelog_checkpoint"
    domain: str = Field(primary_key=True)
    stream: str
    generation: int = 1
    seq: int = 0
    applied_through: int = 0
    stream_created_at: int = 0
    checkpoint_stored_at: int = 0
    checkpoint_op_id: str = ""
    max_record_version: int = 0
    rule_versions: str = "{}"


class Anchor(EstateModel, table=True):
    """``statelog_anchor``: the last record this copy consumed per subject (ES-10)."""

    __tablename__ = "statelog_anchor"
    domain: str = Field(primary_key=True)
    subject: str = Field(primary_key=True)
    last_consumed_seq: int = 0


class LedgerRow(EstateModel, table=True):
    """``statelog_ledger``: operation id → where it landed and what it did (ES-7).

    ``outcome`` is ``applied``, ``rejected`` or ``existing``; a rejected record's ``error`` holds the
    refusal (JSON, :func:`~shared.estate._errors.to_wire`) every retry is answered with. An
    ``existing`` record is a create that folded onto an object filed earlier in log order (a work
    item whose ``external`` basis another item already holds, CO-35): ``object_id`` stays the op's
    own derived id (ES-7 compares it for ``op_reused``) and ``resolved_to`` names the object the
    answer shows.

    .. versionchanged:: 0.1 ``outcome`` ``existing`` and the ``resolved_to`` column (issue 10).
    """

    __tablename__ = "statelog_ledger"
    domain: str = Field(primary_key=True)
    op_id: str = Field(primary_key=True)
    object_kind: str
    object_id: str
    stream: str
    generation: int = 1
    seq: int
    applied_at: int
    minted_at: int = 0
    outcome: str = "applied"
    error: str = ""
    resolved_to: str = Field(default="", sa_column_kwargs={"server_default": ""})


class LedgerWatermark(EstateModel, table=True):
    """``statelog_ledger_watermark``: per domain, the instant below which ledger rows may be gone (ES-8).

    ``cutoff_instant`` (unix µs) only rises; ``reason`` is ``sweep`` (rows applied before it were
    deleted by the per-node sweep, ES-85) or ``join`` (the copy was adopted from a donor whose
    snapshot lacked a ledger). Node-local, like the ledger rows the sweep removes: left out of
    digest comparisons.

    .. versionadded:: 0.1 issue 11.
    """

    __tablename__ = "statelog_ledger_watermark"
    domain: str = Field(primary_key=True)
    cutoff_instant: int = 0
    reason: str = "sweep"


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


class ProjectFile(EstateModel, table=True):
    """``project_files`` (ES-74, CO-26): one row per file version; ``current`` marks the newest."""

    __tablename__ = "project_files"
    __table_args__ = (UniqueConstraint("project_id", "path", "version"),)
    id: str = Field(primary_key=True)
    project_id: str = Field(index=True)
    path: str
    version: int
    content_type: str = "application/octet-stream"
    size: int
    sha256: str
    object_key: str
    author: str = ""
    author_kind: str = ""
    created_at: int
    removed_at: int | None = None
    current: bool = True


class Container(EstateModel, table=True):
    """``containers``: a knowledge space (CO-25), one per unit with ``space:``."""

    __tablename__ = "containers"
    key: str = Field(primary_key=True)
    name: str = ""
    unit_id: str = ""
    settings: str = "{}"
    version: int = 1


class Page(EstateModel, table=True):
    """``pages`` (CO-25, §21): title unique per container through its normalised ``address``."""

    __tablename__ = "pages"
    __table_args__ = (UniqueConstraint("container", "address"),)
    id: str = Field(primary_key=True)
    container: str
    address: str
    title: str
    body: str
    edit_number: int = 1
    status: str = "published"
    author: str = ""
    author_kind: str = ""
    created_at: int
    updated_at: int
    version: int = 1
    scoped_through: int = 0
    search_shard: int = 0


class PageRevision(EstateModel, table=True):
    """``page_revisions``: every save keeps one (CO-25; the newest 100 per page, §21)."""

    __tablename__ = "page_revisions"
    page_id: str = Field(primary_key=True)
    version: int = Field(primary_key=True)
    title: str
    body: str
    author: str
    at: int


FTS_DDL = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS work_fts USING fts5(task_id UNINDEXED, title, body, "
    "tokenize='unicode61 remove_diacritics 2')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS pages_fts USING fts5(page_id UNINDEXED, container UNINDEXED, title, body, "
    "tokenize='unicode61 remove_diacritics 2')",
)
"""The lexical index (CO-25: SQLite FTS5 with ``bm25()``)."""


def _table(model: type[EstateModel]) -> Table:
    return cast(Table, model.__table__)  # type: ignore[attr-defined]


T_CHECKPOINT = _table(Checkpoint)
T_ANCHOR = _table(Anchor)
T_LEDGER = _table(LedgerRow)
T_LEDGER_WATERMARK = _table(LedgerWatermark)
T_PROJECTS = _table(Project)
T_TASKS = _table(Task)
T_BODY_REVISIONS = _table(TaskBodyRevision)
T_WATCHERS = _table(TaskWatcher)
T_COMMENTS = _table(Comment)
T_HISTORY = _table(TaskHistory)
T_FILES = _table(ProjectFile)
T_CONTAINERS = _table(Container)
T_PAGES = _table(Page)
T_PAGE_REVISIONS = _table(PageRevision)
