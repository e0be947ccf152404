"""Publishing triggers into seat inboxes (CO-6 envelopes, CO-8, CO-9).

Every trigger is one CO-6 envelope published to ``crewlet.agent.<handle>.inbox`` through the bus
seam, with a message id for JetStream's duplicate window and the W3C trace context of the span
that received it, so the seat's turn joins the same trace (CO-21).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

from shared import logs
from shared.coordination import CoordinationUnavailable, OutcomeUnknown, RevisionConflict
from shared.runtime import NodeContext, api_error

__all__ = ["Claim", "Published", "TriggerPublisher", "admit_work", "claim_delivery", "json_pointer"]

_tracer = trace.get_tracer("crewlet.ingress")
_log = logs.get("ingress.claims")


@dataclass
class Claim:
    """One inbound delivery's dedupe claim in the ``claims`` slot (FL-33, FL-122).

    Attributes:
        key: The claim key.
        duplicate: True when another delivery with this id already claimed it: process nothing.
        held: True when this request holds the claim (False also when the store could not be
            asked: the claim fails open, FL-33, and the delivery is processed).
    """

    key: str
    duplicate: bool
    held: bool

    async def release(self, ctx: NodeContext) -> None:
        """Give the claim back (the processing failed: the sender's retry must not be a duplicate)."""
        if self.held and ctx.coord is not None:
            with contextlib.suppress(CoordinationUnavailable):  # it ages out with the bucket (5 min)
                await ctx.coord.delete("claims", self.key)


CLAIM_SETTLE = 2.0
"""Seconds a claim whose create met an unsettled bucket keeps re-reading before it fails open."""


async def _claim_owner(ctx: NodeContext, key: str) -> str | None:
    """The nonce of whoever holds ``key`` in ``claims``, or None when absent or unknown."""
    assert ctx.coord is not None
    try:
        entry = await ctx.coord.get("claims", key)
    except CoordinationUnavailable:
        return None
    if entry is None:
        return None
    try:
        return str(json.loads(entry.value).get("nonce", ""))
    except (ValueError, AttributeError):
        return ""


async def claim_delivery(ctx: NodeContext, key: str) -> Claim:
    """Claim an inbound delivery id once, fleet-wide (FL-122); fails open when unknown (FL-33).

    A create whose outcome is unknown may have landed (infra-facts §3): it is re-read before
    deciding duplicate or not. A create refused because the bucket's leader holds an uncommitted
    proposal (10164, reported as "unavailable") is what a *concurrent* claim of the same id at
    another ingress node looks like: the key is re-read for up to :data:`CLAIM_SETTLE` seconds,
    and the create tried again, before failing open — so the same delivery posted to two nodes at
    once is accepted once (seen in CI: both nodes accepted it while the first create was in flight).
    """
    if ctx.coord is None:
        return Claim(key, duplicate=False, held=False)
    nonce = uuid.uuid4().hex
    value = json.dumps({"node": ctx.node_id, "nonce": nonce}).encode()
    deadline = time.monotonic() + CLAIM_SETTLE
    delay = 0.05
    while True:
        try:
            await ctx.coord.create("claims", key, value)
            return Claim(key, duplicate=False, held=True)
        except RevisionConflict:
            return Claim(key, duplicate=True, held=False)
        except OutcomeUnknown:
            owner = await _claim_owner(ctx, key)
            if owner is not None and owner != nonce:
                return Claim(key, duplicate=True, held=False)
            return Claim(key, duplicate=False, held=owner == nonce)
        except CoordinationUnavailable as e:
            owner = await _claim_owner(ctx, key)
            if owner is not None:  # someone's create landed meanwhile (or ours did)
                return Claim(key, duplicate=owner != nonce, held=owner == nonce)
            if time.monotonic() + delay > deadline:
                _log.warning("delivery_claim_unknown", key=key, error=str(e))
                return Claim(key, duplicate=False, held=False)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.4)


