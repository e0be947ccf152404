"""The company document through the API: ``/config`` and its revisions (CO-4, CO-27, FL-104..FL-109).

- ``GET /config`` (``config:read``): the active revision with its origin, epoch and activation
  instant, the document with ``${...}`` intact and literal credentials masked (``?format=yaml``:
  the document alone as YAML); 503 ``no_active_revision`` when the fleet has none.
- ``PUT /config`` (``config:write``): the body is the document (JSON, or YAML with a YAML content
  type); ``X-Summary`` is required (422 ``missing_summary``); ``If-Match: <revision_id>`` or
  ``none`` (412 ``if_match_failed``); ``?compat=true`` runs the compatibility import (CO-43);
  ``?dry_run=true`` validates and answers the changes without storing anything. A document that is
  not a runnable company is 422 ``invalid_company`` with every issue. Otherwise the revision is
  stored in history first, then the pointer is moved to it by compare-and-set against the epoch
  read when the request began (FL-106): a lost race is 409 ``revision_advanced`` (the revision
  stays in history). 201 ``{revision_id, epoch, activated_at, warnings, applied_here}`` once this
  node applied it (it waits up to 10 s; ``applied_here`` false when it did not in time).
- ``PUT /config/roles/{handle}``, ``/config/units/{id}``, ``/config/llm-providers/{key}``,
  ``/config/mcp-servers/{name}`` (CO-39): replace one entity of the active document (the whole
  document re-validated; never creates: 404 ``no_such_entity``), compare-and-set against the epoch
  the edit read; ``POST /config/revisions/{id}/revert``: a new revision equal to ``{id}``.
- ``GET /config/revisions`` (newest first), ``GET /config/revisions/{id}`` (404
  ``unknown_revision``), ``GET /config/revisions/{id}/diff?against=ID`` (redacted both sides;
  default: against its parent), ``POST /config/revisions/{id}/activate`` (a new epoch even for the
  active revision: the gesture for picking up rotated secrets, FL-104/FL-115).

Every activation is followed by the ``crewlet.config.revision_activated`` broadcast (FL-108). The
store not answering is 503 ``control_unavailable`` (the outcome of a write is then unknown: read
``GET /config`` before repeating it). A draining node refuses writes with 503 + ``Retry-After``.
"""

from __future__ import annotations

from typing import Any

import yaml
from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import PlainTextResponse

from shared import control, logs
from shared.config import company_json_schema
from shared.runtime import NodeContext, api_error, require_grant

from ...revisions import (
    activated,
    admit_write,
    announce,
    commit,
    control_http_error,
    edit_entity,
    parse_document,
    reconciler,
    summary_of,
)
from ._common import GRANTED, add

__all__ = ["router"]

MAX_REVISIONS_LISTED = 10_000
"""The largest ``limit`` of ``GET /config/revisions`` (a bigger one is a 400 naming ``query.limit``)."""
_FORMAT = Query("json", description="json or yaml (anything else: 422 invalid_format)")
_JSON_OR_YAML: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {"text/yaml": {"schema": {"type": "string"}}},
        "description": "JSON, or YAML with ?format=yaml",
    }
}
"""``GET /config`` and ``GET /config/revisions/{id}`` answer JSON, or the document as YAML."""
_ENTITY_BODY = {
    "requestBody": {
        "required": True,
        "description": "The whole entity as the company document writes it",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
}

_log = logs.get("control.api")
_READ_FAILURES = (control.ControlUnavailable, control.UnknownRevision)


def _format(value: str) -> str:
    if value not in ("json", "yaml"):
        raise HTTPException(
            422, {"error": "invalid_format", "detail": f"format={value!r}: json or yaml", "field": "format"}
        )
    return value


def _yaml(document: Any) -> PlainTextResponse:
    return PlainTextResponse(
        yaml.safe_dump(document, sort_keys=False, allow_unicode=True), media_type="text/yaml"
    )


def _revision_body(rev: control.Revision, *, document: bool) -> dict[str, Any]:
    out = rev.meta()
    if document:
        out["document"] = control.redact(rev.document)
    return out


def _document_body() -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "description": "The company document (Tier B), as JSON or YAML",
            "content": {
                "application/json": {"schema": company_json_schema()},
                "application/yaml": {"schema": {"type": "string"}},
            },
        }
    }


