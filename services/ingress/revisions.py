"""The company document's revisions as the ingress writes them (CO-4, CO-39, CO-43, FL-104..FL-109).

Used by the ``/config`` routes (``services/ingress/api/routes/config.py``; its docstring says the
wire): :func:`commit` validates a document, stores it in history first and then moves the active
pointer by compare-and-set against the epoch read when the request began (FL-106), announces the
activation (FL-108) and waits up to :data:`APPLY_WAIT` seconds for this node to apply it;
:func:`edit_entity` replaces one role, unit, LLM provider or MCP server of the active document
(never creates). Refusals are raised as the HTTP errors the routes answer
(:func:`control_http_error` maps the control plane's failures).
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import yaml
from fastapi import HTTPException, Request
from fastapi.responses import JSONResponse

from shared import control, logs
from shared.config import offline_script_issues, unresolved_issues, validate_company_data
from shared.coordination import CoordinationUnavailable
from shared.runtime import NodeContext, api_error

__all__ = [
    "APPLY_WAIT",
    "SUMMARY_LIMIT",
    "activated",
    "active_of",
    "admit_write",
    "announce",
    "commit",
    "control_http_error",
    "edit_entity",
    "header_text",
    "parse_document",
    "reconciler",
    "summary_of",
]

_log = logs.get("control.api")
APPLY_WAIT = 10.0
"""Seconds a write waits for this node to apply what it activated before answering."""


def _error(status: int, code: str, detail: str, **extra: Any) -> HTTPException:
    return HTTPException(status, {"error": code, "detail": detail, **extra})


def control_http_error(e: Exception) -> HTTPException:
    """The HTTP error of a control-plane failure (404 ``unknown_revision``, 409 ``revision_advanced``,
    503 ``payload_unopenable`` / ``control_unavailable``); anything else is raised again."""
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


def header_text(value: str) -> str:
    """A header as text: HTTP headers arrive as latin-1, so UTF-8 ("café", "✓") is re-read as UTF-8."""
    try:
        return value.encode("latin-1").decode("utf-8").strip()
    except UnicodeError:
        return value.strip()


def summary_of(request: Request, default: str = "") -> str:
    """``X-Summary``: one line of at most :data:`SUMMARY_LIMIT` characters, no control characters."""
    text = header_text(request.headers.get("x-summary", "")) or default
    if len(text) > SUMMARY_LIMIT:
        raise _error(
            422, "invalid_summary", f"X-Summary is over {SUMMARY_LIMIT} characters", field="X-Summary"
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise _error(422, "invalid_summary", "X-Summary holds a control character", field="X-Summary")
    return text


def parse_document(raw: bytes, content_type: str) -> Any:
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


async def active_of(rec: control.Reconciler) -> tuple[int, str, dict[str, Any] | None]:
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


def replace_entity(document: dict[str, Any], kind: str, name: str, body: dict[str, Any]) -> bool:
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


def reconciler(ctx: NodeContext) -> control.Reconciler:
    """The node's reconciler (``ctx.extras["control"]``); 503 ``not_ready`` before it is open."""
    rec = ctx.extras.get("control")
    if not isinstance(rec, control.Reconciler):
        raise api_error(503, "not_ready", "the control plane is not open yet", headers={"Retry-After": "5"})
    return rec


def admit_write(ctx: NodeContext) -> None:
    """Refuse a write on a draining node: 503 + ``Retry-After``."""
    if ctx.draining:
        raise api_error(
            503, "draining", "this node is draining; retry on another node", headers={"Retry-After": "5"}
        )


