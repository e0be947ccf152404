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

import copy
import json
from pathlib import Path
from typing import Any

import yaml
from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from shared import control, logs
from shared.config import company_json_schema, offline_script_issues, validate_company_data
from shared.runtime import NodeContext, api_error, require_grant

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

_log = logs.get("control.api")
APPLY_WAIT = 10.0
"""Seconds a write waits for this node to apply what it activated before answering."""


def _error(status: int, code: str, detail: str, **extra: Any) -> HTTPException:
    return HTTPException(status, {"error": code, "detail": detail, **extra})


def _translate(e: Exception) -> HTTPException:
    if isinstance(e, control.UnknownRevision):
        return _error(404, "unknown_revision", str(e))
    if isinstance(e, control.RevisionAdvanced):
        return _error(
            409,
            "revision_advanced",
            str(e),
            revision_id=e.revision_id,
            active_revision_id=e.active_revision_id,
        )
    if isinstance(e, control.PayloadUnopenable):
        return _error(503, "payload_unopenable", str(e))
    if isinstance(e, control.ControlUnavailable):
        return _error(
            503, "control_unavailable", f"the coordination store did not answer; outcome unknown: {e}"
        )
    raise e


SUMMARY_LIMIT = 1000
"""Characters an ``X-Summary`` may hold."""


def _header_text(value: str) -> str:
    """A header as text: HTTP headers arrive as latin-1, so UTF-8 ("café", "✓") is re-read as UTF-8."""
    try:
        return value.encode("latin-1").decode("utf-8").strip()
    except UnicodeError:
        return value.strip()


