"""What every ingress route module shares (issue 26): registration, estate refusals, reads of rows.

Every route module follows one pattern: a small class per resource holds the node's context and
its bound methods are the endpoints; the module's ``router(ctx, ...)`` only builds the
:class:`~fastapi.APIRouter` and registers those methods with :func:`add`, in the order the paths
must be matched. A handler parses, calls one function of the role's service layer
(``services/ingress/*.py``, or the estate router) and maps errors.

- :func:`add` registers one endpoint; a parameter whose dependency is built per node (the caller's
  token id from :func:`~shared.runtime.require_grant`) is declared ``= GRANTED`` and bound here.
- :func:`grants` builds a module's read dependencies and its ``given`` write dependency.
- :class:`EstateResource` is the base of the estate routes' resources: :meth:`~EstateResource.read`
  and :meth:`~EstateResource.write` run one estate call and shape its answer.
- :func:`estate_call` runs one estate call and maps its failure with :func:`estate_http_error`;
  :func:`read_answer` / :func:`write_answer` shape the answer of a read / write (CO-27, ES-15).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from fastapi import APIRouter, Depends, HTTPException

from shared import estate
from shared.router import EstateRouter, NobodyAnswered, RouterError, router_of
from shared.runtime import NodeContext, api_error, require_grant

__all__ = [
    "GRANTED",
    "EstateResource",
    "MAX_OFFSET",
    "TAKEN_BEFORE",
    "add",
    "grants",
    "levels",
    "operator",
    "estate_call",
    "estate_http_error",
    "read_answer",
    "read_level_of",
    "write_answer",
]

T = TypeVar("T")

MAX_OFFSET = 1_000_000_000
"""The largest ``offset`` a listing accepts (SQLite integers are 64-bit; a bigger one is a 400 naming
``query.offset``, never a 503). ``if_match`` is bounded by :data:`~shared.runtime.MAX_VERSION`."""


TAKEN_BEFORE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Taken before, ignored, or a ping: nothing new published",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
}
"""The ``200`` a webhook route documents beside its ``202`` (``/webhooks/inbound/{source}``, ``/webhooks/github``)."""


def _unbound() -> str:
    raise RuntimeError("a GRANTED parameter was not bound at registration (routes._common.add)")


GRANTED: Any = Depends(_unbound)
"""The default of an endpoint parameter whose dependency :func:`add` binds per node (``given=``)."""


def _bind(endpoint: Callable[..., Awaitable[Any]], given: dict[str, Any]) -> Callable[..., Awaitable[Any]]:
    """``endpoint`` with the defaults of the parameters named in ``given`` replaced (its name, its
    docstring and so its operation id and description unchanged)."""
    sig = inspect.signature(endpoint, eval_str=True)
    missing = set(given) - set(sig.parameters)
    if missing:
        raise TypeError(f"{endpoint.__name__} has no parameter {', '.join(sorted(missing))}")
    params = [p.replace(default=given[p.name]) if p.name in given else p for p in sig.parameters.values()]

    @functools.wraps(endpoint)
    async def bound(*args: Any, **kwargs: Any) -> Any:
        return await endpoint(*args, **kwargs)

    setattr(bound, "__signature__", sig.replace(parameters=params))  # noqa: B010 - FastAPI reads it
    return bound


def add(
    r: APIRouter,
    path: str,
    endpoint: Callable[..., Awaitable[Any]],
    *,
    methods: list[str],
    given: dict[str, Any] | None = None,
    **options: Any,
) -> None:
    """Register ``endpoint`` (a resource's bound method) on ``r`` at ``path`` for ``methods``.

    Args:
        r: The route module's router.
        path: The path (FastAPI syntax, e.g. ``/work/{key}``).
        endpoint: The handler; its name is the route's name and operation id, as with ``@r.get``.
        methods: The HTTP methods.
        given: Parameter name → its dependency (``Depends(require_grant(cfg, grant))``), for the
            parameters the handler declares ``= GRANTED``.
        options: ``dependencies``, ``status_code``, ``responses``, ... as ``APIRouter.add_api_route``.
    """
    r.add_api_route(path, _bind(endpoint, given) if given else endpoint, methods=methods, **options)


def estate_http_error(e: Exception) -> HTTPException:
    """Return the HTTP error of an estate/router failure (CO-27's ``{"error", "detail"}`` body).

    404 unknown object, 400 a bad field (named), 409 stale ``if_match`` (with the current version) or
    ``op_reused``, 413 too large, 503 refusals, ``unknown`` outcomes and "nobody answered" (listing
    each data node's reply).

    Raises:
        Exception: ``e`` itself when it is neither an estate nor a router error.
    """
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


async def estate_call(ctx: NodeContext, call: Callable[[EstateRouter], Awaitable[T]]) -> T:
    """Run ``call`` on this node's estate router; an estate or router failure becomes its HTTP error.

    Raises:
        HTTPException: :func:`estate_http_error` of the failure.
    """
    try:
        return await call(router_of(ctx))
    except (estate.EstateError, RouterError) as e:
        raise estate_http_error(e) from None


def read_answer(res: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """The answer of an estate read ``{"data", "meta"}``: the data's fields (or the data under
    ``name``) beside ``"read"``, what the read saw (ES-25)."""
    if name is not None:
        return {name: res["data"], "read": res["meta"]}
    return {**res["data"], "read": res["meta"]}


def write_answer(res: dict[str, Any], name: str) -> dict[str, Any]:
    """The answer of an estate write: its outcome, ``op_id`` and ``position`` (ES-15), the written
    object under ``name``."""
    out = {k: v for k, v in res.items() if k != "object"}
    out[name] = res.get("object")
    return out


def grants(
    ctx: NodeContext, read: str, write: str, *, token: str = "token"
) -> tuple[list[Any], dict[str, Any]]:
    """``(dependencies of a read route, given of a write route)`` for the grants ``read`` and ``write``.

    The write's dependency answers the caller's token id into the handler's ``token`` parameter
    (declared ``= GRANTED``); the read's guards the route only.
    """
    return [Depends(require_grant(ctx.cfg, read))], {token: Depends(require_grant(ctx.cfg, write))}


def operator(token_id: str) -> dict[str, str]:
    """The author fields of an operator's estate write (``operator:<token id>``)."""
    return {"author": f"operator:{token_id}", "author_kind": "operator"}


def levels(read_level: str, min_position: str | None) -> dict[str, Any]:
    """The read level (default ``stale``) and ``min_position`` of an estate read (ES-25, ES-27)."""
    return {"read_level": read_level_of(read_level), "min_position": min_position}


class EstateResource:
    """The base of a resource whose endpoints call this node's estate router."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx

    async def read(
        self, call: Callable[[EstateRouter], Awaitable[dict[str, Any]]], name: str | None = None
    ) -> dict[str, Any]:
        """:func:`read_answer` of the estate read ``call`` (failures mapped by :func:`estate_call`)."""
        return read_answer(await estate_call(self.ctx, call), name)

    async def write(
        self, call: Callable[[EstateRouter], Awaitable[dict[str, Any]]], name: str
    ) -> dict[str, Any]:
        """:func:`write_answer` of the estate write ``call`` (failures mapped by :func:`estate_call`)."""
        return write_answer(await estate_call(self.ctx, call), name)