async def announce(ctx: NodeContext, rec: control.Reconciler, act: control.Activation) -> bool:
    """Broadcast ``act`` (FL-108), nudge the reconciler; True once this node applied it (within
    :data:`APPLY_WAIT` seconds)."""
    if ctx.link is not None and not ctx.link.nc.is_closed:
        payload = {"revision_id": act.revision.revision_id, "summary": act.revision.summary}
        try:
            await ctx.link.nc.publish(control.REVISION_ACTIVATED_SUBJECT, json.dumps(payload).encode())
        except Exception as e:  # noqa: BLE001 - the poll still converges (FL-108)
            _log.warning("config_nudge_publish_failed", error=f"{type(e).__name__}: {e}")
    rec.nudge()
    return await rec.wait_applied(act.epoch, APPLY_WAIT)


def activated(act: control.Activation, applied: bool, **extra: Any) -> dict[str, Any]:
    """The answer of an activation."""
    return {
        "revision_id": act.revision.revision_id,
        "epoch": act.epoch,
        "activated_at": act.activated_at_iso,
        "applied_here": applied,
        **extra,
    }


def _validated(
    ctx: NodeContext, document: Any, summary: str, compat: bool
) -> tuple[dict[str, Any], list[Any]]:
    """``(document, its issues)`` once it is a runnable company with a summary (the compat
    rewrites stored, CO-43); 422 ``missing_summary`` / ``invalid_company`` with every issue."""
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
        i.as_dict() for i in offline_script_issues(document, base_dir, compat=compat) if i.severity == "error"
    ]
    if refused:
        raise _error(
            422,
            "invalid_company",
            f"not a runnable company: {refused[0]['path']}: {refused[0]['message']}",
            issues=refused,
        )
    return document, issues


async def _unresolved(ctx: NodeContext, document: dict[str, Any]) -> list[dict[str, Any]]:
    """One warning per ``${NAME}`` this node's apply would leave empty: neither its secret store nor
    its environment holds it (issue 38: an unset LLM key activated silently)."""
    env = dict(os.environ)
    store = ctx.extras.get("secret_store")
    if store is not None:
        try:
            resolved, _unopenable = await store.resolve()
        except CoordinationUnavailable:
            return []  # the store could not be asked: no guess at what it holds
        env.update(resolved)
    where = f"{ctx.node_id}'s secret store or environment"
    return [i.as_dict() for i in unresolved_issues(document, env, where=where)]


async def commit(
    ctx: NodeContext,
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
    admit_write(ctx)
    rec = reconciler(ctx)
    document, issues = _validated(ctx, document, summary, compat)
    warnings = [i.as_dict() for i in issues] + await _unresolved(ctx, document)
    try:
        if base is None:
            epoch, active_id, current = await active_of(rec)
        else:
            epoch, active_id, current = base
        if_match = header_text(request.headers.get("if-match", "")).strip('"')
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
        raise control_http_error(e) from None
    _log.info("config_revision_activated", revision_id=revision.revision_id, epoch=act.epoch, by=token_id)
    applied = await announce(ctx, rec, act)
    return JSONResponse(activated(act, applied, warnings=warnings, changes=len(changes)), 201)


async def edit_entity(ctx: NodeContext, request: Request, token_id: str, kind: str, name: str) -> Any:
    """CO-39: replace one entity of the active document; never creates (404 ``no_such_entity``)."""
    try:
        body = json.loads(await request.body())
    except ValueError as e:
        raise _error(422, "invalid_request", f"the body is not JSON: {e}", field="body") from None
    if not isinstance(body, dict):
        raise _error(422, "invalid_request", f"the body must be one {kind} (a mapping)", field="body")
    rec = reconciler(ctx)
    try:
        epoch, active_id, current = await active_of(rec)
    except (control.ControlUnavailable, control.UnknownRevision) as e:
        raise control_http_error(e) from None
    if current is None:
        raise api_error(503, "no_active_revision", "the fleet has no active company revision")
    document = copy.deepcopy(current)
    if not replace_entity(document, kind, name, body):
        raise _error(404, "no_such_entity", f"the active revision has no {kind} {name!r}")
    summary = summary_of(request, f"replace {kind} {name}")
    return await commit(
        ctx, request, document, token_id=token_id, summary=summary, base=(epoch, active_id, current)
    )
