"""Project file routes (CO-26, ES-70, ES-74): rows through the router, bytes straight to the store.

``GET /projects/{key}/files`` lists the current row of every file (``state:read``);
``GET /projects/{key}/files/{path}`` streams one file's bytes from the object store (digest
verified by the store at the end; ``?version=N`` for an older version); ``PUT /projects/{key}/files/{path}``
uploads (``work:write``; ``If-Match: <version>`` guards against a concurrent writer, ``0`` = must be
new). An upload checks the project and the path, stores the object first (content-addressed,
``sha256/<2 hex>/<sha256>``) and appends the row second, so a listed file always has its bytes and
a failed upload leaves at most an unnamed object (ES-74). An empty upload is refused (400 naming
``content``); a path that tries to leave its project is refused (400 naming ``path``); over
100 MiB answers 413.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse

from shared import estate, objects
from shared.router import EstateRouter, RouterError, router_of
from shared.runtime import MAX_VERSION, NodeContext, api_error, require_grant

from .work import estate_http_error

__all__ = ["object_store_of", "router"]

_open_lock = asyncio.Lock()
_ANY_BYTES = {"*/*": {"schema": {"type": "string", "format": "binary"}}}
"""A file's bytes in the OpenAPI document: any content type (the uploader's), any bytes."""


async def object_store_of(ctx: NodeContext) -> objects.ObjectStore:
    """Return the node's object store (``ctx.objects``, opened and claimed at boot by the node runner).

    A context without one (a test harness, a runner that skipped it) opens and claims it here on first
    use and keeps it in ``ctx.objects`` so the runner closes it at shutdown.

    Raises:
        ObjectsError: the store could not be opened, or another store is recorded (ES-71).
    """
    if ctx.objects is not None:
        return ctx.objects
    async with _open_lock:
        if ctx.objects is None:
            opened = await objects.open_object_store(ctx.cfg, ctx.link)
            if ctx.coord is not None:
                await objects.claim_objects_slot(ctx.coord, opened)
            ctx.objects = opened
        return ctx.objects


def _objects_error(e: objects.ObjectsError) -> Exception:
    if isinstance(e, objects.ObjectEmpty):
        return api_error(400, "invalid", {"field": "content", "message": "an empty file is refused"})
    if isinstance(e, objects.ObjectNotFound):
        return api_error(502, "objects_missing", f"the file's bytes are missing from the object store: {e}")
    return api_error(503, "objects_unavailable", str(e))


def router(ctx: NodeContext) -> APIRouter:
    """Build the project file routes."""
    r = APIRouter(tags=["files"])
    read = Depends(require_grant(ctx.cfg, "state:read"))
    write = require_grant(ctx.cfg, "work:write")

    def est() -> EstateRouter:
        return router_of(ctx)

    @r.get("/projects/{key}/files", dependencies=[read])
    async def list_files(
        key: str, prefix: str | None = None, min_position: str | None = None
    ) -> dict[str, Any]:
        try:
            res = await est().list_files(key, prefix=prefix, min_position=min_position)
        except (estate.EstateError, RouterError) as e:
            raise estate_http_error(e) from None
        return {**res["data"], "read": res["meta"]}

    @r.get(
        "/projects/{key}/files/{path:path}",
        dependencies=[read],
        response_class=StreamingResponse,
        responses={200: {"description": "The file's bytes, in its content type", "content": _ANY_BYTES}},
    )
    async def download(
        key: str,
        path: str,
        version: int | None = Query(None, ge=1, le=MAX_VERSION),
        min_position: str | None = None,
    ) -> StreamingResponse:
        try:
            row = (await est().get_file_row(key, path, version=version, min_position=min_position))["data"]
        except (estate.EstateError, RouterError) as e:
            raise estate_http_error(e) from None
        first: bytes | None = None
        try:
            store = await object_store_of(ctx)
            chunks = (await store.get(str(row["object_key"]))).__aiter__()
            # the first chunk is read before the headers go out: a store that fails at once answers
            # 503 naming it, rather than a 200 cut short after its headers
            first = await anext(chunks, None)
        except objects.ObjectsError as e:
            raise _objects_error(e) from None

        async def body() -> AsyncIterator[bytes]:
            if first is not None:
                yield first
            async for chunk in chunks:
                yield chunk

        headers = {
            "Content-Length": str(row["size"]),
            "ETag": f'"{row["sha256"]}"',
            "X-Crewlet-File-Version": str(row["version"]),
            "X-Crewlet-Sha256": str(row["sha256"]),
        }
        return StreamingResponse(body(), media_type=str(row["content_type"]), headers=headers)

    @r.put(
        "/projects/{key}/files/{path:path}",
        status_code=201,
        openapi_extra={"requestBody": {"required": True, "content": _ANY_BYTES}},
    )
    async def upload(key: str, path: str, request: Request, token: str = Depends(write)) -> dict[str, Any]:
        try:
            estate.validate_path(path)
        except estate.InvalidField as e:
            raise estate_http_error(e) from None
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > estate.MAX_FILE:
            raise estate_http_error(estate.TooLarge("content", estate.MAX_FILE, int(declared)))
        if_match: int | None = None
        raw_if = request.headers.get("if-match")
        if raw_if is not None:
            try:
                if_match = int(raw_if.strip().strip('"'))
                if not 0 <= if_match <= MAX_VERSION:
                    raise ValueError(raw_if)
            except ValueError:
                raise api_error(
                    400,
                    "invalid",
                    {
                        "field": "If-Match",
                        "message": f"must be the file version you read (0..{MAX_VERSION}; 0 = must be new)",
                    },
                ) from None
        data = await request.body()
        if not data:
            raise api_error(
                400, "invalid", {"field": "content", "message": "an empty file is refused; upload bytes"}
            )
        if len(data) > estate.MAX_FILE:
            raise estate_http_error(estate.TooLarge("content", estate.MAX_FILE, len(data)))
        content_type = request.headers.get("content-type") or "application/octet-stream"
        try:
            await est().get_work_catalogue(key)  # the project must exist before any byte is stored
        except (estate.EstateError, RouterError) as e:
            raise estate_http_error(e) from None
        sha = hashlib.sha256(data).hexdigest()
        object_key = estate.object_key_for(sha)
        try:
            store = await object_store_of(ctx)
            info = await store.put(object_key, data)
        except objects.ObjectsError as e:
            raise _objects_error(e) from None
        try:
            res = await est().put_file_row(
                key,
                path,
                size=info.size,
                sha256=info.sha256 or sha,
                object_key=info.key,
                content_type=content_type,
                if_match=if_match,
                author=f"operator:{token}",
                author_kind="operator",
            )
        except (estate.EstateError, RouterError) as e:
            raise estate_http_error(e) from None
        return {**{k: v for k, v in res.items() if k != "object"}, "file": res.get("object")}

    return r
