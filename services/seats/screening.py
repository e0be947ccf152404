"""CO-11's screening of one conversation's deliveries, before its turn (CO-11, CO-38, FL-88, FL-124).

Steps 1-4 of :mod:`services.seats.dispatcher` and the merge: decode, the seat still here and this
node not shedding, the completion ledger, the delegation depth cap, the closed-channel check; what is
left is merged into one :class:`ScreenedTurn`. Logged under the dispatcher's logger (``seat.dispatcher``).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

from shared import logs
from shared.bus import Bus, Deferred, Delivery, Mailbox
from shared.leases import Ledger
from shared.runtime import NodeContext
from shared.turns import Trigger, TurnEngine, merge_triggers

from . import asks
from .workspace import RouterWorkspace, seat_workspace

__all__ = ["ScreenedTurn", "screen"]

_log = logs.get("seat.dispatcher")


@dataclasses.dataclass(frozen=True)
class ScreenedTurn:
    """One group's screened turn (CO-11, CO-38): its merged trigger, ids, engine and workspace."""

    first: Delivery
    stream_seqs: list[int]
    trigger: Trigger
    ids: list[str]
    engine: TurnEngine
    turn_id: str
    workspace: RouterWorkspace


def decode(handle: str, group: list[Delivery]) -> list[Trigger]:
    """Step 1: the group's triggers; an undecodable delivery is logged ``notification_skipped``."""
    decoded = [(d, d.envelope) for d in group if d.envelope is not None]
    for d in group:
        if d.envelope is None:
            _log.warning("notification_skipped", seat=handle, reason="undecodable", stream_seq=d.stream_seq)
    return [Trigger.from_envelope(env.to_dict(), headers=d.headers) for d, env in decoded]


def seat_or_defer(ctx: NodeContext, handle: str, org: Any, triggers: list[Trigger]) -> Any:
    """Step 2: the seat the triggers are for; :class:`Deferred` when removed or the node sheds."""
    seat = org.seat(handle) if org is not None else None
    if seat is None or ctx.shedding:
        # A seat an apply removed keeps its mail until it is re-added (its mailbox is not
        # retired here): defer, never ack, and the role_gone release detaches (FL-66). A
        # shedding node defers too (FL-113): one delivery spent, the message goes to a peer.
        _log.info(
            "notification_deferred",
            seat=handle,
            reason="shedding" if ctx.shedding else "seat_removed",
            event_id=triggers[0].event_id,
            event_ids=[t.event_id for t in triggers],
        )
        raise Deferred()
    return seat


async def unworked(
    ledger: Ledger, handle: str, box: Mailbox, triggers: list[Trigger], stream_seqs: list[int]
) -> list[Trigger] | None:
    """Step 3: the triggers the completion ledger has not seen; None when all were worked."""
    ids = list(dict.fromkeys(i for t in triggers for i in t.event_ids))
    done = await ledger.worked(handle, ids)
    if ids and set(ids) <= done:
        _log.info(
            "turn_trigger_skipped",
            seat=handle,
            epoch=box.epoch,
            stream_seq=stream_seqs[0],
            stream_seqs=stream_seqs,
            event_id=triggers[0].event_id,
            event_ids=ids,
            reason="already_worked",
        )
        return None
    # FL-88: a redelivery that partially overlaps (A and B done, then A+B+C) runs only C
    return [t for t in triggers if not set(t.event_ids) <= done]


async def refuse_capped(
    ctx: NodeContext, bus: Bus, handle: str, box: Mailbox, engine: TurnEngine, limit: int, todo: list[Trigger]
) -> list[Trigger]:
    """Step 4: record a ``depth_cap`` refusal for each trigger at the limit; return the rest."""
    for capped in [t for t in todo if t.delegation_depth >= limit]:
        refused_id = str(uuid.uuid4())
        await engine.refuse(
            handle,
            capped,
            kind="depth_cap",
            workspace=seat_workspace(ctx, bus, handle, box.epoch, refused_id),
            turn_id=refused_id,
            error=f"delegation_depth {capped.delegation_depth} >= limit {limit}",
        )
    return [t for t in todo if t.delegation_depth < limit]


async def screen(
    ctx: NodeContext,
    bus: Bus,
    ledger: Ledger,
    engine_of: Callable[[], TurnEngine],
    handle: str,
    box: Mailbox,
    group: list[Delivery],
) -> ScreenedTurn | None:
    """Steps 1-4 and the merge: the group's one turn, or None when nothing is left to run.

    Args:
        ctx: The node context (org, shedding).
        bus: The node's bus (the turn's workspace publishes wakes on it).
        ledger: The completion ledger (step 3).
        engine_of: Returns the current turn engine (asked once, after the ledger read).
        handle: The seat.
        box: The seat's mailbox.
        group: One conversation's deliveries.

    Raises:
        Deferred: the seat was removed, or the node sheds (FL-66, FL-113).
    """
    stream_seqs = [d.stream_seq for d in group]
    triggers = decode(handle, group)
    if not triggers:
        return None
    org = ctx.org
    seat = seat_or_defer(ctx, handle, org, triggers)
    if seat.kind == "human":
        for t in triggers:
            _log.info("notification_skipped", seat=handle, reason="human_seat", event_id=t.event_id)
        return None
    todo = await unworked(ledger, handle, box, triggers, stream_seqs)
    if todo is None:
        return None
    engine = engine_of()
    todo = await refuse_capped(
        ctx, bus, handle, box, engine, org.company.turn_engine.delegation_depth_limit, todo
    )
    # FL-124: an a2a_request whose channel is closed or gone is skipped (store down: admitted)
    todo = [t for t in todo if await asks.admit(ctx, handle, t)]
    if not todo:
        return None
    trigger = merge_triggers(todo)
    ids = list(trigger.event_ids)
    if len(ids) > 1:
        _log.info(
            "notifications_coalesced",
            seat=handle,
            conversation_key=trigger.conversation_key,
            event_ids=ids,
            stream_seqs=stream_seqs,
            count=len(ids),
        )
    turn_id = str(uuid.uuid4())
    basis = trigger.payload.get("basis") if trigger.payload else None
    workspace = seat_workspace(
        ctx,
        bus,
        handle,
        box.epoch,
        turn_id,
        basis=basis if isinstance(basis, str) and basis else None,
    )
    return ScreenedTurn(group[0], stream_seqs, trigger, ids, engine, turn_id, workspace)
