"""Knowledge routes (CO-25, CO-27, ES-36, ES-65), through the router.

``GET /knowledge/search?q=`` answers ``{hits, searched, failed, state, sentence}``: ``state`` tells
``ok``, ``empty`` (nothing matched), ``building`` (the index here is not built yet) and ``failed``
("could not be searched": no data node answered) apart; hits rank by the text as typed, the exact
phrase, every word, some word, then BM25 (issue 12). A ``q`` without a word (empty, blanks or
punctuation only) answers ``400 {"error": "invalid", "detail": {"field": "q", ...}}``, one shape.
``GET /knowledge/pages``, ``GET /knowledge/pages/{id}``, ``GET /knowledge/spaces`` read (``state:read``);
``POST /knowledge/pages`` is ``write_page`` (create or update by id, else by space + title) and
``PUT /knowledge/pages/{id}`` updates one page (``knowledge:write``). A body over 1 MiB answers 413.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from shared import estate
from shared.router import EstateRouter, RouterError, router_of
from shared.runtime import MAX_VERSION, NodeContext, api_error, require_grant

from .work import estate_http_error, read_level_of

MAX_OFFSET = 1_000_000_000
"""The largest ``offset`` a listing accepts (SQLite integers are 64-bit; a bigger one is a 400 naming
``query.offset``, never a 503). ``if_match`` is bounded by :data:`~shared.runtime.MAX_VERSION`."""

__all__ = ["router"]


class PageWrite(BaseModel):
    """``POST /knowledge/pages``: ``write_page{space, title, body, page_id?, if_match?}`` (CO-25)."""

    model_config = ConfigDict(extra="forbid")
    space: str
    title: str
    body: str
    page_id: str | None = None
    if_match: int | None = Field(default=None, ge=0, le=MAX_VERSION)
    op_id: str | None = None


class PageUpdate(BaseModel):
    """``PUT /knowledge/pages/{id}``: a new title and/or body for one page."""

    model_config = ConfigDict(extra="forbid")
    title: str | None = None
    body: str
    if_match: int | None = Field(default=None, ge=0, le=MAX_VERSION)
    op_id: str | None = None


def router(ctx: NodeContext) -> APIRouter:
    """Build the knowledge routes."""
    r = APIRouter(tags=["knowledge"])
    read = Depends(require_grant(ctx.cfg, "state:read"))
    write = require_grant(ctx.cfg, "knowledge:write")

    def est() -> EstateRouter:
        return router_of(ctx)

    @r.get("/knowledge/search", dependencies=[read])
    async def search(
        q: str = Query(""),  # missing, "" and "?!..." are all refused by the estate naming q: one shape
        space: str | None = None,
        limit: int = Query(5, ge=1, le=20),
        min_position: str | None = None,
    ) -> dict[str, Any]:
        try:
            res = await est().search_knowledge(q, space=space, limit=limit, min_position=min_position)
        except (estate.EstateError, RouterError) as e:
            raise estate_http_error(e) from None
        return {**res["data"], "read": res["meta"]}

    @r.get("/knowledge/spaces", dependencies=[read])
    async def spaces() -> dict[str, Any]:
        try:
            res = await est().list_spaces()
        except (estate.EstateError, RouterError) as e:
            raise estate_http_error(e) from None
        return {"spaces": res["data"], "read": res["meta"]}

    @r.get("/knowledge/pages", dependencies=[read])
    async def pages(
        space: str | None = None,
        limit: int = Query(50, ge=1, le=500),
        offset: int = Query(0, ge=0, le=MAX_OFFSET),
        read_level: str = "stale",
        min_position: str | None = None,
    ) -> dict[str, Any]:
        try:
            res = await est().list_pages(
                space=space,
                limit=limit,
                offset=offset,
                read_level=read_level_of(read_level),
                min_position=min_position,
            )
        except (estate.EstateError, RouterError) as e:
            raise estate_http_error(e) from None
        return {**res["data"], "read": res["meta"]}

    @r.get("/knowledge/pages/{page_id}", dependencies=[read])
    async def page(
        page_id: str, read_level: str = "stale", min_position: str | None = None
    ) -> dict[str, Any]:
        try:
            res = await est().get_page(
                page_id=page_id, read_level=read_level_of(read_level), min_position=min_position
            )
        except (estate.EstateError, RouterError) as e:
            raise estate_http_error(e) from None
        return {**res["data"], "read": res["meta"]}

    @r.post("/knowledge/pages")
    async def write_page(body: PageWrite, token: str = Depends(write)) -> dict[str, Any]:
        try:
            res = await est().write_page(
                body.space,
                body.title,
                body.body,
                page_id=body.page_id,
                if_match=body.if_match,
                op_id=body.op_id,
                author=f"operator:{token}",
                author_kind="operator",
            )
        except (estate.EstateError, RouterError) as e:
            raise estate_http_error(e) from None
        return {**{k: v for k, v in res.items() if k != "object"}, "page": res.get("object")}

    @r.put("/knowledge/pages/{page_id}")
    async def update_page(page_id: str, body: PageUpdate, token: str = Depends(write)) -> dict[str, Any]:
        try:
            current = (await est().get_page(page_id=page_id))["data"]
            res = await est().write_page(
                current["space"],
                body.title or current["title"],
                body.body,
                page_id=page_id,
                if_match=body.if_match,
                op_id=body.op_id,
                author=f"operator:{token}",
                author_kind="operator",
            )
        except (estate.EstateError, RouterError) as e:
            raise estate_http_error(e) from None
        if res.get("object") is None and res.get("outcome") != "pending":
            raise api_error(500, "page_missing", "the page write landed but its row could not be read back")
        return {**{k: v for k, v in res.items() if k != "object"}, "page": res.get("object")}

    return r
