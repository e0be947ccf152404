"""``POST /webhooks/inbound/{source}``: the generic signed webhook (CO-9; FL-122 claims dedupe).

Order of checks, so a refused request stores and publishes nothing:

1. draining → 503 + ``Retry-After`` (FL-129);
2. unknown source → 404 ``unknown_source``;
3. body over 5 MiB → 413 ``body_too_large`` (read with a cap, never buffered past it);
4. no configured or resolved secret → 503 ``webhook_secret_unset`` + ``Retry-After: 60``;
5. signature (``sha256=<hex HMAC-SHA256 of the raw body>``) missing or wrong → 401, compared in
   constant time over the raw bytes *before* parsing;
6. body not a JSON object (or nested too deeply, or holding lone surrogates) → 400 ``invalid_json``;
   no text at the entry's ``text_pointer`` (GitHub's ``ping``) → 200 ``ignored``, nothing published;
7. the delivery id (the entry's ``delivery_header``) is claimed once in the ``claims`` bucket: a
   repeat answers 200 ``{"status": "duplicate"}`` and publishes nothing. The claim fails open (FL-33):
   when the store cannot be asked the delivery is processed;
8. an ``external_notification{source: "webhook:<source>", text, body}`` is published to the routed
   seat's inbox with the delivery id as ``Nats-Msg-Id``; 202 ``{"status": "accepted", "event_id",
   "trace_id", "seat"}``. A failed publish releases the claim, so the sender's retry is not a duplicate.
   A publish the stream collapsed (a delivery processed again after its claim failed open) answers
   200 ``duplicate`` too: the earlier envelope is the one that runs.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from shared import logs, telemetry
from shared.runtime import NodeContext, api_error

from ...triggers import TriggerPublisher, admit_work, claim_delivery, json_pointer

__all__ = ["MAX_BODY_BYTES", "read_capped", "router", "signature_ok"]

MAX_BODY_BYTES = 5 * 1024 * 1024
"""The largest webhook body accepted, in bytes (CO-9)."""

_log = logs.get("ingress.webhook")

_MAY_HOLD_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
"""Where a parsed body can get a surrogate code point from: a ``\\uD800``..``\\uDFFF`` escape, or
the bytes of one (``json.loads`` decodes bytes with ``surrogatepass``). A body without either
cannot hold a lone surrogate, so the re-encode that detects one is skipped (one pass over the raw
bytes instead of serialising the whole payload on every delivery)."""


def _may_hold_surrogate(body: bytes) -> bool:
    """False only for a UTF-8 body with no surrogate escape or bytes (UTF-16/32 bodies: True)."""
    if json.detect_encoding(body) not in ("utf-8", "utf-8-sig"):
        return True
    return _MAY_HOLD_SURROGATE.search(body) is not None


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


def router(ctx: NodeContext, publisher: TriggerPublisher) -> APIRouter:
    """Build the webhook route over ``ctx`` publishing through ``publisher``."""
    r = APIRouter(tags=["webhooks"])

    def source_label(kw: dict[str, Any]) -> str:  # FL-6: a closed label set (configured sources)
        known = ctx.org is not None and ctx.org.webhook(kw["source"]) is not None
        return f"webhook:{kw['source'] if known else 'unknown'}"

    @r.post(
        "/webhooks/inbound/{source}",
        status_code=202,
        responses={
            200: {
                "description": "Taken before, ignored, or a ping: nothing new published",
                "content": {"application/json": {"schema": {"type": "object"}}},
            }
        },
    )
    @telemetry.count_webhook(source_label)
    async def inbound(source: str, request: Request) -> Any:
        admit_work(ctx)
        hook = ctx.org.webhook(source)
        if hook is None:
            raise api_error(404, "unknown_source", f"no integrations.webhooks entry has source {source!r}")
        body = await read_capped(request, MAX_BODY_BYTES)
        if body is None:
            raise api_error(413, "body_too_large", f"the body is over {MAX_BODY_BYTES} bytes (5 MiB)")
        if not hook.secret:
            raise api_error(
                503,
                "webhook_secret_unset",
                f"integrations.webhooks[{source}].secret is not configured or its variable is unset",
                headers={"Retry-After": "60"},
            )
        if not signature_ok(hook.secret, body, request.headers.get(hook.signature_header)):
            _log.warning("webhook_signature_rejected", source=source)
            raise api_error(
                401, "bad_signature", f"{hook.signature_header} is missing or does not match the body"
            )
        try:
            payload = json.loads(body)
            if _may_hold_surrogate(body):  # lone surrogates cannot be forwarded
                json.dumps(payload, ensure_ascii=False).encode("utf-8")
        except (UnicodeDecodeError, UnicodeEncodeError, ValueError) as e:
            raise api_error(400, "invalid_json", f"body: not JSON that can be forwarded ({e})") from None
        except RecursionError:
            raise api_error(400, "invalid_json", "body: JSON nested too deeply") from None
        if not isinstance(payload, dict):
            raise api_error(400, "invalid_json", "body: a JSON object is required")
        pointer_value = json_pointer(payload, hook.text_pointer)
        if not isinstance(pointer_value, str) or not pointer_value.strip():
            # nothing for a seat to work on (GitHub's ping, a push to an issues-only route): say so,
            # claim and publish nothing
            _log.info("webhook_ignored", source=source, pointer=hook.text_pointer)
            return JSONResponse(
                {"status": "ignored", "reason": f"the body has no text at {hook.text_pointer}"},
                status_code=200,
            )
        seat = ctx.org.webhook_route(source)
        if seat is None:
            raise api_error(404, "unknown_seat", f"route_to of webhook {source!r} resolves to no agent seat")
        delivery = request.headers.get(hook.delivery_header, "").strip()
        if not delivery:
            raise api_error(400, "missing_delivery_id", f"header {hook.delivery_header} is required")
        claim = await claim_delivery(
            ctx, f"webhook.{source}.{hashlib.sha256(delivery.encode()).hexdigest()[:40]}"
        )
        if claim.duplicate:
            _log.info("webhook_duplicate", source=source, delivery=delivery)
            return JSONResponse({"status": "duplicate", "delivery": delivery}, status_code=200)
        text = pointer_value
        event = request.headers.get("x-github-event", "")
        try:
            published = await publisher.publish(
                seat,
                type="external_notification",
                source=f"webhook:{source}",
                payload={
                    "source": f"webhook:{source}",
                    "text": text,
                    "body": payload,
                    "event": event,
                    "delivery": delivery,
                },
                msg_id=f"webhook:{source}:{delivery}",
            )
        except Exception:
            await claim.release(ctx)
            raise
        if published.duplicate:  # the claim failed open (FL-33); the inbox stream's window caught it
            _log.info("webhook_duplicate", source=source, delivery=delivery)
            return JSONResponse({"status": "duplicate", "delivery": delivery}, status_code=200)
        _log.info(
            "webhook_accepted", source=source, seat=seat, delivery=delivery, event_id=published.event_id
        )
        return {
            "status": "accepted",
            "seat": seat,
            "event_id": published.event_id,
            "trace_id": published.trace_id,
        }

    return r
