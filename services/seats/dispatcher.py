"""The seat dispatcher: one consume loop per held seat, CO-11's screening, and the turn (CO-7, CO-11, CO-38).

A seat's mailbox is attached when its lease is acquired (the seat host's ``on_acquire``) and
detached on release. Each held seat runs one loop that fetches one drain batch at a time (no
prefetch, serial per seat): what is available, plus ``notification_coalesce_window_seconds``,
up to ``notification_coalesce_max_batch`` deliveries, both read from the org the turns run with
(CO-38). The batch is split by conversation (:func:`shared.turns.partition`: one conversation key,
one group; a trigger without a key is a group of its own), oldest conversation first, and each
group is handed to :meth:`Dispatcher.handle`, which merges it into one trigger
(:func:`shared.turns.merge_triggers`) and passes, in order:

1. an undecodable body → ``notification_skipped{reason: undecodable}``, acked (it is always a
   group of its own);
2. a seat removed by an apply, or a node whose posture is shed/stuck → deferred (its mail is kept
   for the seat's next holder, FL-113); a human seat → ``notification_skipped``, acked;
3. the completion ledger, read for every constituent: all done → ``turn_trigger_skipped``, acked;
   some done → the turn runs on the rest only (FL-88);
4. a constituent at the ``delegation_depth`` limit → its turn is recorded refused (``depth_cap``)
   and it leaves the merge;
5. admission ``may_start`` (FL-72) → no: :class:`~shared.bus.Deferred` (NAK at once, pause);
6. a draining node → Deferred, so the delivery goes promptly to the successor (FL-129);
7. one ``node.max_concurrent`` slot (FL-14), then ONE turn for the group, fenced before every
   round and every write-capable tool call (FL-74), with ``in_progress`` keepalives for every
   delivery this node holds (the group's and the rest of the batch waiting behind it, FL-83);
8. the ledger rows, one per constituent, are written after the turn's side effects, then every
   delivery of the group is acked — or, when the turn asks for redelivery (fenced, provider
   unavailable before any effect), every one is NAKed. Nothing is written once the seat's epoch no
   longer certainly holds (``turn_commit_fenced``): a node that lost the seat mid-turn leaves the
   deliveries to the successor.

A Deferred from any group defers every delivery of the batch not yet settled (one delivery spent
each, never an ack, FL-81): see :meth:`shared.bus.Mailbox.process_batch`. A group of several
constituents is logged ``notifications_coalesced``; each API message among them gets its own
status (``running``, then ``answered`` with the turn's reply, ``failed`` or ``queued`` again).

Steps 7 and 8 are logged ``seat_turn_admitted`` and ``seat_turn_committed`` (seat, lease epoch,
turn id, the first delivery's ``stream_seq`` and every ``stream_seqs``, event ids), and a ledger
skip carries the same ids, so a fleet's history can be checked after a run.

Message truth (CO-8, issue 14): an API message reads ``running`` from admission, ``queued`` again
(with the attempt's ``error``, ``error_kind``, ``outcome``) when its turn asked for a redelivery,
``dead_lettered`` once its last allowed delivery went to the dead-letter subject (the mailbox's
``on_dead_letter`` hook), and after the turn commits :func:`~services.seats.messages.message_status`: ``answered`` with the
reply (clearing an earlier attempt's error), or ``failed`` with the outcome and its class — never
``answered`` for a turn that ended ``incomplete`` or left an engine-owed message without a reply.
An engine-owed message naming a ``work_item`` also gets its reply as a comment there, once.

Holding off (issue 14): a turn that asks for a redelivery holds its seat for the NAK delay
(:meth:`Dispatcher.held`): the servers' ``Retry-After`` when they said, else a jittered
exponential step; the seat fetches nothing and runs none of the batch's later groups until then.

A voluntary release (drain, placement) lets the running turn finish before the mailbox detaches,
and the batch's later groups are deferred (the stopping seat refuses them), so the successor gets
exactly what this node never acked (FL-65); a lost lease detaches at once: the running turn is
stopped by its fence and its ack is refused (FL-66).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
import uuid
from collections.abc import Callable
from typing import Any

from shared import logs, telemetry, tools
from shared.budgets import Budgets, BudgetUnavailable
from shared.bus import (
    Bus,
    BusUnavailable,
    Deferred,
    Delivery,
    Mailbox,
    MailboxDetached,
    RetryLater,
    wake_envelope,
)
from shared.leases import FENCED_REASONS, Ledger, SeatHost
from shared.mcp import McpPool, resolve_seat_servers
from shared.records import TurnStore
from shared.router import open_router
from shared.runtime import NodeContext
from shared.turns import Trigger, TurnEngine, TurnResult, merge_triggers, partition

from . import asks
from .messages import comment_replies, message_status, now_iso, reply_of, set_message
from .workspace import RouterWorkspace

__all__ = [
    "REDELIVERY_JITTER",
    "Dispatcher",
    "TurnRedelivery",
    "redelivery_delay",
]

_log = logs.get("seat.dispatcher")
_UNPARK_INTERVAL = 5.0
"""Seconds between checks of a parked seat's budget (CO-37, ours): a window that turned, a raised
ceiling or a reset on any node releases it within this long (an apply checks at once)."""
REDELIVERY_JITTER = 0.25
"""A redelivery's own backoff step is stretched by a random 0..25 % (ours, issue 14): seats that
failed together on one provider do not come back in lockstep, and never sooner than the CO-7
step (1 s doubling to 30 s)."""


class TurnRedelivery(RetryLater):
    """The turn asked for its delivery to be redelivered (fenced, or no provider before any effect).

    NAKed with backoff, and no sooner than ``delay`` seconds when every key of the seat's providers
    is benched that long (CO-42), so a long cooldown spends one delivery, not the budget (FL-82).
    """


class Dispatcher:
    """Runs the held seats' mailboxes on this node.

    Args:
        ctx: The node context (org, coordination, object store, ``max_concurrent``).
        bus: The node's bus.
        engine: Returns the current turn engine (rebuilt per apply).
        turns: The node's turn records.
    """

    def __init__(
        self,
        ctx: NodeContext,
        bus: Bus,
        engine: Callable[[], TurnEngine],
        turns: TurnStore,
        *,
        mcp: McpPool | None = None,
        budgets: Budgets | None = None,
    ) -> None:
        self.ctx = ctx
        self.mcp = mcp
        self.budgets = budgets
        self.parked: dict[str, dict[str, Any]] = {}  # seat -> the refusal that parked it (CO-37)
        self._unpark_task: asyncio.Task[None] | None = None
        self.bus = bus
        self.engine = engine
        self.turns = turns
        self.host: SeatHost | None = None
        self.slots = asyncio.Semaphore(ctx.cfg.node.max_concurrent)
        self.boxes: dict[str, Mailbox] = {}
        self.loops: dict[str, asyncio.Task[None]] = {}
        self._stopping: set[str] = set()
        self._busy: set[str] = set()  # seats whose handler is running a delivery now
        # issue 14: a seat whose turn asked for a redelivery fetches and runs nothing until then
        self._holds: dict[str, float] = {}  # seat -> monotonic instant its hold ends
        self._streaks: dict[str, int] = {}  # seat -> redeliveries asked in a row (backoff attempt)
        self._released: dict[str, asyncio.Event] = {}  # seat -> set on release: a hold ends at once
        assert ctx.coord is not None
        self.ledger = Ledger(ctx.coord)

    # -- seat host hooks -----------------------------------------------------------------------

    async def on_acquire(self, handle: str, epoch: int) -> None:
        """Start the seat's MCP servers, then attach its mailbox and start its loop (FL-65, FL-79).

        The seat's per-seat servers start concurrently, so the attach waits for the slowest, not
        the sum; a server that fails to start is skipped and named on the heartbeat (FL-46), the
        seat still runs (CO-34). An event published during the acquire is fetched only after the
        MCP tool list is available.
        """
        org = self.ctx.org
        seat = org.seat(handle) if org is not None else None
        if self.mcp is not None and seat is not None and org is not None:
            await self.mcp.acquire(handle, resolve_seat_servers(org, seat))
        self._released[handle] = asyncio.Event()
        box = await self.bus.attach(
            handle, epoch, on_dead_letter=functools.partial(self._dead_lettered, handle)
        )
        self.boxes[handle] = box
        self._stopping.discard(handle)
        self.ctx.seats_held[handle] = epoch
        self.loops[handle] = asyncio.create_task(self._loop(handle, box), name=f"seat-{handle}")

    async def on_release(self, handle: str, reason: str) -> None:
        """Stop fetching; on a voluntary release let the running turn finish; then detach (FL-65, FL-66)."""
        self._stopping.add(handle)
        self.ctx.seats_held.pop(handle, None)
        released = self._released.get(handle)
        if released is not None:
            released.set()  # a held seat stops waiting: its batch is deferred to the successor
        task = self.loops.pop(handle, None)
        box = self.boxes.pop(handle, None)
        if task is not None:
            # a lost lease stops at once; a voluntary release lets a running delivery finish but
            # does not wait out an idle fetch or pause (the successor gets the mail sooner, FL-65)
            if reason == "lease_lost" or handle not in self._busy:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if box is not None:
            with contextlib.suppress(Exception):
                await box.detach()
        self.parked.pop(handle, None)
        if self.mcp is not None:  # per-seat children die with the lease (FL-66): killed when fenced
            await self.mcp.release(handle, force=reason in FENCED_REASONS)

    async def on_quiesce(self, handle: str) -> None:
        """The renew is not fresh: stop fetching until it is (FL-53)."""
        box = self.boxes.get(handle)
        if box is not None:
            box.pause()

    async def on_resume(self, handle: str, epoch: int) -> None:
        """A good renew after a quiesce or a deferral: fetch again."""
        box = self.boxes.get(handle)
        if box is not None and handle not in self.parked:  # a parked seat waits for its budget
            box.resume()

    # -- budgets (CO-37) -------------------------------------------------------------------------

    def park(self, handle: str, refusal: dict[str, Any]) -> None:
        """Stop fetching the seat's deliveries until its budget has room again (CO-37).

        The refused delivery was NAKed (it stays in the seat's mailbox); :meth:`check_parked`
        resumes the seat when the window turned, a raised ceiling was applied or a counter was reset.
        """
        first = handle not in self.parked
        self.parked[handle] = refusal
        box = self.boxes.get(handle)
        if box is not None:
            box.pause()
        if first:
            _log.info("seat_parked", seat=handle, **refusal)
        if self._unpark_task is None or self._unpark_task.done():
            self._unpark_task = asyncio.create_task(self._unpark_loop(), name="seats-unpark")

    async def check_parked(self) -> list[str]:
        """Resume every parked seat whose budget has room again; return the resumed handles.

        A store that cannot be read keeps the seats parked (never reported as room).
        """
        resumed: list[str] = []
        org = self.ctx.org
        if self.budgets is None or org is None:
            return resumed
        for handle in list(self.parked):
            seat = org.seat(handle)
            if seat is None:
                continue
            try:
                refusal = await self.budgets.refusal(str(seat.agent_id))
            except BudgetUnavailable as e:
                _log.warning("seat_parked_unknown", seat=handle, error=str(e))
                continue
            if refusal is None and self.parked.pop(handle, None) is not None:
                box = self.boxes.get(handle)
                if box is not None:
                    box.resume()
                _log.info("seat_unparked", seat=handle)
                resumed.append(handle)
        return resumed

    async def _unpark_loop(self) -> None:
        while self.parked:
            await asyncio.sleep(_UNPARK_INTERVAL)
            try:
                await self.check_parked()
            except Exception as e:  # noqa: BLE001 - the loop outlives any one failure
                _log.error("seat_unpark_failed", error=f"{type(e).__name__}: {e}")

    # -- the loop ------------------------------------------------------------------------------

    def _coalescing(self) -> tuple[int, float]:
        """``(max_batch, window seconds)`` of the org the turns run with now (CO-38; live on apply)."""
        org = self.ctx.org
        if org is None:
            return 1, 0.0
        company = org.company
        return company.notification_coalesce_max_batch, float(company.notification_coalesce_window_seconds)

    async def _loop(self, handle: str, box: Mailbox) -> None:
        while handle not in self._stopping and not box.detached:
            if self.held(handle):  # a turn asked for a redelivery: fetch nothing before it is due
                await self._wait_hold(handle)
                continue
            max_batch, window = self._coalescing()
            try:
                outcomes = await box.process_batch(
                    lambda group: self._handle_busy(handle, box, group),
                    group=_conversations,
                    max_batch=max_batch,
                    window=window,
                    timeout=1.0,
                )
            except MailboxDetached:
                return
            except BusUnavailable as e:
                _log.warning("inbox_fetch_failed", seat=handle, error=str(e))
                await asyncio.sleep(1.0)
                continue
            finally:
                self._busy.discard(handle)  # busy from the first group's start to the batch's end
            if "deferred" in outcomes and self.host is not None:
                self.host.record_deferral(handle)
            if "fenced" in outcomes:
                return
            if box.paused:
                await asyncio.sleep(0.2)

    # -- holding off after a redelivery (issue 14) ---------------------------------------------

    def held(self, handle: str) -> float:
        """Seconds left of the seat's hold (0.0 when it is not held).

        A turn that asked for its delivery to be redelivered (no provider answered, every key
        benched, ...) holds its seat for as long as that delivery's NAK delay: the seat fetches
        no new batch meanwhile, and the later groups of the batch in hand wait too (kept alive,
        FL-83), so six queued messages during a provider storm make one call per backoff step,
        not six. A committed turn ends the hold.
        """
        until = self._holds.get(handle)
        if until is None:
            return 0.0
        left = until - time.monotonic()
        if left <= 0:
            self._holds.pop(handle, None)
            return 0.0
        return left

    async def _wait_hold(self, handle: str) -> None:
        """Sleep out the seat's hold; return early when the seat is released."""
        left = self.held(handle)
        if not left:
            return
        released = self._released.get(handle)
        if released is None:
            await asyncio.sleep(left)
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(released.wait(), left)

    def _hold_for(self, handle: str, group: list[Delivery], box: Mailbox, result: TurnResult) -> float:
        """Start the seat's hold after a turn that asked for a redelivery; return its length.

        The length (issue 14, CO-7): what the servers asked (``result.retry_after``: the largest
        ``Retry-After`` of the failed calls, or how long every key stays benched, CO-42) when they
        said; else the bus's backoff step (1 s doubling to 30 s) for the larger of the delivery's
        count and the seat's redeliveries in a row, stretched by :data:`REDELIVERY_JITTER`. Never
        less than the NAK delay the mailbox itself applies (its step for the delivery count).
        """
        streak = self._streaks.get(handle, 0) + 1
        self._streaks[handle] = streak
        delivered = max(d.num_delivered for d in group)
        delay = redelivery_delay(box.backoff(max(delivered, streak)), result.retry_after)
        delay = max(delay, box.backoff(delivered))
        self._holds[handle] = time.monotonic() + delay
        _log.info(
            "seat_turn_held",
            seat=handle,
            turn_id=result.turn_id,
            seconds=round(delay, 3),
            asked=result.retry_after,
            attempt=max(delivered, streak),
            error_kind=result.error_kind,
        )
        return delay

    async def _dead_lettered(self, handle: str, d: Delivery, reason: str) -> None:
        """A delivery went to the dead-letter subject (FL-82): its API message reads
        ``dead_lettered``, keeping the last attempt's error (CO-8)."""
        trigger = _trigger_of(d)
        if trigger is None:
            return
        await set_message(
            self.ctx.coord,
            trigger.payload,
            {
                "status": "dead_lettered",
                "dead_lettered_at": now_iso(),
                "num_delivered": d.num_delivered,
                "retry_in_seconds": None,  # no retry follows a dead letter
            },
            if_unset={"error": reason},
        )

    # -- one delivery --------------------------------------------------------------------------

    async def _set_messages(self, trigger: Trigger, **fields: Any) -> None:
        """Write ``fields`` into the status of every API message the trigger stands for (CO-8, CO-38)."""
        await asyncio.gather(
            *(set_message(self.ctx.coord, part.payload, fields) for part in trigger.parts or (trigger,))
        )

    async def _handle_busy(self, handle: str, box: Mailbox, group: list[Delivery]) -> None:
        # a voluntary release waits for a busy seat's batch (its later groups are deferred by the
        # stopping check) instead of cancelling it between two groups; the loop clears the mark
        self._busy.add(handle)
        await self.handle(handle, box, group)

    async def handle(self, handle: str, box: Mailbox, group: list[Delivery]) -> None:
        """Screen one conversation's deliveries and run their one turn (CO-11, CO-38).

        Args:
            handle: The seat.
            box: The seat's mailbox, attached under the epoch the turn runs in.
            group: One group of a drain batch (:func:`_conversations`): one undecodable
                delivery, or deliveries sharing a conversation key (or one event id).

        Raises:
            Deferred: This node is the wrong one (seat removed, shedding, not admitted, draining,
                stopping, or the epoch moved during the turn): the batch goes back at once (FL-81).
            TurnRedelivery: The turn asked for its deliveries to be redelivered (NAK with backoff).
        """
        ctx = self.ctx
        first = group[0]
        stream_seqs = [d.stream_seq for d in group]
        decoded = [(d, d.envelope) for d in group if d.envelope is not None]
        for d in group:
            if d.envelope is None:
                _log.warning(
                    "notification_skipped", seat=handle, reason="undecodable", stream_seq=d.stream_seq
                )
        if not decoded:
            return
        triggers = [Trigger.from_envelope(env.to_dict(), headers=d.headers) for d, env in decoded]
        org = ctx.org
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
        if seat.kind == "human":
            for t in triggers:
                _log.info("notification_skipped", seat=handle, reason="human_seat", event_id=t.event_id)
            return
        ids = list(dict.fromkeys(i for t in triggers for i in t.event_ids))
        done = await self.ledger.worked(handle, ids)
        if ids and set(ids) <= done:
            _log.info(
                "turn_trigger_skipped",
                seat=handle,
                epoch=box.epoch,
                stream_seq=first.stream_seq,
                stream_seqs=stream_seqs,
                event_id=triggers[0].event_id,
                event_ids=ids,
                reason="already_worked",
            )
            return
        # FL-88: a redelivery that partially overlaps (A and B done, then A+B+C) runs only C
        todo = [t for t in triggers if not set(t.event_ids) <= done]
        engine = self.engine()
        limit = org.company.turn_engine.delegation_depth_limit
        for capped in [t for t in todo if t.delegation_depth >= limit]:
            refused_id = str(uuid.uuid4())
            await engine.refuse(
                handle,
                capped,
                kind="depth_cap",
                workspace=self._workspace(handle, box.epoch, refused_id),
                turn_id=refused_id,
                error=f"delegation_depth {capped.delegation_depth} >= limit {limit}",
            )
        todo = [t for t in todo if t.delegation_depth < limit]
        # FL-124: an a2a_request whose channel is closed or gone is skipped (store down: admitted)
        todo = [t for t in todo if await asks.admit(ctx, handle, t)]
        if not todo:
            return
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
        workspace = self._workspace(
            handle, box.epoch, turn_id, basis=basis if isinstance(basis, str) and basis else None
        )
        if self.held(handle):
            # an earlier group of this batch asked for a redelivery (issue 14): this one waits its
            # turn instead of calling the provider at once; every delivery held is kept alive
            async with box.keepalive(*box.outstanding()):
                await self._wait_hold(handle)
            if handle in self._stopping:
                raise Deferred()
        host = self.host
        epoch = host.may_start(handle) if host is not None else box.epoch
        if epoch is None or epoch != box.epoch:
            raise Deferred()
        if ctx.draining:
            raise Deferred()
        async with self.slots:
            if ctx.draining or handle in self._stopping:
                raise Deferred()
            ctx.in_flight += 1
            _log.info(
                "seat_turn_admitted",
                seat=handle,
                epoch=epoch,
                turn_id=turn_id,
                stream_seq=first.stream_seq,
                stream_seqs=stream_seqs,
                num_delivered=first.num_delivered,
                event_ids=ids,
            )
            await self._set_messages(trigger, status="running", turn_id=turn_id, node=ctx.node_id)

            async def fence() -> bool:
                return host.may_continue(handle, epoch) if host is not None else True

            try:
                # every delivery this node holds: the group's, and the batch's later groups (FL-83)
                async with box.keepalive(*box.outstanding()):
                    if self.mcp is not None:  # a server that died mid-session comes back for this turn
                        await self.mcp.revive(handle)
                    with asks.bound(ctx, self.bus, trigger):  # what a2a_ask needs (CO-36)
                        result = await engine.run(
                            handle, trigger, workspace=workspace, fence=fence, turn_id=turn_id
                        )
            finally:
                ctx.in_flight -= 1
        if host is not None and not host.holds(handle, epoch):
            # The seat moved while the turn ran (a stopped or cut-off node: a zombie). Whatever this
            # node wrote now (the ledger rows, the message's status) would land under a superseded
            # epoch, over what the successor did with the same delivery: write nothing, leave the
            # delivery to the successor (its NAK is fenced too). Issue 5: nothing a zombie writes lands.
            _log.warning(
                "turn_commit_fenced",
                seat=handle,
                epoch=epoch,
                turn_id=turn_id,
                stream_seq=first.stream_seq,
                stream_seqs=stream_seqs,
                outcome=result.outcome,
            )
            raise Deferred()
        if result.error_kind == "budget_exhausted":
            self.park(handle, result.budget or {})
        if result.redeliver and result.error_kind == "budget_exhausted":
            # parked (CO-37): the deliveries go back to the mailbox at once and wait there until
            # the budget has room; the seat fetches nothing meanwhile
            await self._set_messages(trigger, status="parked", error=result.error)
            raise Deferred()
        if result.redeliver:
            delay = self._hold_for(handle, group, box, result)
            await self._set_messages(
                trigger,
                status="queued",
                error=result.error,
                error_kind=result.error_kind,
                outcome=result.outcome,
                turn_id=turn_id,
                retry_in_seconds=round(delay, 3),
            )
            raise TurnRedelivery(f"turn {turn_id} {result.outcome}: {result.error_kind or ''}", delay=delay)
        self._streaks.pop(handle, None)
        self._holds.pop(handle, None)
        reply = reply_of(result)
        # the reply comment lands before the ledger rows: a crash in between reruns the turn, and
        # the comment's derived op id collapses the repeat (once per message, CO-8)
        await comment_replies(ctx, handle, epoch, trigger, result, reply)
        for event_id in ids:
            await self.ledger.record(handle, event_id, {"turn_id": turn_id, "outcome": result.outcome})
        _log.info(
            "seat_turn_committed",
            seat=handle,
            epoch=epoch,
            turn_id=turn_id,
            stream_seq=first.stream_seq,
            stream_seqs=stream_seqs,
            event_ids=ids,
            outcome=result.outcome,
        )
        await asyncio.gather(
            *(
                set_message(self.ctx.coord, part.payload, message_status(part, result, reply))
                for part in trigger.parts or (trigger,)
            )
        )
        await asks.answered(ctx, self.bus, handle, trigger, result)  # a2a_request's reply (CO-36)

    def _workspace(
        self, handle: str, epoch: int, turn_id: str, *, basis: str | None = None
    ) -> RouterWorkspace:
        """The seat's tool workspace for one turn: fenced writes, assignment and comment wakes
        (CO-10, CO-41), and the trigger's external basis for items it files (CO-35)."""
        org = self.ctx.org
        agents = {s.handle for s in org.seats} if org is not None else set()

        async def wake(assignee: str, key: str, writer: str) -> None:
            headers: dict[str, str] = {}
            telemetry.inject(headers)  # the execute_tool span is current: the woken turn joins this trace
            env = wake_envelope(key, writer, parent_turn_id=turn_id)
            try:
                await self.bus.publish_to_seat(
                    assignee, env, msg_id=f"wake:{key}:{assignee}:{turn_id}", headers=headers
                )
                _log.info("tracker_wake_published", seat=assignee, work_item=key, writer=writer)
            except BusUnavailable as e:
                _log.warning("tracker_wake_failed", seat=assignee, work_item=key, error=str(e))

        return RouterWorkspace(
            open_router(self.ctx),
            self.ctx.objects,
            seat=handle,
            epoch=epoch,
            agent_seats=agents,
            wake=wake,
            comment_wake=functools.partial(
                tools.publish_comment_wakes,
                self.bus,
                self.ctx.coord,
                agent_seats=agents,
                parent_turn_id=turn_id,
            ),
            basis=basis,
        )


def _trigger_of(d: Delivery) -> Trigger | None:
    if d.envelope is None:
        return None
    try:
        return Trigger.from_envelope(d.envelope.to_dict(), headers=d.headers)
    except ValueError:
        return None


def _conversations(batch: list[Delivery]) -> list[list[Delivery]]:
    """Split one drain batch by conversation, oldest conversation first (CO-38, FL-85)."""
    return partition(batch, _trigger_of)


def redelivery_delay(step: float, asked: float | None, *, rng: Callable[[], float] = random.random) -> float:
    """Seconds a turn's delivery waits before it is redelivered (issue 14, CO-7).

    Args:
        step: The backoff step for this attempt, in seconds (the bus's: 1 s doubling to 30 s).
        asked: What the servers asked (``Retry-After``, capped at 300 s, or a bench's time left,
            CO-42), in seconds; None when none said.
        rng: A source of floats in [0, 1) for the jitter.

    Returns:
        ``asked`` when given (the server knows best; never shortened); else ``step`` stretched by a
        random 0..:data:`REDELIVERY_JITTER` of itself.
    """
    if asked is not None:
        return max(0.0, asked)
    return step * (1.0 + REDELIVERY_JITTER * rng())
