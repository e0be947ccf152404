"""The generic signed webhook once it is admitted (CO-9; FL-122 claims dedupe): its JSON, its delivery.

Used by ``POST /webhooks/inbound/{source}`` (``services/ingress/api/routes/webhooks.py``) after the
body's signature was checked (:mod:`services.ingress.signatures`): :func:`parse_payload` reads the
body as a JSON object that can be forwarded, :func:`deliver` claims the delivery id once and
publishes the ``external_notification`` to the routed seat's inbox.

What is published is bounded (issue 38): the text the seat's model reads is at most
:data:`TEXT_LIMIT` (32 000) characters, as an API message's (a longer one is cut, with a note
saying so; the whole body still rides in ``payload.body``), and the event must fit one broker
message (:data:`EVENT_LIMIT`): a body whose event would not is refused 413 ``body_too_large``
naming the limit before anything is claimed or published — it answered 500 when the broker
refused the publish.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from shared import logs
from shared.broker import MIN_MAX_PAYLOAD
from shared.runtime import NodeContext, api_error

from .triggers import TriggerPublisher, claim_delivery

__all__ = ["EVENT_LIMIT", "TEXT_LIMIT", "deliver", "fit_text", "parse_payload"]

TEXT_LIMIT = 32_000
"""Most characters of a webhook's text handed to the seat (an API message's limit, CO-8)."""
EVENT_LIMIT = MIN_MAX_PAYLOAD - 64 * 1024
"""Most bytes of the published payload: one broker message (8 MiB, FL-3) less room for the
envelope's other fields and headers."""

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


def fit_text(text: str) -> str:
    """``text`` within :data:`TEXT_LIMIT` characters; a cut one ends with a note saying so.

    Args:
        text: The text at the webhook's ``text_pointer``.

    Returns:
        ``text`` itself when short enough, else its start and ``[cut: the webhook text is N
        characters; the whole body is in the event's payload.body]``, 32 000 characters in all.
    """
    if len(text) <= TEXT_LIMIT:
        return text
    note = f"\n\n[cut: the webhook text is {len(text)} characters; the whole body is in the event's payload.body]"
    return text[: TEXT_LIMIT - len(note)] + note


def _check_fits(payload: dict[str, Any]) -> None:
    """Refuse a payload that would not fit one broker message.

    Raises:
        HTTPException: 413 ``body_too_large`` naming the size and :data:`EVENT_LIMIT`.
    """
    size = len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())
    if size > EVENT_LIMIT:
        raise api_error(
            413,
            "body_too_large",
            f"the event this body makes is {size} bytes as JSON; one event holds at most {EVENT_LIMIT} "
            "bytes (a broker message is 8 MiB): send a smaller body",
        )


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

    ``text`` is cut to :data:`TEXT_LIMIT` characters (:func:`fit_text`).

    Returns:
        ``{"status": "duplicate", "delivery"}`` when the delivery was taken before (its claim, or
        the inbox stream's window when the claim failed open, FL-33); else ``{"status":
        "accepted", "seat", "event_id", "trace_id"}``. A failed publish releases the claim, so the
        sender's retry is not a duplicate.

    Raises:
        HTTPException: 413 ``body_too_large`` when the event would not fit one broker message
            (nothing claimed or published).
    """
    event_payload = {
        "source": f"webhook:{source}",
        "text": fit_text(text),
        "body": payload,
        "event": event,
        "delivery": delivery,
    }
    _check_fits(event_payload)
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
            payload=event_payload,
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
