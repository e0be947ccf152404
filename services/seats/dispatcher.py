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

A voluntary release (drain, placement) lets the running turn finish before the mailbox detaches,
and the batch's later groups are deferred (the stopping seat refuses them), so the successor gets
exactly what this node never acked (FL-65); a lost lease detaches at once: the running turn is
stopped by its fence and its ack is refused (FL-66).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import uuid
from collections.abc import Callable, Mapping
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
from shared.coordination import CoordinationUnavailable, RevisionConflict
from shared.leases import FENCED_REASONS, Ledger, SeatHost
from shared.mcp import McpPool, resolve_seat_servers
from shared.records import TurnStore
from shared.router import open_router
from shared.runtime import NodeContext
from shared.turns import Trigger, TurnEngine, merge_triggers, partition

from .workspace import RouterWorkspace

__all__ = ["Dispatcher", "TurnRedelivery"]

_log = logs.get("seat.dispatcher")
_UNPARK_INTERVAL = 5.0
"""Seconds between checks of a parked seat's budget (CO-37, ours): a window that turned, a raised
ceiling or a reset on any node releases it within this long (an apply checks at once)."""


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
        box = await self.bus.attach(handle, epoch)
        self.boxes[handle] = box
        self._stopping.discard(handle)
        self.ctx.seats_held[handle] = epoch
        self.loops[handle] = asyncio.create_task(self._loop(handle, box), name=f"seat-{handle}")

    async def on_release(self, handle: str, reason: str) -> None:
        """Stop fetching; on a voluntary release let the running turn finish; then detach (FL-65, FL-66)."""
        self._stopping.add(handle)
        self.ctx.seats_held.pop(handle, None)
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

    # -- one delivery --------------------------------------------------------------------------

    async def _set_message(self, payload: Mapping[str, Any], **fields: Any) -> None:
        message_id = payload.get("message_id") if isinstance(payload, dict) else None
        if not message_id or self.ctx.coord is None:
            return
        # compare-and-set at the revision read: a status write delayed past a partition cannot land
        # over a newer one written meanwhile (e.g. by the seat's successor)
        for _ in range(5):
            try:
                entry = await self.ctx.coord.get("messages", str(message_id))
                record = json.loads(entry.value) if entry is not None else {"message_id": message_id}
                record.update(fields)
                await self.ctx.coord.update(
                    "messages",
                    str(message_id),
                    json.dumps(record).encode(),
                    revision=entry.revision if entry is not None else 0,
                )
                return
            except RevisionConflict:
                continue
            except CoordinationUnavailable as e:
                _log.warning("message_status_unknown", message_id=message_id, error=str(e))
                return
        _log.warning("message_status_contended", message_id=message_id)

    async def _set_messages(self, trigger: Trigger, **fields: Any) -> None:
        """Write ``fields`` into the status of every API message the trigger stands for (CO-8, CO-38)."""
        await asyncio.gather(
            *(self._set_message(part.payload, **fields) for part in trigger.parts or (trigger,))
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
            await self._set_messages(trigger, status="queued", error=result.error)
            raise TurnRedelivery(
                f"turn {turn_id} {result.outcome}: {result.error_kind or ''}", delay=result.retry_after
            )
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
        reply = result.final_text or (result.submission.summary if result.submission is not None else "")
        if result.failed:
            await self._set_messages(
                trigger, status="failed", error=result.error or result.error_kind, turn_id=turn_id
            )
        else:
            await self._set_messages(trigger, status="answered", reply=reply, turn_id=turn_id, error=None)

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
