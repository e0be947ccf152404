"""Bearer-token auth with grants (CO-27). ``/health``, ``/ready`` and webhooks are not guarded.

Tokens are compared in constant time. A missing or unknown token answers 401; a token without the
route's grant answers 403. Errors are JSON ``{"error": code, "detail": ...}``.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import HTTPException, Request

from shared.config import NodeConfig

__all__ = ["CHALLENGE", "grant_of", "require_grant"]

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
