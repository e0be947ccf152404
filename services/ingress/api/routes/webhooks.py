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
   an event that would not fit one broker message (the body re-encoded, e.g. ``1e5`` numbers that
   serialise as ``100000.0``) → 413 ``body_too_large`` naming the limit (issue 38); the text the
   seat reads is cut to 32 000 characters, as an API message's;
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

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from shared import logs, telemetry
from shared.runtime import NodeContext, api_error

from ...signatures import MAX_BODY_BYTES, read_capped, read_signed, signature_ok
from ...triggers import TriggerPublisher, admit_work, json_pointer
from ...webhooks import deliver, parse_payload
from ._common import TAKEN_BEFORE, add

__all__ = ["MAX_BODY_BYTES", "read_capped", "router", "signature_ok"]

_log = logs.get("ingress.webhook")


class WebhookRoutes:
    """The generic signed webhook's endpoint, publishing through the ingress trigger publisher."""

    def __init__(self, ctx: NodeContext, publisher: TriggerPublisher) -> None:
        self.ctx = ctx
        self.publisher = publisher

    def source_label(self, kw: dict[str, Any]) -> str:
        """The ``source`` label of the webhook counter: a closed set, the configured sources (FL-6)."""
        known = self.ctx.org is not None and self.ctx.org.webhook(kw["source"]) is not None
        return f"webhook:{kw['source'] if known else 'unknown'}"

    async def inbound(self, source: str, request: Request) -> Any:
        ctx = self.ctx
        admit_work(ctx)
        hook = ctx.org.webhook(source)
        if hook is None:
            raise api_error(404, "unknown_source", f"no integrations.webhooks entry has source {source!r}")
        body = await read_signed(
            request,
            hook.secret,
            hook.signature_header,
            secret_name=f"integrations.webhooks[{source}].secret",
            source=source,
            log=_log,
        )
        payload = parse_payload(body)
        text = json_pointer(payload, hook.text_pointer)
        if not isinstance(text, str) or not text.strip():
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
        answer = await deliver(
            ctx,
            self.publisher,
            source=source,
            seat=seat,
            text=text,
            payload=payload,
            event=request.headers.get("x-github-event", ""),
            delivery=delivery,
        )
        return JSONResponse(answer, status_code=200) if answer["status"] == "duplicate" else answer


def router(ctx: NodeContext, publisher: TriggerPublisher) -> APIRouter:
    """Build the webhook route over ``ctx`` publishing through ``publisher``."""
    r = APIRouter(tags=["webhooks"])
    h = WebhookRoutes(ctx, publisher)
    inbound = telemetry.count_webhook(h.source_label)(h.inbound)
    add(r, "/webhooks/inbound/{source}", inbound, methods=["POST"], status_code=202, responses=TAKEN_BEFORE)
    return r