class ConfigRoutes:
    """The ``/config`` endpoints over the node's reconciler (``ctx.extras["control"]``)."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    async def get_config(self, format: str = _FORMAT) -> Any:
        rec = reconciler(self.ctx)
        try:
            act = await rec.store.pointer()
        except _READ_FAILURES as e:
            raise control_http_error(e) from None
        if act is None:
            raise api_error(503, "no_active_revision", "the fleet has no active company revision")
        if _format(format) == "yaml":
            return _yaml(control.redact(act.revision.document))
        return {
            **_revision_body(act.revision, document=True),
            "epoch": act.epoch,
            "activated_at": act.activated_at_iso,
            "activated_by": act.activated_by,
        }

    async def put_config(
        self, request: Request, token_id: str = GRANTED, compat: bool = False, dry_run: bool = False
    ) -> Any:
        document = parse_document(await request.body(), request.headers.get("content-type", ""))
        summary = summary_of(request)
        return await commit(
            self.ctx, request, document, token_id=token_id, summary=summary, compat=compat, dry_run=dry_run
        )

    async def put_role(self, handle: str, request: Request, token_id: str = GRANTED) -> Any:
        return await edit_entity(self.ctx, request, token_id, "role", handle)

    async def put_unit(self, unit_id: str, request: Request, token_id: str = GRANTED) -> Any:
        return await edit_entity(self.ctx, request, token_id, "unit", unit_id)

    async def put_provider(self, key: str, request: Request, token_id: str = GRANTED) -> Any:
        return await edit_entity(self.ctx, request, token_id, "llm provider", key)

    async def put_mcp_server(self, name: str, request: Request, token_id: str = GRANTED) -> Any:
        return await edit_entity(self.ctx, request, token_id, "mcp server", name)

    async def revert(self, revision_id: str, request: Request, token_id: str = GRANTED) -> Any:
        rec = reconciler(self.ctx)
        try:
            old = await rec.store.get(revision_id)
        except _READ_FAILURES as e:
            raise control_http_error(e) from None
        summary = summary_of(request, f"revert to {revision_id}")
        return await commit(self.ctx, request, old.document, token_id=token_id, summary=summary)

    async def list_revisions(self, limit: int = Query(100, ge=1, le=MAX_REVISIONS_LISTED)) -> dict[str, Any]:
        rec = reconciler(self.ctx)
        try:
            history = await rec.store.history()
            epoch, active_id, _ = await rec.store.epoch()
        except _READ_FAILURES as e:
            raise control_http_error(e) from None
        rows = [{**r.meta(), "active": r.revision_id == active_id} for r in history[:limit]]
        return {"revisions": rows, "active_revision_id": active_id or None, "epoch": epoch}

    async def get_revision(self, revision_id: str, format: str = _FORMAT) -> Any:
        rec = reconciler(self.ctx)
        try:
            rev = await rec.store.get(revision_id)
        except _READ_FAILURES as e:
            raise control_http_error(e) from None
        if _format(format) == "yaml":
            return _yaml(control.redact(rev.document))
        return _revision_body(rev, document=True)

    async def diff_revision(self, revision_id: str, against: str | None = None) -> dict[str, Any]:
        rec = reconciler(self.ctx)
        try:
            to = await rec.store.get(revision_id)
            base_id = against or to.parent_revision_id
            base = await rec.store.get(base_id) if base_id else None
        except _READ_FAILURES as e:
            raise control_http_error(e) from None
        changes = control.diff(base.document if base is not None else {}, to.document)
        return {"from": base_id, "to": revision_id, "changes": [c.as_dict() for c in changes]}

    async def activate(self, revision_id: str, request: Request, token_id: str = GRANTED) -> dict[str, Any]:
        admit_write(self.ctx)
        rec = reconciler(self.ctx)
        try:
            rev = await rec.store.get(revision_id)
            act = await rec.store.activate(rev, by=token_id)
        except _READ_FAILURES as e:
            raise control_http_error(e) from None
        _log.info("config_revision_activated", revision_id=revision_id, epoch=act.epoch, by=token_id)
        return activated(act, await announce(self.ctx, rec, act))


def router(ctx: NodeContext) -> APIRouter:
    """Build the ``/config`` routes over ``ctx.extras["control"]`` (the node's reconciler)."""
    r = APIRouter(tags=["config"])
    read = [Depends(require_grant(ctx.cfg, "config:read"))]
    write = {"token_id": Depends(require_grant(ctx.cfg, "config:write"))}
    h = ConfigRoutes(ctx)
    yaml_too: dict[str, Any] = {"dependencies": read, "response_model": None, "responses": _JSON_OR_YAML}
    add(r, "/config", h.get_config, methods=["GET"], **yaml_too)
    add(
        r,
        "/config",
        h.put_config,
        methods=["PUT"],
        given=write,
        status_code=201,
        openapi_extra=_document_body(),
    )
    for path, edit in (
        ("/config/roles/{handle}", h.put_role),
        ("/config/units/{unit_id}", h.put_unit),
        ("/config/llm-providers/{key}", h.put_provider),
        ("/config/mcp-servers/{name}", h.put_mcp_server),
    ):
        add(r, path, edit, methods=["PUT"], given=write, status_code=201, openapi_extra=_ENTITY_BODY)
    add(r, "/config/revisions/{revision_id}/revert", h.revert, methods=["POST"], given=write, status_code=201)
    add(r, "/config/revisions", h.list_revisions, methods=["GET"], dependencies=read)
    add(r, "/config/revisions/{revision_id}", h.get_revision, methods=["GET"], **yaml_too)
    add(r, "/config/revisions/{revision_id}/diff", h.diff_revision, methods=["GET"], dependencies=read)
    add(
        r,
        "/config/revisions/{revision_id}/activate",
        h.activate,
        methods=["POST"],
        given=write,
        status_code=201,
    )
    return r
