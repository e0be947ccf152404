"""The tracker domain: projects and work items on the ``tracker`` log (CO-24, spec/estate.md §21).

Owns the tables ``projects``, ``tasks``, ``task_body_revisions``, ``task_watchers``, ``comments``,
``task_history`` and the ``work_fts`` index; the operations ``work.*``, ``project.upsert`` and
``projects.list``; the record kinds ``project_upsert``, ``task_create``, ``task_update`` and
``comment_add``. It may import :mod:`shared.estate.log`, :mod:`shared.estate.store` and the
estate's base modules, never another domain.
"""

from __future__ import annotations

from .._seam import EstateDomain, ReadOp, WriteOp, row_exists
from ._apply import KINDS
from ._decide import COMMENT_LIMIT, decide_comment, decide_create, decide_project, decide_update
from ._read import catalogue, comment_view, get_item, list_items, list_projects, task_view
from ._tables import WORK_FTS, Comment, Project, Task, TaskBodyRevision, TaskHistory, TaskWatcher

__all__ = ["COMMENT_LIMIT", "DOMAIN"]

DOMAIN = EstateDomain(
    name="tracker",
    log="tracker",
    tables=(Project, Task, TaskBodyRevision, TaskWatcher, Comment, TaskHistory),
    ddl=(WORK_FTS,),
    writes={
        "work.create": WriteOp(decide_create, task_view, row_exists("tasks"), inline=True),
        "work.update": WriteOp(decide_update, task_view),
        "work.comment": WriteOp(decide_comment, comment_view, row_exists("comments")),
        "project.upsert": WriteOp(decide_project, lambda c, i: {"id": i}),
    },
    reads={
        "work.list": ReadOp(lambda c, r, a: list_items(c, a)),
        "work.get": ReadOp(lambda c, r, a: get_item(c, a), inline=True),
        "work.catalogue": ReadOp(catalogue),
        "projects.list": ReadOp(lambda c, r, a: list_projects(c)),
    },
    apply=KINDS,
    corpus="work_items",
)
