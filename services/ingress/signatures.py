"""What a signed webhook needs before it is read (CO-9, CO-35): the capped body and its signature.

Used by the generic webhook route (``/webhooks/inbound/{source}``) and GitHub's
(``/webhooks/github``): :func:`read_capped` reads at most :data:`MAX_BODY_BYTES` without buffering
past them, :func:`signature_ok` compares ``sha256=<hex HMAC-SHA256 of the raw body>`` in constant
time over the raw bytes, before any parsing; :func:`read_signed` does both with the refusals both
routes answer (413, 503 + ``Retry-After``, 401).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from fastapi import Request

from shared.runtime import api_error

__all__ = ["MAX_BODY_BYTES", "read_capped", "read_signed", "signature_ok"]

MAX_BODY_BYTES = 5 * 1024 * 1024
"""The largest webhook body accepted, in bytes (CO-9)."""


def signature_ok(secret: str, body: bytes, header: str | None) -> bool:
    """True when ``header`` is ``sha256=`` + hex(HMAC-SHA256(secret, body)), compared in constant time."""
    if not header or not header.startswith("sha256="):
        return False
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.strip().lower().encode())


async def read_capped(request: Request, limit: int) -> bytes | None:
    """Return the request body, or None once it is over ``limit`` bytes (declared or read; 413 upstream)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def read_signed(
    request: Request, secret: str | None, header: str, *, secret_name: str, source: str, log: Any
) -> bytes:
    """Return the raw body of a webhook signed with ``secret`` in ``header``, checked in this order.

    Args:
        request: The webhook request.
        secret: The resolved secret (None or empty when not configured or its variable is unset).
        header: The signature header, as the refusal names it (e.g. ``X-Hub-Signature-256``).
        secret_name: Where the secret is configured, as the refusal names it.
        source: The ``source`` of the ``webhook_signature_rejected`` log line.
        log: The route's logger.

    Raises:
        HTTPException: 413 ``body_too_large`` over :data:`MAX_BODY_BYTES`; 503
            ``webhook_secret_unset`` + ``Retry-After: 60``; 401 ``bad_signature``.
    """
    body = await read_capped(request, MAX_BODY_BYTES)
    if body is None:
        raise api_error(413, "body_too_large", f"the body is over {MAX_BODY_BYTES} bytes (5 MiB)")
    if not secret:
        raise api_error(
            503,
            "webhook_secret_unset",
            f"{secret_name} is not configured or its variable is unset",
            headers={"Retry-After": "60"},
        )
    if not signature_ok(secret, body, request.headers.get(header)):
        log.warning("webhook_signature_rejected", source=source)
        raise api_error(401, "bad_signature", f"{header} is missing or does not match the body")
    return body
