"""Writing a seat's memory (AG-1, AG-2): the broker arbitrates, an outbox covers a broker away.

Writers are the holder's tools, the reflect dispatcher and the learning duty, on any node (a
satellite too: a write is a publish, not an estate call). An immutable create expects no record on
its subject, so the first writer fleet-wide wins and a refused twin is a *collapse* (counted
``crewlet_memory_collapsed_total{table}``); a mutable row (and a later stamp on an immutable one) is
compare-and-set on the sequence its writer read, retried up to 16 rounds. A deletion is a tombstone.
Writes are not epoch-fenced: a turn that acked before its node lost the lease keeps its episode.

A publish the broker did not take (no quorum, unreachable, unanswered and not found landed) goes to
the node's outbox (``memory_publish_deferred``) and never fails the turn; the outbox is flushed
every 30 s and on graceful release. The writer remembers, per seat, the highest sequence it
published (:meth:`MemoryWriter.floor`): the writer's next read of that seat's memory waits for it
(ES-37). Release forgets it (:meth:`MemoryWriter.forget`, AG-7).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from shared import logs
from shared.estate import InvalidField, Refused
from shared.estate.domains.memory import IMMUTABLE, memory_record, memory_subject, parse_subject
from shared.estate.log import AppendConflict, AppendUnanswered, StateLog

from ._outbox import Outbox

__all__ = ["CAS_ROUNDS", "FLUSH_EVERY", "MemoryWrite", "MemoryWriter"]

CAS_ROUNDS = 16
"""Compare-and-set rounds before a mutable write gives up ``contended`` (fleet.md §25)."""

FLUSH_EVERY = 30.0
"""Seconds between outbox flushes (FL-71)."""

_log = logs.get("memory")

Status = Literal["written", "collapsed", "deferred", "unchanged", "contended"]


@dataclass(frozen=True)
class MemoryWrite:
    """What one memory write did.

    Attributes:
        status: ``written`` (on the log at ``seq``), ``collapsed`` (a first writer made it: ``seq``
            is that record's), ``deferred`` (in the outbox), ``unchanged`` (nothing to write),
            ``contended`` (16 compare-and-set rounds lost).
        subject: The row's subject.
        seq: The log sequence, 0 when none.
    """

    status: Status
    subject: str
    seq: int = 0


class MemoryWriter:
    """The memory writer of one node (AG-2).

    Args:
        log: The node's :class:`~shared.estate.log.StateLog` (its JetStream connection).
        node_id: This node (every record names its writer, ES-5).
        outbox: The node's outbox.
        is_agent: Says whether a handle is an agent seat; None accepts any (tests, tools that
            already resolved the seat).
        metrics: The node's :class:`~shared.telemetry.TurnMetrics`, or None.
        clock: Unix seconds.
    """

    def __init__(
        self,
        log: StateLog,
        *,
        node_id: str,
        outbox: Outbox,
        is_agent: Callable[[str], bool] | None = None,
        metrics: Any = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._log = log
        self._node = node_id
        self.outbox = outbox
        self._is_agent = is_agent
        self._metrics = metrics
        self._clock = clock
        self._floors: dict[str, int] = {}
        self.listeners: list[Callable[[str, int, dict[str, Any] | None, int], None]] = []
        """Called as ``listener(subject, seq, row or None, at)`` after each write the broker took
        (a satellite's scratch cache applies its own acknowledged writes this way, AG-7)."""
        self._task: asyncio.Task[None] | None = None
        self._gauge()

    # -- the three writes ------------------------------------------------------------------------------

    async def create(
        self, handle: str, table: str, natural_key: tuple[str, ...], row: dict[str, Any]
    ) -> MemoryWrite:
        """Create an immutable row; the first writer fleet-wide wins (AG-1).

        Raises:
            InvalidField: a bad handle or table, or ``table`` is not immutable.
            Refused: ``human_seat`` when ``handle`` is no agent seat.
            TooLarge: the record is over 64 KiB (``memory_record``).
        """
        subject = self._subject(handle, table, natural_key)
        if table not in IMMUTABLE:
            raise InvalidField("table", f"{table} rows are mutable: use update")
        rec = memory_record(subject=subject, row=row, writer=self._node, at=self._now_us(), immutable=True)
        try:
            seq, _dup = await self._log.append(rec, expect=0)
        except AppendConflict as e:
            return self._collapsed(subject, table, e.last_seq or 0)
        except AppendUnanswered:
            landed = await self._landed(subject, rec.op_id)
            if landed:
                return self._written(handle, subject, landed, row, rec.at)
            return self._defer(subject, row, immutable=True)
        except Refused:
            return self._defer(subject, row, immutable=True)
        return self._written(handle, subject, seq, row, rec.at)

    async def update(
        self,
        handle: str,
        table: str,
        natural_key: tuple[str, ...],
        change: Callable[[dict[str, Any] | None], dict[str, Any] | None],
    ) -> MemoryWrite:
        """Compare-and-set one row: ``change(current row or None)`` returns the new row, or None
        (or the same row) to leave it; retried on a conflict up to :data:`CAS_ROUNDS` rounds.

        Raises:
            InvalidField, Refused (``human_seat``), TooLarge: as :meth:`create`.
        """
        subject = self._subject(handle, table, natural_key)
        new: dict[str, Any] | None = None
        for _ in range(CAS_ROUNDS):
            try:
                head = await self._log.last_record("memory", subject)
            except (Refused, ValueError):
                head = None
                if new is not None:
                    return self._defer(subject, new, immutable=False)
                raise
            seq = head[0] if head else 0
            current = head[1].payload.get("row") if head and head[1].kind == "memory_put" else None
            new = change(dict(current) if isinstance(current, dict) else None)
            if new is None or new == current:
                return MemoryWrite("unchanged", subject, seq)
            rec = memory_record(
                subject=subject, row=new, writer=self._node, at=self._now_us(), immutable=False
            )
            try:
                landed, _dup = await self._log.append(rec, expect=seq)
            except AppendConflict:
                continue
            except (AppendUnanswered, Refused):
                return self._defer(subject, new, immutable=False)
            return self._written(handle, subject, landed, new, rec.at)
        return MemoryWrite("contended", subject)

    async def delete(self, handle: str, table: str, natural_key: tuple[str, ...]) -> MemoryWrite:
        """Tombstone one row (AG-1): every copy deletes it when it applies the tombstone."""
        subject = self._subject(handle, table, natural_key)
        return await self._tombstone(handle, subject)

    async def _tombstone(self, handle: str, subject: str) -> MemoryWrite:
        rec = memory_record(subject=subject, row=None, writer=self._node, at=self._now_us(), immutable=False)
        try:
            seq, _dup = await self._log.append(rec, expect=None)
        except (AppendUnanswered, Refused):
            return self._defer(subject, None, immutable=False)
        return self._written(handle, subject, seq, None, rec.at)

    # -- floors -----------------------------------------------------------------------------------------

    def floor(self, handle: str) -> int:
        """The highest sequence this node published for ``handle``'s memory (0: none)."""
        return self._floors.get(handle, 0)

    def forget(self, handle: str) -> None:
        """Forget ``handle``'s publish watermark (on release, AG-7)."""
        self._floors.pop(handle, None)

    # -- the outbox -------------------------------------------------------------------------------------

    async def flush(self) -> int:
        """Publish what waits in the outbox, oldest first; stop at the first refusal.

        Returns:
            How many waiting writes left the outbox (published or collapsed).
        """
        gone = 0
        for w in self.outbox.waiting():
            parsed = parse_subject(w.subject)
            if parsed is None:
                self.outbox.done(w.subject, w.queued_at)
                continue
            handle, table, _key = parsed
            try:
                if w.row is None:
                    rec = memory_record(
                        subject=w.subject, row=None, writer=self._node, at=self._now_us(), immutable=False
                    )
                    seq, _ = await self._log.append(rec, expect=None)
                elif w.immutable:
                    rec = memory_record(
                        subject=w.subject, row=w.row, writer=self._node, at=self._now_us(), immutable=True
                    )
                    try:
                        seq, _ = await self._log.append(rec, expect=0)
                    except AppendConflict as e:
                        self._collapsed(w.subject, table, e.last_seq or 0)
                        seq = 0
                else:  # the newest state we meant, over whatever is there now (last writer wins on retry)
                    head = await self._log.last_record("memory", w.subject)
                    rec = memory_record(
                        subject=w.subject, row=w.row, writer=self._node, at=self._now_us(), immutable=False
                    )
                    seq, _ = await self._log.append(rec, expect=head[0] if head else 0)
            except AppendConflict:
                continue  # someone wrote meanwhile; the next flush tries again on the new head
            except (AppendUnanswered, Refused, ValueError):
                break
            self.outbox.done(w.subject, w.queued_at)
            if seq:
                self._written(handle, w.subject, seq, w.row, self._now_us())
            gone += 1
        self._gauge()
        return gone

    def start(self) -> None:
        """Start flushing the outbox every :data:`FLUSH_EVERY` seconds."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="memory-outbox")

    async def stop(self) -> None:
        """Stop the loop and flush once more (graceful release, AG-2)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        with contextlib.suppress(Exception):
            await self.flush()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_EVERY)
            try:
                await self.flush()
            except Exception as e:  # noqa: BLE001 — the loop outlives one bad flush
                _log.warning("memory_outbox_flush_failed", error=f"{type(e).__name__}: {e}")

    # -- helpers ----------------------------------------------------------------------------------------

    def _subject(self, handle: str, table: str, natural_key: tuple[str, ...]) -> str:
        if self._is_agent is not None and not self._is_agent(handle):
            raise Refused("human_seat", f"{handle} is not an agent seat: memory is kept for agent seats only")
        return memory_subject(handle, table, *natural_key)

    def _now_us(self) -> int:
        return int(self._clock() * 1_000_000)

    def _written(
        self, handle: str, subject: str, seq: int, row: dict[str, Any] | None, at: int
    ) -> MemoryWrite:
        self._floors[handle] = max(self._floors.get(handle, 0), seq)
        for listener in list(self.listeners):
            try:
                listener(subject, seq, row, at)
            except Exception as e:  # noqa: BLE001 — a listener never fails the write
                _log.warning("memory_listener_failed", subject=subject, error=f"{type(e).__name__}: {e}")
        return MemoryWrite("written", subject, seq)

    def _collapsed(self, subject: str, table: str, seq: int) -> MemoryWrite:
        if self._metrics is not None:
            self._metrics.memory_collapsed.labels(table).inc()
        _log.info("memory_row_collapsed", subject=subject, table=table)
        return MemoryWrite("collapsed", subject, seq)

    def _defer(self, subject: str, row: dict[str, Any] | None, *, immutable: bool) -> MemoryWrite:
        self.outbox.put(subject, row, immutable=immutable)
        _log.warning("memory_publish_deferred", subject=subject, depth=self.outbox.depth())
        self._gauge()
        return MemoryWrite("deferred", subject)

    async def _landed(self, subject: str, op_id: str) -> int:
        with contextlib.suppress(Refused, ValueError):
            head = await self._log.last_record("memory", subject)
            if head is not None and head[1].op_id == op_id:
                return head[0]
        return 0

    def _gauge(self) -> None:
        if self._metrics is not None:
            self._metrics.memory_outbox_depth.set(self.outbox.depth())