def _summary(request: Request, default: str = "") -> str:
    """``X-Summary``: one line of at most :data:`SUMMARY_LIMIT` characters, no control characters."""
    text = _header_text(request.headers.get("x-summary", "")) or default
    if len(text) > SUMMARY_LIMIT:
        raise _error(
            422, "invalid_summary", f"X-Summary is over {SUMMARY_LIMIT} characters", field="X-Summary"
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise _error(422, "invalid_summary", "X-Summary holds a control character", field="X-Summary")
    return text


def _format(value: str) -> str:
    if value not in ("json", "yaml"):
        raise _error(422, "invalid_format", f"format={value!r}: json or yaml", field="format")
    return value


def _yaml(document: Any) -> PlainTextResponse:
    return PlainTextResponse(
        yaml.safe_dump(document, sort_keys=False, allow_unicode=True), media_type="text/yaml"
    )


def _parse_document(raw: bytes, content_type: str) -> Any:
    """The body as a document: JSON, or YAML (a YAML content type, or any body JSON cannot read).

    Raises:
        HTTPException: 422 ``invalid_company`` naming where the body stops being JSON or YAML.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _error(
            422, "invalid_company", "the body is not UTF-8", issues=[_issue("", "shape", "not UTF-8")]
        ) from None
    if "yaml" not in content_type:
        try:
            return json.loads(text)
        except ValueError:
            pass  # curl sends YAML as form data by default: try it as YAML before refusing
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "somewhere"
        message = f"not JSON, and not YAML: {getattr(e, 'problem', None) or 'syntax error'} at {where}"
        raise _error(422, "invalid_company", message, issues=[_issue("", "shape", message)]) from None


def _issue(path: str, kind: str, message: str) -> dict[str, str]:
    return {"file": "", "path": path, "type": kind, "message": message, "severity": "error"}


async def _active(rec: control.Reconciler) -> tuple[int, str, dict[str, Any] | None]:
    """``(epoch, active revision id, its document)``; the document is None when the fleet has none
    or its body does not open here (it is then replaced, not diffed: FL-107)."""
    epoch, active_id, _ = await rec.store.epoch()
    if not epoch:
        return 0, "", None
    try:
        act = await rec.store.pointer()
    except control.PayloadUnopenable:
        return epoch, active_id, None
    return epoch, active_id, act.revision.document if act is not None else None


def _units(items: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for unit in items if isinstance(items, list) else []:
        if isinstance(unit, dict):
            out.append(unit)
            out.extend(_units(unit.get("children")))
    return out


def _replace_in(items: Any, key: str, name: str, body: dict[str, Any]) -> bool:
    if not isinstance(items, list):
        return False
    for i, item in enumerate(items):
        if isinstance(item, dict) and item.get(key) == name:
            items[i] = body
            return True
    return False


def _replace_entity(document: dict[str, Any], kind: str, name: str, body: dict[str, Any]) -> bool:
    """Replace one role (by handle), unit (by id), LLM provider (by key) or MCP server (by name) in
    place; False when the document has none by that name (CO-39 never creates)."""
    if kind == "role":
        return any(
            _replace_in(where.get("roles"), "handle", name, body)
            for where in [document, *_units(document.get("units"))]
        )
    if kind == "unit":
        return any(
            _replace_in(where.get(k), "id", name, body)
            for where in [document, *_units(document.get("units"))]
            for k in ("units", "children")
        )
    if kind == "llm provider":
        llm = (document.get("providers") or {}).get("llm")
        if isinstance(llm, dict) and name in llm:
            llm[name] = body
            return True
        return False
    return _replace_in(document.get("mcp_servers"), "name", name, body)


def _revision_body(rev: control.Revision, *, document: bool) -> dict[str, Any]:
    out = rev.meta()
    if document:
        out["document"] = control.redact(rev.document)
    return out


def router(ctx: NodeContext) -> APIRouter:
    """Build the ``/config`` routes over ``ctx.extras["control"]`` (the node's reconciler)."""
    r = APIRouter(tags=["config"])
    read = [Depends(require_grant(ctx.cfg, "config:read"))]
    write = require_grant(ctx.cfg, "config:write")

    def reconciler() -> control.Reconciler:
        rec = ctx.extras.get("control")
        if not isinstance(rec, control.Reconciler):
            raise api_error(
                503, "not_ready", "the control plane is not open yet", headers={"Retry-After": "5"}
            )
        return rec

    def admit_write() -> None:
        if ctx.draining:
            raise api_error(
                503, "draining", "this node is draining; retry on another node", headers={"Retry-After": "5"}
            )

    async def announce(rec: control.Reconciler, act: control.Activation) -> bool:
        if ctx.link is not None and not ctx.link.nc.is_closed:
            payload = {"revision_id": act.revision.revision_id, "summary": act.revision.summary}
            try:
                await ctx.link.nc.publish(control.REVISION_ACTIVATED_SUBJECT, json.dumps(payload).encode())
            except Exception as e:  # noqa: BLE001 - the poll still converges (FL-108)
                _log.warning("config_nudge_publish_failed", error=f"{type(e).__name__}: {e}")
        rec.nudge()
        return await rec.wait_applied(act.epoch, APPLY_WAIT)

    def activated(act: control.Activation, applied: bool, **extra: Any) -> dict[str, Any]:
        return {
            "revision_id": act.revision.revision_id,
            "epoch": act.epoch,
            "activated_at": act.activated_at_iso,
            "applied_here": applied,
            **extra,
        }

    @r.get("/config", dependencies=read, response_model=None, responses=_JSON_OR_YAML)
    async def get_config(format: str = _FORMAT) -> Any:
        rec = reconciler()
        try:
            act = await rec.store.pointer()
        except (control.ControlUnavailable, control.UnknownRevision) as e:
            raise _translate(e) from None
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

    async def commit(
        request: Request,
        document: Any,
        *,
        token_id: str,
        summary: str,
        compat: bool = False,
        dry_run: bool = False,
        base: tuple[int, str, dict[str, Any] | None] | None = None,
    ) -> Any:
        """Validate ``document``, store it in history, move the pointer (FL-106); answer 201.

        ``base`` is ``(epoch, active revision id, active document)`` as the caller read it (the
        per-entity edits); None reads it here. The compare-and-set is against that epoch.
        """
        admit_write()
        rec = reconciler()
        if not summary:
            raise _error(
                422,
                "missing_summary",
                "X-Summary is required: say what this revision changes",
                field="X-Summary",
            )
        if not isinstance(document, dict):
            raise _error(
                422,
                "invalid_company",
                "the body must be a company document (a mapping)",
                issues=[_issue("", "shape", "top level must be a mapping")],
            )
        company, issues = validate_company_data(document, file="", compat=compat)
        if company is None:
            errors = [i for i in issues if i.severity == "error"]
            raise _error(
                422,
                "invalid_company",
                f"not a runnable company: {len(errors)} error(s), first {errors[0].path}: {errors[0].message}",
                issues=[i.as_dict() for i in issues],
            )
        if compat:  # store the compat rewrites; the revision keeps the flag for its apply (CO-43)
            document = company.model_dump(mode="json", exclude_unset=True)
        refused = [
            _issue(path, "invalid", "a masked credential (***): give the value or a ${NAME} reference")
            for path in control.masked_credentials(document)
        ]
        base_dir = Path(str(ctx.extras.get("company_dir", ".")))
        refused += [
            i.as_dict()
            for i in offline_script_issues(document, base_dir, compat=compat)
            if i.severity == "error"
        ]
        if refused:
            raise _error(
                422,
                "invalid_company",
                f"not a runnable company: {refused[0]['path']}: {refused[0]['message']}",
                issues=refused,
            )
        warnings = [i.as_dict() for i in issues]
        try:
            if base is None:
                epoch, active_id, current = await _active(rec)
            else:
                epoch, active_id, current = base
            if_match = _header_text(request.headers.get("if-match", "")).strip('"')
            if if_match and (
                (if_match == "none" and epoch)
                or (if_match == "*" and not epoch)
                or (if_match not in ("none", "*") and if_match != active_id)
            ):
                raise _error(
                    412,
                    "if_match_failed",
                    f"If-Match {if_match!r} but the active revision is {active_id or 'none'}",
                    active_revision_id=active_id or None,
                )
            changes = [c.as_dict() for c in control.diff(current or {}, document)]
            if dry_run:
                return JSONResponse(
                    {"valid": True, "revision_id": None, "warnings": warnings, "changes": changes}, 200
                )
            revision = control.Revision(
                revision_id=control.new_revision_id(),
                document=document,
                summary=summary,
                source="cli" if request.headers.get("x-crewlet-client") == "cli" else "api",
                created_by=token_id or "not recorded",
                created_by_kind="operator",
                operator_id=token_id,
                parent_revision_id=active_id or None,
                compat=compat,
            )
            await rec.store.store(revision)  # history first; active only once the pointer moved (FL-106)
            act = await rec.store.activate(revision, by=token_id, expected_epoch=epoch)
        except (control.ControlUnavailable, control.RevisionAdvanced, control.UnknownRevision) as e:
            raise _translate(e) from None
        _log.info("config_revision_activated", revision_id=revision.revision_id, epoch=act.epoch, by=token_id)
        applied = await announce(rec, act)
        return JSONResponse(activated(act, applied, warnings=warnings, changes=len(changes)), 201)

    document_body = {
        "requestBody": {
            "required": True,
            "description": "The company document (Tier B), as JSON or YAML",
            "content": {
                "application/json": {"schema": company_json_schema()},
                "application/yaml": {"schema": {"type": "string"}},
            },
        }
    }
    entity_body = {
        "requestBody": {
            "required": True,
            "description": "The whole entity as the company document writes it",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    }

    @r.put("/config", status_code=201, openapi_extra=document_body)
    async def put_config(
        request: Request, token_id: str = Depends(write), compat: bool = False, dry_run: bool = False
    ) -> Any:
        document = _parse_document(await request.body(), request.headers.get("content-type", ""))
        return await commit(
            request,
            document,
            token_id=token_id,
            summary=_summary(request),
            compat=compat,
            dry_run=dry_run,
        )

    async def edit_entity(request: Request, token_id: str, kind: str, name: str) -> Any:
        """CO-39: replace one entity of the active document; never creates (404 ``no_such_entity``)."""
        try:
            body = json.loads(await request.body())
        except ValueError as e:
            raise _error(422, "invalid_request", f"the body is not JSON: {e}", field="body") from None
        if not isinstance(body, dict):
            raise _error(422, "invalid_request", f"the body must be one {kind} (a mapping)", field="body")
        rec = reconciler()
        try:
            epoch, active_id, current = await _active(rec)
        except (control.ControlUnavailable, control.UnknownRevision) as e:
            raise _translate(e) from None
        if current is None:
            raise api_error(503, "no_active_revision", "the fleet has no active company revision")
        document = copy.deepcopy(current)
        if not _replace_entity(document, kind, name, body):
            raise _error(404, "no_such_entity", f"the active revision has no {kind} {name!r}")
        summary = _summary(request, f"replace {kind} {name}")
        return await commit(
            request, document, token_id=token_id, summary=summary, base=(epoch, active_id, current)
        )

    @r.put("/config/roles/{handle}", status_code=201, openapi_extra=entity_body)
    async def put_role(handle: str, request: Request, token_id: str = Depends(write)) -> Any:
        return await edit_entity(request, token_id, "role", handle)

    @r.put("/config/units/{unit_id}", status_code=201, openapi_extra=entity_body)
    async def put_unit(unit_id: str, request: Request, token_id: str = Depends(write)) -> Any:
        return await edit_entity(request, token_id, "unit", unit_id)

    @r.put("/config/llm-providers/{key}", status_code=201, openapi_extra=entity_body)
    async def put_provider(key: str, request: Request, token_id: str = Depends(write)) -> Any:
        return await edit_entity(request, token_id, "llm provider", key)

    @r.put("/config/mcp-servers/{name}", status_code=201, openapi_extra=entity_body)
    async def put_mcp_server(name: str, request: Request, token_id: str = Depends(write)) -> Any:
        return await edit_entity(request, token_id, "mcp server", name)

    @r.post("/config/revisions/{revision_id}/revert", status_code=201)
    async def revert(revision_id: str, request: Request, token_id: str = Depends(write)) -> Any:
        rec = reconciler()
        try:
            old = await rec.store.get(revision_id)
        except (control.ControlUnavailable, control.UnknownRevision) as e:
            raise _translate(e) from None
        summary = _summary(request, f"revert to {revision_id}")
        return await commit(request, old.document, token_id=token_id, summary=summary)

    @r.get("/config/revisions", dependencies=read)
    async def list_revisions(limit: int = Query(100, ge=1, le=MAX_REVISIONS_LISTED)) -> dict[str, Any]:
        rec = reconciler()
        try:
            history = await rec.store.history()
            epoch, active_id, _ = await rec.store.epoch()
        except (control.ControlUnavailable, control.UnknownRevision) as e:
            raise _translate(e) from None
        rows = [{**r.meta(), "active": r.revision_id == active_id} for r in history[:limit]]
        return {"revisions": rows, "active_revision_id": active_id or None, "epoch": epoch}

    @r.get("/config/revisions/{revision_id}", dependencies=read, response_model=None, responses=_JSON_OR_YAML)
    async def get_revision(revision_id: str, format: str = _FORMAT) -> Any:
        rec = reconciler()
        try:
            rev = await rec.store.get(revision_id)
        except (control.ControlUnavailable, control.UnknownRevision) as e:
            raise _translate(e) from None
        if _format(format) == "yaml":
            return _yaml(control.redact(rev.document))
        return _revision_body(rev, document=True)

    @r.get("/config/revisions/{revision_id}/diff", dependencies=read)
    async def diff_revision(revision_id: str, against: str | None = None) -> dict[str, Any]:
        rec = reconciler()
        try:
            to = await rec.store.get(revision_id)
            base_id = against or to.parent_revision_id
            base = await rec.store.get(base_id) if base_id else None
        except (control.ControlUnavailable, control.UnknownRevision) as e:
            raise _translate(e) from None
        changes = control.diff(base.document if base is not None else {}, to.document)
        return {"from": base_id, "to": revision_id, "changes": [c.as_dict() for c in changes]}

    @r.post("/config/revisions/{revision_id}/activate", status_code=201)
    async def activate(revision_id: str, request: Request, token_id: str = Depends(write)) -> dict[str, Any]:
        admit_write()
        rec = reconciler()
        try:
            rev = await rec.store.get(revision_id)
            act = await rec.store.activate(rev, by=token_id)
        except (control.ControlUnavailable, control.UnknownRevision) as e:
            raise _translate(e) from None
        _log.info("config_revision_activated", revision_id=revision_id, epoch=act.epoch, by=token_id)
        return activated(act, await announce(rec, act))

    return r