def admit_work(ctx: NodeContext) -> None:
    """Refuse a request that would start work while this node cannot take it.

    Raises:
        HTTPException: 503 ``draining`` with ``Retry-After`` during a drain (FL-129), so the sender
            tries another node; 503 ``no_active_revision`` before a company is applied (CO-4);
            503 ``shed``/``stuck`` while the node cannot apply the fleet's epoch (FL-113).
    """
    if ctx.draining:
        raise api_error(
            503, "draining", "this node is draining; retry on another node", headers={"Retry-After": "5"}
        )
    if ctx.org is None:
        raise api_error(
            503, "no_active_revision", "the node has no active company", headers={"Retry-After": "5"}
        )
    if ctx.shedding:  # FL-113: this node cannot apply the fleet's epoch; a peer can take the work
        raise api_error(
            503,
            ctx.posture,
            f"this node's config posture is {ctx.posture}: retry on another node",
            headers={"Retry-After": "5"},
        )


def json_pointer(doc: Any, pointer: str) -> Any:
    """Resolve an RFC 6901 JSON Pointer in ``doc``; None when any step is missing.

    Args:
        doc: Parsed JSON.
        pointer: ``""`` (the whole document) or ``/a/0/b`` with ``~1`` for ``/`` and ``~0`` for ``~``.
    """
    if pointer in ("", "/"):
        return doc
    cur = doc
    for raw in pointer.lstrip("/").split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(cur, dict):
            if part not in cur:
                return None
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return None
    return cur


@dataclass(frozen=True)
class Published:
    """What a publish answered.

    Attributes:
        event_id: The envelope id (a UUID string).
        trace_id: Its trace id (32 hex).
        duplicate: True when the inbox stream collapsed it onto an earlier publish with the same
            message id (JetStream's duplicate window): nothing new was stored and ``event_id``
            will never run — the earlier publish's envelope does. A delivery whose dedupe claim
            failed open (FL-33) and was processed again lands here.
    """

    event_id: str
    trace_id: str
    duplicate: bool = False


PublishFn = Callable[[str, dict[str, Any], str, dict[str, str]], Awaitable[bool | None]]
"""``publish(handle, envelope, msg_id, headers)``: put one envelope on a seat's inbox; True when the
stream collapsed it onto an earlier publish with the same ``msg_id`` (a duplicate)."""


class TriggerPublisher:
    """Builds CO-6 envelopes and publishes them to seat inboxes.

    Args:
        publish: The bus call that puts an envelope on a seat's inbox.
        inject: Writes the current trace context into a header dict (W3C ``traceparent``).
    """

    def __init__(self, publish: PublishFn, inject: Callable[[dict[str, str]], None]) -> None:
        self._publish = publish
        self._inject = inject

    async def publish(
        self,
        handle: str,
        *,
        type: str,
        source: str,
        payload: dict[str, Any],
        msg_id: str,
        extra: dict[str, Any] | None = None,
    ) -> Published:
        """Publish one trigger to ``handle``'s inbox inside a ``webhook.receive`` span.

        Args:
            handle: The seat.
            type: The CO-6 trigger type (``external_notification``, ``task_assigned``).
            source: The trigger source (``api``, ``webhook:<name>``, ``work``).
            payload: The envelope's payload object.
            msg_id: The JetStream message id (a retried publish within the duplicate window lands once).
            extra: Additional top-level envelope fields (``work_item``, ``parent_turn_id``, ...).

        Returns:
            The envelope id and trace id, and whether the stream collapsed it as a duplicate.

        Raises:
            Whatever the bus raises when the publish is refused or its outcome is unknown.
        """
        event_id = str(uuid.uuid4())
        with _tracer.start_as_current_span(
            "webhook.receive", attributes={"crewlet.seat": handle, "crewlet.trigger.source": source}
        ) as span:
            sc = span.get_span_context()
            trace_id = format(sc.trace_id, "032x") if sc.is_valid else uuid.uuid4().hex
            span_id = format(sc.span_id, "016x") if sc.is_valid else ""
            envelope: dict[str, Any] = {
                "id": event_id,
                "type": type,
                "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                "source": source,
                "payload": payload,
                "trace_id": trace_id,
                "span_id": span_id,
                "parent_span_id": "",
                "delegation_depth": 0,
                "parent_turn_id": None,
                "delegation_chain": [],
                **(extra or {}),
            }
            headers: dict[str, str] = {}
            self._inject(headers)
            duplicate = bool(await self._publish(handle, envelope, msg_id, headers))
        return Published(event_id, trace_id, duplicate)
