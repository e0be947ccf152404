"""Where a node's own events go: its event log on a data node, custody elsewhere (ES-77, ES-78).

A data node writes the events it publishes into its own log (``ctx.extras["events"]``, opened by
the data role). A node without ``data`` keeps no log: :func:`open_custody` starts a
:class:`~shared.bus.CustodySender` (``ctx.extras["custody"]``) that hands them to the custody
stream, where exactly one data node's custodian writes them (``data.origin`` / ``data.custodian``).

Events emitted here: ``turn.finished`` (one per turn, from the turn records' ``on_finished`` hook)
and ``config_revision_applied`` (the reconciler's event hook, :mod:`crewlet.node`).

:func:`publish_completed` also publishes each settled turn's ``agent_turn_completed`` on
``crewlet.events.agent_turn_completed`` (stream ``CREWLET_EVENTS``), what the reflect dispatcher
consumes (AG-6); the broker drops a republish of the same turn (``Nats-Msg-Id``).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from shared import logs
from shared.bus import CustodySender
from shared.runtime import NodeContext
from shared.turns import COMPLETED_SUBJECT, completed_payload, settled

__all__ = ["close_custody", "emit_event", "open_custody", "publish_completed", "turn_event"]

_publishing: set[asyncio.Task[None]] = set()

_log = logs.get("custody")


def open_custody(ctx: NodeContext) -> CustodySender | None:
    """Start the custody sender on a node without ``data`` (ES-78); None on a data node.

    Call it after the bus streams are provisioned (the custody stream is one of them).
    """
    if "data" in ctx.cfg.roles or ctx.link is None:
        return None
    sender = CustodySender(ctx.link.js, origin=ctx.node_id)
    sender.start()
    ctx.extras["custody"] = sender
    return sender


def emit_event(ctx: NodeContext, ev: dict[str, Any]) -> None:
    """Record one event this node published: in its own log, or handed to custody (ES-77, ES-78).

    Never raises. On a data node whose log is not open yet (booting) the event is logged
    ``event_unrecorded`` and dropped, as before the log exists.

    Args:
        ctx: The node.
        ev: ``{event_time (unix µs), event_id, event_type, source?, category?, <filter columns>?,
            data?, parties?}``.
    """
    events = ctx.extras.get("events")
    if events is not None:
        events.record({**ev, "data": {**(ev.get("data") or {}), "origin": ctx.node_id}})
        return
    sender = ctx.extras.get("custody")
    if isinstance(sender, CustodySender):
        sender.send(ev)
        return
    _log.debug("event_unrecorded", event_id=ev.get("event_id"), event_type=ev.get("event_type"))


def turn_event(node_id: str, result: Any) -> dict[str, Any]:
    """The ``turn.finished`` event of one finished turn (a ``shared.turns.TurnResult``).

    Returns:
        An event whose id is ``turn.finished.<turn id>`` (unique per turn), with the seat
        (``agent_id``, party), the trace id, and in ``data`` the trigger's event id and source, the
        outcome, error kind, token counts, rounds, tool calls and the charged work item.
    """
    start = result.start
    trigger = getattr(start, "trigger", None)
    ended = float(result.ended_at or time.time())
    charge = result.work_item.key if result.work_item is not None else None
    return {
        "event_time": int(ended * 1_000_000),
        "event_id": f"turn.finished.{result.turn_id}",
        "event_type": "turn.finished",
        "source": node_id,
        "category": "turns",
        "agent_id": result.seat,
        "task_id": charge,
        "trace_id": getattr(start, "trace_id", None) or None,
        "data": {
            "turn_id": result.turn_id,
            "seat": result.seat,
            "trigger_event_id": getattr(trigger, "event_id", "") or "",
            "trigger_source": getattr(trigger, "source", "") or "",
            "outcome": result.outcome,
            "error_kind": result.error_kind,
            "tokens": {"input": result.input_tokens, "output": result.output_tokens},
            "rounds": len(result.rounds),
            "tool_calls": len(result.tool_calls),
            "work_item": charge,
            "node": node_id,
        },
        "parties": {result.seat: "seat"},
    }


def publish_completed(ctx: NodeContext, result: Any) -> None:
    """Publish a settled turn's ``agent_turn_completed`` for the reflect dispatcher (AG-6).

    A fenced turn, or one handed back for redelivery, is not settled and is not published. Never
    raises: the publish runs in the background and is retried (:func:`publish_with_retry`) while the
    broker is away, so a turn that ends during a broker pause is still reflected once it is back
    (AG-2's Check).
    """
    if ctx.link is None or not settled(result):
        return
    org = ctx.org
    seat = org.seat(result.seat) if org is not None else None
    payload = completed_payload(result, role=seat.name if seat is not None else "", node=ctx.node_id)
    body = json.dumps(payload, default=str).encode()
    js = ctx.link.js

    async def send() -> None:
        await publish_with_retry(js, COMPLETED_SUBJECT, body, f"agent_turn_completed.{result.turn_id}")

    task = asyncio.get_running_loop().create_task(send(), name="agent-turn-completed")
    _publishing.add(task)
    task.add_done_callback(_publishing.discard)


COMPLETED_RETRY_FOR = 3600.0
"""Seconds a settled turn's ``agent_turn_completed`` publish is retried before it is given up (ours)."""


async def publish_with_retry(
    js: Any, subject: str, body: bytes, msg_id: str, *, retry_for: float = COMPLETED_RETRY_FOR
) -> bool:
    """Publish ``body`` once to the events stream, retrying every failure with backoff (0.5 s
    doubling to 15 s) for up to ``retry_for`` seconds. The message id makes a repeat that did land
    a duplicate the broker drops (2-minute window); past it the reflect dispatcher's duplicate ring
    and the episode's first-writer-wins key collapse it (AG-6, AG-4).

    Returns:
        True once published; False when given up (logged ``turn_completed_publish_dropped``). The
        first failure is logged ``turn_completed_publish_failed``; later ones are not repeated.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + retry_for
    delay = 0.5
    failed = False
    while True:
        try:
            await js.publish(subject, body, headers={"Nats-Msg-Id": msg_id}, timeout=5.0)
            if failed:
                _log.info("turn_completed_publish_recovered", msg_id=msg_id)
            return True
        except Exception as e:  # noqa: BLE001 - retried below; the turn stands whatever happens
            if not failed:
                _log.warning("turn_completed_publish_failed", msg_id=msg_id, error=f"{type(e).__name__}: {e}")
                failed = True
        if loop.time() + delay > deadline:
            _log.error("turn_completed_publish_dropped", msg_id=msg_id, after_s=round(retry_for))
            return False
        await asyncio.sleep(delay)
        delay = min(delay * 2, 15.0)


async def close_custody(ctx: NodeContext) -> None:
    """Send what the custody sender still holds (up to 5 s), then stop it."""
    sender = ctx.extras.pop("custody", None)
    if isinstance(sender, CustodySender):
        await sender.stop(grace=5.0)
