"""Tracker routes (CO-24, CO-27, ES-15, ES-25, ES-32): every read and write goes through the router.

Reads: ``GET /work``, ``GET /work/catalogue``, ``GET /work/{key}``, ``GET /projects`` (``state:read``),
with ``read_level`` (default ``stale``) and ``min_position`` (ES-25, ES-27). Writes (``work:write``):
``POST /work``, ``PATCH /work/{key}``, ``POST /work/{key}/comments``; each answers its outcome
(``applied`` or ``pending``), its ``op_id`` and the ``position`` it landed at (ES-15). Bringing the
same ``op_id`` back answers the first landing and writes nothing (ES-7).

An item may mirror an outside object (CO-35): ``POST /work`` takes ``external`` (its basis, e.g.
``github:186853002#1``), ``url`` and ``labels``; ``PATCH`` takes ``labels`` and ``url``. One item per
basis: a ``POST`` naming a basis an item already has creates nothing and answers ``200`` with
outcome ``existing`` and that item (a new item answers ``201``). ``GET /work?external=<basis>``
finds the linked item (``#`` is sent as ``%23``).

Estate and router errors map to JSON errors as for every estate route
(:func:`~services.ingress.api.routes._common.estate_http_error`): 404 unknown object, 400 a bad field
(named), 409 stale ``if_match`` (with the current version) or ``op_reused``, 413 too large, 503
refusals, ``unknown`` outcomes and "nobody answered" (listing each data node's reply). An operator's
write wakes the seats it concerns (:mod:`services.ingress.tracker`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from shared.runtime import MAX_VERSION, NodeContext

from ...tracker import wake_assignee, wake_commented
from ._common import (
    GRANTED,
    MAX_OFFSET,
    EstateResource,
    add,
    estate_call,
    estate_http_error,
    grants,
    levels,
    operator,
    read_level_of,
    write_answer,
)

__all__ = ["CommentCreate", "WorkCreate", "WorkUpdate", "estate_http_error", "read_level_of", "router"]


class WorkCreate(BaseModel):
    """``POST /work``: ``create_work_item`` (CO-24)."""

    model_config = ConfigDict(extra="forbid")
    project: str
    title: str
    type: str = "task"
    body: str | None = None
    priority: str = "normal"
    assignee: str | None = None
    parent: str | None = None
    external: str | None = None
    url: str | None = None
    labels: list[str] | None = None
    op_id: str | None = None


class WorkUpdate(BaseModel):
    """``PATCH /work/{key}``: ``update_work_item`` (CO-24); absent fields are unchanged."""

    model_config = ConfigDict(extra="forbid")
    # strict: ``true`` is not version 1, "3" is not 3 (a new user's if_match: true was taken as 1)
    if_match: int | None = Field(default=None, ge=0, le=MAX_VERSION, strict=True)
    title: str | None = None
    body: str | None = None
    status: str | None = None
    priority: str | None = None
    assignee: str | None = None
    parent: str | None = None
    watch: bool | None = Field(default=None, strict=True)
    due: str | None = None
    type: str | None = None
    labels: list[str] | None = None
    url: str | None = None
    op_id: str | None = None


class CommentCreate(BaseModel):
    """``POST /work/{key}/comments``."""

    model_config = ConfigDict(extra="forbid")
    body: str = Field(min_length=1)
    op_id: str | None = None


class WorkRoutes(EstateResource):
    """The tracker's endpoints over this node's estate router."""

    async def list_work(
        self,
        project: str | None = None,
        status: str | None = None,
        status_group: str | None = None,
        assignee: str | None = None,
        type: str | None = None,
        text: str | None = None,
        external: str | None = None,
        limit: int = Query(20, ge=1, le=100),
        offset: int = Query(0, ge=0, le=MAX_OFFSET),
        read_level: str = "stale",
        min_position: str | None = None,
    ) -> dict[str, Any]:
        return await self.read(
            lambda est: est.list_work_items(
                project=project,
                status=status,
                status_group=status_group,
                assignee=assignee,
                type=type,
                text=text,
                external=external,
                limit=limit,
                offset=offset,
                **levels(read_level, min_position),
            )
        )

    async def catalogue(self, project: str | None = None) -> dict[str, Any]:
        return await self.read(lambda est: est.get_work_catalogue(project))

    async def projects(self) -> dict[str, Any]:
        return await self.read(lambda est: est.list_projects(), "projects")

    async def get_work(
        self,
        key: str,
        read_level: str = "stale",
        min_position: str | None = None,
        comments_offset: int | None = Query(None, ge=0, le=MAX_OFFSET),
        comments_limit: int = Query(20, ge=1, le=100),
        history_offset: int | None = Query(None, ge=0, le=MAX_OFFSET),
        history_limit: int = Query(20, ge=1, le=100),
    ) -> dict[str, Any]:
        """One work item; its comments and history one page each, oldest first, with their totals.

        ``comments_offset``/``history_offset`` count from the oldest entry (default: the page ending
        with the newest); ``comments_limit``/``history_limit`` 1..100 (default 20). The answer adds
        ``comments_total``, ``comments_offset``, ``history_total`` and ``history_offset``.
        """
        pages = {
            "comments_offset": comments_offset,
            "comments_limit": comments_limit,
            "history_offset": history_offset,
            "history_limit": history_limit,
        }
        return await self.read(
            lambda est: est.get_work_item(key, pages=pages, **levels(read_level, min_position))
        )

    async def create_work(self, body: WorkCreate, response: Response, token: str = GRANTED) -> dict[str, Any]:
        res = await estate_call(
            self.ctx,
            lambda est: est.create_work_item(
                body.project,
                body.title,
                type=body.type,
                body=body.body,
                priority=body.priority,
                assignee=body.assignee,
                parent=body.parent,
                external=body.external,
                url=body.url,
                labels=body.labels,
                op_id=body.op_id,
                **operator(token),
            ),
        )
        if res.get("outcome") == "existing":
            response.status_code = 200  # nothing was created: the item for this basis exists (CO-35)
        else:
            await wake_assignee(self.ctx, res, None, f"operator:{token}")
        return write_answer(res, "item")

    async def update_work(self, key: str, body: WorkUpdate, token: str = GRANTED) -> dict[str, Any]:
        before: str | None = None
        if body.assignee is not None:
            current = (
                await estate_call(self.ctx, lambda est: est.get_work_item(key, read_level="linearizable"))
            )["data"]
            before = current.get("assignee") if isinstance(current, dict) else None
        res = await estate_call(
            self.ctx,
            lambda est: est.update_work_item(
                key,
                if_match=body.if_match,
                title=body.title,
                body=body.body,
                status=body.status,
                priority=body.priority,
                assignee=body.assignee,
                parent=body.parent,
                watch=body.watch,
                due=body.due,
                type=body.type,
                labels=body.labels,
                url=body.url,
                op_id=body.op_id,
                **operator(token),
            ),
        )
        if body.assignee is not None:
            await wake_assignee(self.ctx, res, before, f"operator:{token}")
        return write_answer(res, "item")

    async def comment(self, key: str, body: CommentCreate, token: str = GRANTED) -> dict[str, Any]:
        res = await estate_call(
            self.ctx,
            lambda est: est.comment_on_work_item(key, body.body, op_id=body.op_id, **operator(token)),
        )
        await wake_commented(self.ctx, key, res, f"operator:{token}")
        return write_answer(res, "comment")


def router(ctx: NodeContext) -> APIRouter:
    """Build the tracker routes over this node's estate router."""
    r = APIRouter(tags=["work"])
    read, write = grants(ctx, "state:read", "work:write")
    h = WorkRoutes(ctx)
    add(r, "/work", h.list_work, methods=["GET"], dependencies=read)
    add(r, "/work/catalogue", h.catalogue, methods=["GET"], dependencies=read)
    add(r, "/projects", h.projects, methods=["GET"], dependencies=read)
    add(r, "/work/{key}", h.get_work, methods=["GET"], dependencies=read)
    add(r, "/work", h.create_work, methods=["POST"], given=write, status_code=201, responses=_EXISTING)
    add(r, "/work/{key}", h.update_work, methods=["PATCH"], given=write)
    add(r, "/work/{key}/comments", h.comment, methods=["POST"], given=write, status_code=201)
    return r


_EXISTING: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Nothing created: the item for this external basis (outcome existing)",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
}
