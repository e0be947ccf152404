"""The generic signed webhook once it is admitted (CO-9; FL-122 claims dedupe): its JSON, its delivery.

Used by ``POST /webhooks/inbound/{source}`` (``services/ingress/api/routes/webhooks.py``) after the
body's signature was checked (:mod:`services.ingress.signatures`): :func:`parse_payload` reads the
body as a JSON object that can be forwarded, :func:`deliver` claims the delivery id once and
publishes the ``external_notification`` to the routed seat's inbox.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from shared import logs
from shared.runtime import NodeContext, api_error

from .triggers import TriggerPublisher, claim_delivery

__all__ = ["deliver", "parse_payload"]

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


def parse_payload(body: bytes) -> dict[str, Any]:
    """The body as a JSON object that can be forwarded (no lone surrogate, not nested too deeply).

    Raises:
        HTTPException: 400 ``invalid_json`` saying why.
    """
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
    return payload


async def deliver(
    ctx: NodeContext,
    publisher: TriggerPublisher,
    *,
    source: str,
    seat: str,
    text: str,
    payload: dict[str, Any],
    event: str,
    delivery: str,
) -> dict[str, Any]:
    """Claim ``delivery`` once and publish it to ``seat``'s inbox as ``webhook:<source>``.

    Returns:
        ``{"status": "duplicate", "delivery"}`` when the delivery was taken before (its claim, or
        the inbox stream's window when the claim failed open, FL-33); else ``{"status":
        "accepted", "seat", "event_id", "trace_id"}``. A failed publish releases the claim, so the
        sender's retry is not a duplicate.
    """
    claim = await claim_delivery(
        ctx, f"webhook.{source}.{hashlib.sha256(delivery.encode()).hexdigest()[:40]}"
    )
    if claim.duplicate:
        _log.info("webhook_duplicate", source=source, delivery=delivery)
        return {"status": "duplicate", "delivery": delivery}
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
        return {"status": "duplicate", "delivery": delivery}
    _log.info("webhook_accepted", source=source, seat=seat, delivery=delivery, event_id=published.event_id)
    return {
        "status": "accepted",
        "seat": seat,
        "event_id": published.event_id,
        "trace_id": published.trace_id,
    }
