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

:func:`estate_http_error` maps estate and router errors to JSON errors for every estate route:
404 unknown object, 400 a bad field (named), 409 stale ``if_match`` (with the current version) or
``op_reused``, 413 too large, 503 refusals, ``unknown`` outcomes and "nobody answered" (listing
each data node's reply).
"""

from __future__ import annotations

from typing import Any, cast

from fastapi import APIRouter, Depends, HTTPException, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from shared import estate, logs, tools
from shared.bus import BusUnavailable, wake_envelope
from shared.router import EstateRouter, NobodyAnswered, RouterError, router_of
from shared.runtime import MAX_VERSION, NodeContext, api_error, require_grant

MAX_OFFSET = 1_000_000_000
"""The largest ``offset`` a listing accepts (SQLite integers are 64-bit; a bigger one is a 400 naming
``query.offset``, never a 503). ``if_match`` is bounded by :data:`~shared.runtime.MAX_VERSION`."""

__all__ = ["estate_http_error", "read_level_of", "router"]


def estate_http_error(e: Exception) -> HTTPException:
    """Return the HTTP error of an estate/router failure (CO-27's ``{"error", "detail"}`` body)."""
    if isinstance(e, estate.NotFound):
        return api_error(404, "not_found", {"what": e.what, "key": e.key, "message": str(e)})
    if isinstance(e, estate.WrongStream):
        return api_error(400, "wrong_stream", {"field": e.field, "message": e.detail})
    if isinstance(e, estate.InvalidField):
        return api_error(400, "invalid", {"field": e.field, "message": e.detail})
    if isinstance(e, estate.VersionConflict):
        return api_error(409, "conflict", {"current_version": e.current_version, "message": str(e)})
    if isinstance(e, estate.OpReused):
        return api_error(409, "op_reused", {"op_id": e.op_id, "position": e.position, "object": e.object_id})
    if isinstance(e, estate.TooLarge):
        return api_error(413, "too_large", {"field": e.field, "limit": e.limit, "size": e.size})
    if isinstance(e, estate.OutcomeUnknown):
        return api_error(
            503,
            "unknown",
            {"op_id": e.op_id, "message": str(e), "retry": "repeat the call with the same op_id"},
        )
    if isinstance(e, estate.Refused):
        headers = {"Retry-After": str(max(1, round(e.retry_after)))} if e.retry_after else None
        return api_error(503, e.refusal, {"node": e.node, "message": str(e)}, headers=headers)
    if isinstance(e, NobodyAnswered):
        return api_error(
            503,
            "nobody_answered",
            {
                "estate": e.estate,
                "message": str(e),
                "nodes": [{"node": r.node, "said": r.said, "detail": r.detail} for r in e.replies],
            },
        )
    if isinstance(e, RouterError | estate.EstateError):
        return api_error(503, "estate_unavailable", str(e))
    raise e


def read_level_of(value: str) -> estate.ReadLevel:
    """Return ``value`` as a read level; the data node refuses an unknown one naming ``read_level``."""
    return cast(estate.ReadLevel, value)


_log = logs.get("ingress.work")


def _author(token_id: str) -> dict[str, str]:
    return {"author": f"operator:{token_id}", "author_kind": "operator"}


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


def _write_answer(result: dict[str, Any], name: str) -> dict[str, Any]:
    out = {k: v for k, v in result.items() if k != "object"}
    out[name] = result.get("object")
    return out


async def _wake(ctx: NodeContext, res: dict[str, Any], before: str | None, writer: str) -> None:
    """Wake the new assignee when an operator assigns an item to an agent seat (CO-10)."""
    item = res.get("object") if isinstance(res.get("object"), dict) else None
    if item is None or ctx.org is None:
        return
    assignee, key = item.get("assignee"), item.get("key")
    seat = ctx.org.seat(assignee) if isinstance(assignee, str) else None
    bus = ctx.extras.get("bus")
    if seat is None or seat.kind != "agent" or assignee == before or not isinstance(key, str) or bus is None:
        return
    try:
        await bus.publish_to_seat(
            assignee, wake_envelope(key, writer), msg_id=f"wake:{key}:{assignee}:{res.get('op_id', '')}"
        )
        _log.info("tracker_wake_published", seat=assignee, work_item=key, writer=writer)
    except BusUnavailable as e:
        _log.warning("tracker_wake_failed", seat=assignee, work_item=key, error=str(e))


def router(ctx: NodeContext) -> APIRouter:
    """Build the tracker routes over this node's estate router."""
    r = APIRouter(tags=["work"])
    read = Depends(require_grant(ctx.cfg, "state:read"))
    write = require_grant(ctx.cfg, "work:write")

    def est() -> EstateRouter:
        return router_of(ctx)

    @r.get("/work", dependencies=[read])
    async def list_work(
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
        try:
            res = await est().list_work_items(
                project=project,
                status=status,
                status_group=status_group,
                assignee=assignee,
                type=type,
                text=text,
                external=external,
                limit=limit,
                offset=offset,
                read_level=read_level_of(read_level),
                min_position=min_position,
            )
        except (estate.EstateError, RouterError) as e:
            raise estate_http_error(e) from None
        return {**res["data"], "read": res["meta"]}

    @r.get("/work/catalogue", dependencies=[read])
    async def catalogue(project: str | None = None) -> dict[str, Any]:
        try:
            res = await est().get_work_catalogue(project)
        except (estate.EstateError, RouterError) as e:
            raise estate_http_error(e) from None
        return {**res["data"], "read": res["meta"]}

    @r.get("/projects", dependencies=[read])
    async def projects() -> dict[str, Any]:
        try:
            res = await est().list_projects()
        except (estate.EstateError, RouterError) as e:
            raise estate_http_error(e) from None
        return {"projects": res["data"], "read": res["meta"]}

    @r.get("/work/{key}", dependencies=[read])
    async def get_work(
        key: str, read_level: str = "stale", min_position: str | None = None
    ) -> dict[str, Any]:
        try:
            res = await est().get_work_item(
                key, read_level=read_level_of(read_level), min_position=min_position
            )
        except (estate.EstateError, RouterError) as e:
            raise estate_http_error(e) from None
        return {**res["data"], "read": res["meta"]}

    @r.post(
        "/work",
        status_code=201,
        responses={
            200: {
                "description": "Nothing created: the item for this external basis (outcome existing)",
                "content": {"application/json": {"schema": {"type": "object"}}},
            }
        },
    )
    async def create_work(
        body: WorkCreate, response: Response, token: str = Depends(write)
    ) -> dict[str, Any]:
        try:
            res = await est().create_work_item(
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
                **_author(token),
            )
        except (estate.EstateError, RouterError) as e:
            raise estate_http_error(e) from None
        if res.get("outcome") == "existing":
            response.status_code = 200  # nothing was created: the item for this basis exists (CO-35)
        else:
            await _wake(ctx, res, None, f"operator:{token}")
        return _write_answer(res, "item")

    @r.patch("/work/{key}")
    async def update_work(key: str, body: WorkUpdate, token: str = Depends(write)) -> dict[str, Any]:
        before: str | None = None
        try:
            if body.assignee is not None:
                current = (await est().get_work_item(key, read_level="linearizable"))["data"]
                before = current.get("assignee") if isinstance(current, dict) else None
            res = await est().update_work_item(
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
                author=f"operator:{token}",
                author_kind="operator",
            )
        except (estate.EstateError, RouterError) as e:
            raise estate_http_error(e) from None
        if body.assignee is not None:
            await _wake(ctx, res, before, f"operator:{token}")
        return _write_answer(res, "item")

    @r.post("/work/{key}/comments", status_code=201)
    async def comment(key: str, body: CommentCreate, token: str = Depends(write)) -> dict[str, Any]:
        try:
            res = await est().comment_on_work_item(key, body.body, op_id=body.op_id, **_author(token))
        except (estate.EstateError, RouterError) as e:
            raise estate_http_error(e) from None
        # CO-41: the assignee, the watchers and the @mentioned agent seats; the operator is no seat
        posted, bus = res.get("object"), ctx.extras.get("bus")
        if isinstance(posted, dict) and "body" in posted and bus is not None and ctx.org is not None:
            try:
                item = (await est().get_work_item(key, read_level="linearizable"))["data"]
            except (estate.EstateError, RouterError) as e:
                _log.warning("comment_wake_failed", work_item=key, error=str(e))
            else:
                agents = {s.handle for s in ctx.org.seats}
                await tools.publish_comment_wakes(
                    bus, ctx.coord, item, posted, author=f"operator:{token}", agent_seats=agents
                )
        return _write_answer(res, "comment")

    return r
