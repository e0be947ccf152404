"""Secret store routes (CO-27, CO-40, FL-151): write through a live node, read names and metadata.

- ``PUT /secrets/{name}`` (``secrets:write``): body JSON ``{"value": "..."}`` or raw ``text/plain``
  (UTF-8, taken as is); answers 200 ``{name, key_id, updated_at}``. The write lands on the
  coordination KV, so every node resolves it at its next activation epoch (FL-151).
- ``DELETE /secrets/{name}`` (``secrets:write``): 204; 404 ``unknown_secret`` when it is not set.
- ``GET /secrets`` (``secrets:read``): ``{"secrets": [{name, key_id, updated_at, updated_by}]}``.
- ``GET /secrets/{name}`` (``secrets:read``): that metadata; with ``?reveal=true`` also ``value`` —
  the only answer that carries a value (CO-27), logged ``secret_revealed`` (name and token id).
- ``POST /secrets/rekey`` (``secrets:write``): re-seal every value under the active key (CO-40);
  ``{active_key_id, resealed, current, unopenable}`` (names only).

A bad name answers 422 ``invalid_secret_name`` naming the pattern; a value over 64 KiB 413
``too_large``; a value that does not open here 409 ``secret_unopenable`` with the remedy; an
unreachable store 503 ``secret_store_unavailable``. No answer but a reveal holds a value, and no
log line does.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from starlette.responses import Response

from shared import logs
from shared.coordination import CoordinationUnavailable
from shared.runtime import NodeContext, api_error, require_grant
from shared.secrets import (
    InvalidSecretName,
    SecretInfo,
    SecretStore,
    SecretTooLarge,
    Unopenable,
    validate_name,
)

from ._common import GRANTED, add

__all__ = ["router"]

_VALUE_BODY = {
    "requestBody": {
        "required": True,
        "description": 'The value: JSON {"value": "..."} or the raw text/plain body (UTF-8, not empty)',
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {"value": {"type": "string", "minLength": 1}},
                    "required": ["value"],
                    "additionalProperties": False,
                }
            },
            "text/plain": {"schema": {"type": "string", "minLength": 1}},
        },
    }
}

_log = logs.get("ingress.secrets")


def _meta(info: SecretInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "key_id": info.key_id,
        "updated_at": info.updated_at,
        "updated_by": info.updated_by,
    }


def _http_error(e: Exception) -> HTTPException:
    """Map a secrets or coordination failure to its JSON answer (never a value in it)."""
    if isinstance(e, InvalidSecretName):
        return api_error(422, "invalid_secret_name", str(e), field="name")
    if isinstance(e, SecretTooLarge):
        return api_error(
            413, "too_large", {"name": e.name, "size": e.size, "limit": e.limit, "message": str(e)}
        )
    if isinstance(e, Unopenable):
        return api_error(
            409, "secret_unopenable", {"reason": e.reason, "key_id": e.key_id, "message": str(e)}
        )
    if isinstance(e, CoordinationUnavailable):
        return api_error(503, "secret_store_unavailable", str(e), headers={"Retry-After": "5"})
    raise e


def _name(name: str) -> str:
    try:
        return validate_name(name)
    except InvalidSecretName as e:
        raise _http_error(e) from None


async def _value_of(request: Request) -> str:
    """The value a ``PUT`` carries: JSON ``{"value": str}`` (``application/json``) or the raw body as
    UTF-8 text (``text/plain``).

    Raises:
        HTTPException: 415 ``unsupported_media_type`` naming ``Content-Type`` for any other type or
            none (issue 17: a form-encoded or untyped JSON body was stored as the secret's text,
            braces and all); 400 for a body that is not what its type says.
    """
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype not in ("application/json", "text/plain"):
        raise api_error(
            415,
            "unsupported_media_type",
            {
                "field": "Content-Type",
                "message": f'send application/json {{"value": ...}} or text/plain, not {ctype or "no type"}',
            },
        )
    body = await request.body()
    if ctype == "application/json":
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            raise api_error(
                400,
                "invalid_request",
                [{"path": "body", "type": "json_invalid", "message": "the body is not JSON"}],
            ) from None
        if not isinstance(doc, dict) or set(doc) != {"value"} or not isinstance(doc["value"], str):
            raise api_error(
                400,
                "invalid_request",
                [{"path": "value", "type": "invalid", "message": 'the body must be {"value": "<string>"}'}],
            )
        return doc["value"]
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise api_error(
            400,
            "invalid_request",
            [{"path": "body", "type": "invalid", "message": "a text/plain value must be UTF-8"}],
        ) from None


class SecretRoutes:
    """The secret store's endpoints over the node's :class:`~shared.secrets.SecretStore`."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    def store(self) -> SecretStore:
        """The node's secret store (``ctx.extras["secret_store"]``); 503 ``not_ready`` before it is open."""
        s = self.ctx.extras.get("secret_store")
        if not isinstance(s, SecretStore):
            raise api_error(
                503, "not_ready", "the node's secret store is not open yet", headers={"Retry-After": "5"}
            )
        return s

    async def list_secrets(self, token_id: str = GRANTED) -> dict[str, Any]:
        try:
            infos = await self.store().list()
        except CoordinationUnavailable as e:
            raise _http_error(e) from None
        return {"secrets": [_meta(i) for i in infos]}

    async def rekey(self, token_id: str = GRANTED) -> dict[str, Any]:
        s = self.store()
        try:
            report = await s.rekey_report()
        except CoordinationUnavailable as e:
            raise _http_error(e) from None
        _log.info("secrets_rekey_requested", by=f"operator:{token_id}", resealed=len(report.resealed))
        return {
            "active_key_id": s.keyring.active_key_id,
            "resealed": report.resealed,
            "current": report.current,
            "unopenable": report.unopenable,
        }

    async def put_secret(self, name: str, request: Request, token_id: str = GRANTED) -> dict[str, Any]:
        name = _name(name)
        value = await _value_of(request)
        if not value:
            raise api_error(
                422,
                "empty_secret",
                f"{name}: an empty value; to remove a secret use DELETE /secrets/{name} (crewlet secrets unset)",
                field="value",
            )
        s = self.store()
        try:
            await s.set(name, value, by=f"operator:{token_id}")
            info = await s.info(name)
        except (SecretTooLarge, CoordinationUnavailable) as e:
            raise _http_error(e) from None
        return {
            "name": name,
            "key_id": info.key_id if info is not None else s.keyring.active_key_id,
            "updated_at": info.updated_at if info is not None else "",
        }

    async def delete_secret(self, name: str, token_id: str = GRANTED) -> Response:
        name = _name(name)
        try:
            present = await self.store().unset(name)
        except CoordinationUnavailable as e:
            raise _http_error(e) from None
        if not present:
            raise api_error(404, "unknown_secret", f"no secret named {name}")
        return Response(status_code=204)

    async def get_secret(self, name: str, reveal: bool = False, token_id: str = GRANTED) -> dict[str, Any]:
        name = _name(name)
        s = self.store()
        try:
            info = await s.info(name)
            if info is None:
                raise api_error(404, "unknown_secret", f"no secret named {name}")
            out = _meta(info)
            if reveal:
                value = await s.reveal(name)
                if value is None:  # unset between the two reads
                    raise api_error(404, "unknown_secret", f"no secret named {name}")
                _log.info("secret_revealed", name=name, by=f"operator:{token_id}")
                out["value"] = value
        except (Unopenable, CoordinationUnavailable) as e:
            raise _http_error(e) from None
        return out


def router(ctx: NodeContext) -> APIRouter:
    """Build the secret store routes over the node's :class:`~shared.secrets.SecretStore`."""
    r = APIRouter(tags=["secrets"])
    read = {"token_id": Depends(require_grant(ctx.cfg, "secrets:read"))}
    write = {"token_id": Depends(require_grant(ctx.cfg, "secrets:write"))}
    h = SecretRoutes(ctx)
    add(r, "/secrets", h.list_secrets, methods=["GET"], given=read)
    add(r, "/secrets/rekey", h.rekey, methods=["POST"], given=write)
    add(r, "/secrets/{name}", h.put_secret, methods=["PUT"], given=write, openapi_extra=_VALUE_BODY)
    add(r, "/secrets/{name}", h.delete_secret, methods=["DELETE"], given=write, status_code=204)
    add(r, "/secrets/{name}", h.get_secret, methods=["GET"], given=read)
    return r
