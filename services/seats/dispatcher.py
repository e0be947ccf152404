"""The seat dispatcher: one consume loop per held seat, CO-11's screening, and the turn (CO-7, CO-11, CO-38).

A seat's mailbox is attached when its lease is acquired (the seat host's ``on_acquire``) and
detached on release. Each held seat runs one loop that fetches one drain batch at a time (no
prefetch, serial per seat): what is available, plus ``notification_coalesce_window_seconds``,
up to ``notification_coalesce_max_batch`` deliveries, both read from the org the turns run with
(CO-38). The batch is split by conversation (:func:`shared.turns.partition`: one conversation key,
one group; a trigger without a key is a group of its own), oldest conversation first, and each
group is handed to :meth:`Dispatcher.handle`, which merges it into one trigger
(:func:`shared.turns.merge_triggers`) and passes, in order (1-4: :mod:`~services.seats.screening`):

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
(:meth:`Dispatcher.held`, :mod:`services.seats.holds`): the servers' ``Retry-After`` when they said, else a jittered
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
from collections.abc import Callable
from typing import Any

from shared import logs
from shared.budgets import Budgets, BudgetUnavailable
from shared.bus import (
    Bus,
    BusUnavailable,
    Deferred,
    Delivery,
    Mailbox,
    MailboxDetached,
)
from shared.leases import FENCED_REASONS, Ledger, SeatHost
from shared.mcp import McpPool, resolve_seat_servers
from shared.records import TurnStore
from shared.runtime import NodeContext
from shared.turns import Trigger, TurnEngine, TurnResult, partition

from . import asks
from .holds import REDELIVERY_JITTER, SeatHolds, TurnRedelivery, redelivery_delay
from .messages import comment_replies, message_status, now_iso, reply_of, set_message
from .screening import ScreenedTurn, screen

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
        self._released: dict[str, asyncio.Event] = {}  # seat -> set on release: a hold ends at once
        # issue 14: a seat whose turn asked for a redelivery fetches and runs nothing until then
        self.holds = SeatHolds(self._released)
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
                await self.holds.wait(handle)
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
        """Seconds left of the seat's hold (0.0 when it is not held): :meth:`SeatHolds.held`."""
        return self.holds.held(handle)

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

        The steps of the module docstring: :func:`~services.seats.screening.screen` (1-4 and the
        merge), :meth:`_admit` (5-6), :meth:`_run` (7), :meth:`_commit` (8).

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
        turn = await screen(self.ctx, self.bus, self.ledger, self.engine, handle, box, group)
        if turn is None:
            return
        epoch = await self._admit(handle, box)
        result = await self._run(handle, box, turn, epoch)
        await self._commit(handle, box, group, turn, epoch, result)

    async def _admit(self, handle: str, box: Mailbox) -> int:
        """Steps 5-6: wait out a hold, then the seat host's ``may_start`` and the drain; the epoch."""
        if self.held(handle):
            # an earlier group of this batch asked for a redelivery (issue 14): this one waits its
            # turn instead of calling the provider at once; every delivery held is kept alive
            async with box.keepalive(*box.outstanding()):
                await self.holds.wait(handle)
            if handle in self._stopping:
                raise Deferred()
        host = self.host
        epoch = host.may_start(handle) if host is not None else box.epoch
        if epoch is None or epoch != box.epoch:
            raise Deferred()
        if self.ctx.draining:
            raise Deferred()
        return epoch

    async def _run(self, handle: str, box: Mailbox, turn: ScreenedTurn, epoch: int) -> TurnResult:
        """Step 7: one ``max_concurrent`` slot, then the turn, fenced and with keepalives (FL-74, FL-83)."""
        ctx, host = self.ctx, self.host
        async with self.slots:
            if ctx.draining or handle in self._stopping:
                raise Deferred()
            ctx.in_flight += 1
            _log.info(
                "seat_turn_admitted",
                seat=handle,
                epoch=epoch,
                turn_id=turn.turn_id,
                stream_seq=turn.first.stream_seq,
                stream_seqs=turn.stream_seqs,
                num_delivered=turn.first.num_delivered,
                event_ids=turn.ids,
            )
            await self._set_messages(turn.trigger, status="running", turn_id=turn.turn_id, node=ctx.node_id)

            async def fence() -> bool:
                return host.may_continue(handle, epoch) if host is not None else True

            try:
                # every delivery this node holds: the group's, and the batch's later groups (FL-83)
                async with box.keepalive(*box.outstanding()):
                    if self.mcp is not None:  # a server that died mid-session comes back for this turn
                        await self.mcp.revive(handle)
                    with asks.bound(ctx, self.bus, turn.trigger):  # what a2a_ask needs (CO-36)
                        return await turn.engine.run(
                            handle, turn.trigger, workspace=turn.workspace, fence=fence, turn_id=turn.turn_id
                        )
            finally:
                ctx.in_flight -= 1

    async def _commit(
        self,
        handle: str,
        box: Mailbox,
        group: list[Delivery],
        turn: ScreenedTurn,
        epoch: int,
        result: TurnResult,
    ) -> None:
        """Step 8: the ledger rows and message statuses, or a fenced/parked/redelivered outcome."""
        ctx, host, trigger, turn_id = self.ctx, self.host, turn.trigger, turn.turn_id
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
                stream_seq=turn.first.stream_seq,
                stream_seqs=turn.stream_seqs,
                outcome=result.outcome,
            )
            raise Deferred()
        await self._unless_redelivered(handle, box, group, turn, result)
        self.holds.clear(handle)
        reply = reply_of(result)
        # the reply comment lands before the ledger rows: a crash in between reruns the turn, and
        # the comment's derived op id collapses the repeat (once per message, CO-8)
        await comment_replies(ctx, handle, epoch, trigger, result, reply)
        for event_id in turn.ids:
            await self.ledger.record(handle, event_id, {"turn_id": turn_id, "outcome": result.outcome})
        _log.info(
            "seat_turn_committed",
            seat=handle,
            epoch=epoch,
            turn_id=turn_id,
            stream_seq=turn.first.stream_seq,
            stream_seqs=turn.stream_seqs,
            event_ids=turn.ids,
            outcome=result.outcome,
        )
        await asyncio.gather(
            *(
                set_message(self.ctx.coord, part.payload, message_status(part, result, reply))
                for part in trigger.parts or (trigger,)
            )
        )
        await asks.answered(ctx, self.bus, handle, trigger, result)  # a2a_request's reply (CO-36)

    async def _unless_redelivered(
        self, handle: str, box: Mailbox, group: list[Delivery], turn: ScreenedTurn, result: TurnResult
    ) -> None:
        """Park the seat on ``budget_exhausted`` (CO-37); raise when the turn asked for a redelivery.

        Raises:
            Deferred: parked: the deliveries go back at once and wait for the budget.
            TurnRedelivery: NAK after the seat's hold (issue 14).
        """
        if result.error_kind == "budget_exhausted":
            self.park(handle, result.budget or {})
        if result.redeliver and result.error_kind == "budget_exhausted":
            # parked (CO-37): the deliveries go back to the mailbox at once and wait there until
            # the budget has room; the seat fetches nothing meanwhile
            await self._set_messages(turn.trigger, status="parked", error=result.error)
            raise Deferred()
        if result.redeliver:
            delay = self.holds.start(handle, group, box, result)
            await self._set_messages(
                turn.trigger,
                status="queued",
                error=result.error,
                error_kind=result.error_kind,
                outcome=result.outcome,
                turn_id=turn.turn_id,
                retry_in_seconds=round(delay, 3),
            )
            raise TurnRedelivery(
                f"turn {turn.turn_id} {result.outcome}: {result.error_kind or ''}", delay=delay
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
