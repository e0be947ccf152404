"""Knowledge routes (CO-25, CO-27, ES-36, ES-65), through the router.

``GET /knowledge/search?q=&mode=&limit=`` (limit 8, ≤ 20) answers ``{hits, searched, failed,
state, sentence, mode_requested, mode_used, semantic, vector_coverage}`` (AG-13: hybrid BM25 ⊕
vectors when the company has embeddings, AG-12): ``state`` tells
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

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from shared.router import EstateRouter
from shared.runtime import MAX_VERSION, NodeContext, api_error, node_embedder

from ._common import (
    GRANTED,
    MAX_OFFSET,
    EstateResource,
    add,
    estate_call,
    grants,
    levels,
    operator,
    write_answer,
)

__all__ = ["PageUpdate", "PageWrite", "router"]


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


class KnowledgeRoutes(EstateResource):
    """The knowledge base's endpoints over this node's estate router."""

    async def search(
        self,
        q: str = Query(""),  # missing, "" and "?!..." are all refused by the estate naming q: one shape
        space: str | None = None,
        limit: int = Query(8, ge=1, le=20),
        min_position: str | None = None,
        mode: str | None = None,
    ) -> dict[str, Any]:
        embedder = node_embedder(self.ctx)
        return await self.read(
            lambda est: est.search_knowledge(
                q, space=space, limit=limit, min_position=min_position, mode=mode, embedder=embedder
            )
        )

    async def spaces(self) -> dict[str, Any]:
        return await self.read(lambda est: est.list_spaces(), "spaces")

    async def pages(
        self,
        space: str | None = None,
        limit: int = Query(50, ge=1, le=500),
        offset: int = Query(0, ge=0, le=MAX_OFFSET),
        read_level: str = "stale",
        min_position: str | None = None,
    ) -> dict[str, Any]:
        return await self.read(
            lambda est: est.list_pages(
                space=space, limit=limit, offset=offset, **levels(read_level, min_position)
            )
        )

    async def page(
        self, page_id: str, read_level: str = "stale", min_position: str | None = None
    ) -> dict[str, Any]:
        return await self.read(lambda est: est.get_page(page_id=page_id, **levels(read_level, min_position)))

    async def write_page(self, body: PageWrite, token: str = GRANTED) -> dict[str, Any]:
        return await self.write(
            lambda est: est.write_page(
                body.space,
                body.title,
                body.body,
                page_id=body.page_id,
                if_match=body.if_match,
                op_id=body.op_id,
                **operator(token),
            ),
            "page",
        )

    async def update_page(self, page_id: str, body: PageUpdate, token: str = GRANTED) -> dict[str, Any]:
        async def rewrite(est: EstateRouter) -> dict[str, Any]:
            current = (await est.get_page(page_id=page_id))["data"]
            written: dict[str, Any] = await est.write_page(
                current["space"],
                body.title or current["title"],
                body.body,
                page_id=page_id,
                if_match=body.if_match,
                op_id=body.op_id,
                **operator(token),
            )
            return written

        res = await estate_call(self.ctx, rewrite)
        if res.get("object") is None and res.get("outcome") != "pending":
            raise api_error(500, "page_missing", "the page write landed but its row could not be read back")
        return write_answer(res, "page")


def router(ctx: NodeContext) -> APIRouter:
    """Build the knowledge routes."""
    r = APIRouter(tags=["knowledge"])
    read, write = grants(ctx, "state:read", "knowledge:write")
    h = KnowledgeRoutes(ctx)
    add(r, "/knowledge/search", h.search, methods=["GET"], dependencies=read)
    add(r, "/knowledge/spaces", h.spaces, methods=["GET"], dependencies=read)
    add(r, "/knowledge/pages", h.pages, methods=["GET"], dependencies=read)
    add(r, "/knowledge/pages/{page_id}", h.page, methods=["GET"], dependencies=read)
    add(r, "/knowledge/pages", h.write_page, methods=["POST"], given=write)
    add(r, "/knowledge/pages/{page_id}", h.update_page, methods=["PUT"], given=write)
    return r
