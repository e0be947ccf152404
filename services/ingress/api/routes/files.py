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

from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse

from shared import estate, objects
from shared.router import RouterError
from shared.runtime import MAX_VERSION, NodeContext, api_error, require_grant

from ...files import object_store_of, open_file, store_file
from ._common import GRANTED, EstateResource, add, estate_call, estate_http_error, write_answer

__all__ = ["object_store_of", "router"]

_ANY_BYTES = {"*/*": {"schema": {"type": "string", "format": "binary"}}}
"""A file's bytes in the OpenAPI document: any content type (the uploader's), any bytes."""


def _objects_error(e: objects.ObjectsError) -> Exception:
    if isinstance(e, objects.ObjectEmpty):
        return api_error(400, "invalid", {"field": "content", "message": "an empty file is refused"})
    if isinstance(e, objects.ObjectNotFound):
        return api_error(502, "objects_missing", f"the file's bytes are missing from the object store: {e}")
    return api_error(503, "objects_unavailable", str(e))


def _if_match(raw: str | None) -> int | None:
    """The ``If-Match`` header as a file version (0 = must be new); 400 naming it otherwise."""
    if raw is None:
        return None
    try:
        if_match = int(raw.strip().strip('"'))
        if not 0 <= if_match <= MAX_VERSION:
            raise ValueError(raw)
    except ValueError:
        raise api_error(
            400,
            "invalid",
            {
                "field": "If-Match",
                "message": f"must be the file version you read (0..{MAX_VERSION}; 0 = must be new)",
            },
        ) from None
    return if_match


class FileRoutes(EstateResource):
    """The project file endpoints: rows through the estate router, bytes through the object store."""

    async def list_files(
        self, key: str, prefix: str | None = None, min_position: str | None = None
    ) -> dict[str, Any]:
        return await self.read(lambda est: est.list_files(key, prefix=prefix, min_position=min_position))

    async def download(
        self,
        key: str,
        path: str,
        version: int | None = Query(None, ge=1, le=MAX_VERSION),
        min_position: str | None = None,
    ) -> StreamingResponse:
        row = (
            await estate_call(
                self.ctx, lambda est: est.get_file_row(key, path, version=version, min_position=min_position)
            )
        )["data"]
        try:
            body = await open_file(self.ctx, row)
        except objects.ObjectsError as e:
            raise _objects_error(e) from None
        headers = {
            "Content-Length": str(row["size"]),
            "ETag": f'"{row["sha256"]}"',
            "X-Crewlet-File-Version": str(row["version"]),
            "X-Crewlet-Sha256": str(row["sha256"]),
        }
        return StreamingResponse(body, media_type=str(row["content_type"]), headers=headers)

    async def upload(self, key: str, path: str, request: Request, token: str = GRANTED) -> dict[str, Any]:
        try:
            estate.validate_path(path)
        except estate.InvalidField as e:
            raise estate_http_error(e) from None
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > estate.MAX_FILE:
            raise estate_http_error(estate.TooLarge("content", estate.MAX_FILE, int(declared)))
        if_match = _if_match(request.headers.get("if-match"))
        data = await request.body()
        if not data:
            raise api_error(
                400, "invalid", {"field": "content", "message": "an empty file is refused; upload bytes"}
            )
        if len(data) > estate.MAX_FILE:
            raise estate_http_error(estate.TooLarge("content", estate.MAX_FILE, len(data)))
        content_type = request.headers.get("content-type") or "application/octet-stream"
        try:
            res = await store_file(
                self.ctx,
                key,
                path,
                data,
                content_type=content_type,
                if_match=if_match,
                author=f"operator:{token}",
            )
        except objects.ObjectsError as e:
            raise _objects_error(e) from None
        except (estate.EstateError, RouterError) as e:
            raise estate_http_error(e) from None
        return write_answer(res, "file")


def router(ctx: NodeContext) -> APIRouter:
    """Build the project file routes."""
    r = APIRouter(tags=["files"])
    read = [Depends(require_grant(ctx.cfg, "state:read"))]
    write = {"token": Depends(require_grant(ctx.cfg, "work:write"))}
    h = FileRoutes(ctx)
    add(r, "/projects/{key}/files", h.list_files, methods=["GET"], dependencies=read)
    add(
        r,
        "/projects/{key}/files/{path:path}",
        h.download,
        methods=["GET"],
        dependencies=read,
        response_class=StreamingResponse,
        responses={200: {"description": "The file's bytes, in its content type", "content": _ANY_BYTES}},
    )
    add(
        r,
        "/projects/{key}/files/{path:path}",
        h.upload,
        methods=["PUT"],
        given=write,
        status_code=201,
        openapi_extra={"requestBody": {"required": True, "content": _ANY_BYTES}},
    )
    return r
