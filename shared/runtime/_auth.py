"""Bearer-token auth with grants (CO-27). ``/health``, ``/ready`` and webhooks are not guarded.

Tokens are compared in constant time. A missing or unknown token answers 401; a token without the
route's grant answers 403. Errors are JSON ``{"error": code, "detail": ...}``. The caller is judged
before the request's shape (:func:`check_caller`, :func:`caller_refused`): a guarded route answers an
anonymous caller 401 whatever else is wrong with the request (issue 38).
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import JSONResponse

from shared.config import NodeConfig

__all__ = ["CHALLENGE", "caller_refused", "check_caller", "grant_of", "require_grant"]

_GRANTS: dict[Callable[..., Any], str] = {}
"""Each dependency :func:`require_grant` built → the grant it asks (read by the OpenAPI writer)."""


CHALLENGE = {"WWW-Authenticate": 'Bearer realm="crewlet"'}
"""The header every 401 carries (RFC 6750 §3): the scheme the API wants."""


def grant_of(call: Callable[..., Any] | None) -> str | None:
    """The grant ``call`` asks when it is a :func:`require_grant` dependency, else None."""
    return _GRANTS.get(call) if call is not None else None


def _token_grants(cfg: NodeConfig, presented: str) -> set[str] | None:
    found: set[str] | None = None
    for tok in cfg.api.auth.tokens:
        if hmac.compare_digest(tok.token.encode(), presented.encode()):
            found = set(tok.grants)
    return found


def require_grant(cfg: NodeConfig, grant: str) -> Callable[[Request], Awaitable[str]]:
    """Return a FastAPI dependency that admits a request holding ``grant``.

    Args:
        cfg: The node config whose ``api.auth.tokens`` are accepted.
        grant: The grant the route needs (e.g. ``state:read``).

    Returns:
        A dependency returning the token id.

    Raises:
        HTTPException: 401 ``unauthorized`` (no/unknown token, with the :data:`CHALLENGE` header)
            or 403 ``forbidden`` (grant missing).
    """

    async def dep(request: Request) -> str:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value:
            raise HTTPException(
                401,
                {"error": "unauthorized", "detail": "Authorization: Bearer <token> required"},
                headers=CHALLENGE,
            )
        grants = _token_grants(cfg, value.strip())
        if grants is None:
            raise HTTPException(401, {"error": "unauthorized", "detail": "unknown token"}, headers=CHALLENGE)
        if grant not in grants:
            raise HTTPException(403, {"error": "forbidden", "detail": f"token lacks the {grant} grant"})
        for tok in cfg.api.auth.tokens:
            if hmac.compare_digest(tok.token.encode(), value.strip().encode()):
                return tok.id
        return ""

    _GRANTS[dep] = grant
    return dep


def _guards(dependant: Any) -> list[Callable[[Request], Awaitable[Any]]]:
    """The :func:`require_grant` dependencies of ``dependant`` and its sub-dependencies."""
    found = [dependant.call] if grant_of(dependant.call) is not None else []
    for sub in dependant.dependencies:
        found += _guards(sub)
    return found


async def check_caller(dependant: Any, request: Request) -> None:
    """Run the grant checks of a route's ``dependant`` now, before anything else refuses the request.

    FastAPI runs a route's dependencies in order and parses a body before any of them; a refusal
    that comes first (an unknown query parameter, a body that is not JSON) would answer an
    anonymous caller 400 and describe the route. Issue 38: ``GET /work?stauts=x`` without a token
    answers 401, not a 400 listing every parameter.

    Raises:
        HTTPException: 401 ``unauthorized`` or 403 ``forbidden`` as :func:`require_grant` answers.
    """
    for guard in _guards(dependant):
        await guard(request)


async def caller_refused(request: Request) -> JSONResponse | None:
    """The 401/403 answer a request's route gives its caller, or None when the caller may ask.

    For the error renderers: a request refused for its shape is first refused for its caller when
    the route is guarded (see :func:`check_caller`).
    """
    dependant = getattr(request.scope.get("route"), "dependant", None)
    if dependant is None:
        return None
    try:
        await check_caller(dependant, request)
    except HTTPException as e:
        return JSONResponse(e.detail, status_code=e.status_code, headers=e.headers)
    return None
