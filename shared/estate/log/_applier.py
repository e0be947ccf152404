"""The applier: one per domain per data node (ES-16, ES-17, ES-19, ES-20, ES-24, ES-39, ES-40).

It reads its domain's log through a durable pull consumer of its own, named after the node, with
the stream's replicas: an R1 consumer is placed on one member (the stream leader at creation) and is
unreachable for as long as that member is down, which would stop every copy whose reader sits there;
an R3 consumer costs ~60 ms once at boot (infra-facts §3) and elects a new leader in seconds.
It applies records in batches. Each batch commits in one ``BEGIN IMMEDIATE`` transaction together
with the domain checkpoint, the per-subject anchors and the ledger rows; the consumer is acked
(AckAll, through the batch's last record) only after the commit. Apply is deterministic: it reads the
record and the rows only.

Resume from rows, never from the reader (ES-17): at start the checkpoint in SQLite is compared with
the consumer's acknowledged floor; a consumer that disagrees is deleted and recreated at the
checkpoint, logging ``jetstream_domain_consumer_rebuilt`` with its ``drift``. A clean restart logs
nothing. A record whose sequence the checkpoint already covers is skipped (a redelivery), and a
record whose op id the ledger already holds folds to nothing (a repeat past the broker's window).

Apply failures (ES-20) are retried in place: ``statelog_apply_retrying`` (WARN) once per run of
failures, ``statelog_apply_faulted`` (ERROR) after the retry budget — the copy is then out of
service — and ``statelog_apply_recovered`` (INFO) with ``after`` and the last error. A record this
build cannot decode stops the applier (``statelog_applier_stopped``) rather than being skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any, Literal

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js import api as jsapi
from sqlalchemy import Connection

from shared import logs

from .._tasks import stop_task
from ..store._store import EstateStore
from ._batch import ApplyFn, ApplyOutcome, FailingRun, apply_batch
from ._consumer import consumer_config, consumer_drift, consumer_name, log_mismatch
from ._ids import STREAMS, is_compacted
from ._record import Record

__all__ = ["LAGGING_RECORDS", "STALL_AFTER", "ApplyOutcome", "ApplyFn", "Applier", "CopyState"]

_log = logs.get("statelog")

LAGGING_RECORDS = 1000
"""A copy more than this many records short of its log's end lags (ES-39)."""

STALL_AFTER = 60.0
"""Seconds an applier may make no progress while records wait before its copy refuses reads
``stalled`` (ES-29: "still for a minute with records waiting"); see :meth:`Applier.stalled`."""

CopyState = Literal["serving", "lagging", "out_of_service"]


class Applier:
    """One domain's applier on one data node.

    Args:
        domain: ``tracker`` or ``pages``.
        js: The JetStream context of the node's connection.
        store: The estate file.
        node_id: This node's id (names the consumer).
        apply: The domain's apply function.
        stream_created_at: The stream's creation instant (unix µs), stored in the checkpoint.
        retry_budget: Seconds of failing applies before the copy faults (ES-20: 30).
        batch: Records per fetch and per transaction at most.

    Attributes:
        applied: The checkpoint: highest sequence applied (contiguous prefix).
        log_last: The highest sequence known to be on the log.
        drained: True once the applier reached the log's end since start (ES-39).
        faulted: True past the retry budget (ES-20) or after a stop for a reason retrying cannot fix.
        compacted: The log keeps one message per subject (AG-1): a gap in the sequence is a
            superseded record, never a copy below its log.
        fault: Fault-injection seam: when set, called in the writer thread before each batch;
            raising makes the batch fail (ES-20 tests).
    """

    def __init__(
        self,
        *,
        domain: str,
        js: JetStreamContext,
        store: EstateStore,
        node_id: str,
        apply: ApplyFn,
        stream_created_at: int = 0,
        retry_budget: float = 30.0,
        batch: int = 256,
    ) -> None:
        self.domain = domain
        self.stream = STREAMS[domain]
        self.compacted = is_compacted(domain)
        self._js = js
        self._store = store
        self._node = node_id
        self._apply = apply
        self._created_at = stream_created_at
        self._budget = retry_budget
        self._batch = batch
        self._durable = consumer_name(domain, node_id)
        self._cond = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._sub: Any = None
        self._stopping = False
        self._running = asyncio.Event()
        self._running.set()
        self.applied = 0
        self.log_last = 0
        self.drained = False
        self.faulted = False
        self.halted = ""
        self.moved_at = time.monotonic()
        self.behind_since: float | None = None
        self.fault: Callable[[], None] | None = None
        self.on_drained: Callable[[], None] | None = None
        self.refusing = ""
        """Why the copy answers nothing although the applier did not fault (ES-57/58): ``below_floor``
        (its next record is gone from the log: it must adopt a snapshot), ``adopting`` (an install is
        in progress) or ``estate_lost`` (the file could not be reopened); empty otherwise."""
        self.on_below: Callable[[], None] | None = None
        """Called once when a fetch shows the log's first record beyond this copy's next (ES-58)."""
        self.evicted = False
        """True while this copy's own node stands evicted on this log (ES-40, ES-51): set by the
        position heartbeat from the applied gate records; readmission clears it."""

    # -- lifecycle ---------------------------------------------------------------------------

    async def prime(self) -> None:
        """Read the checkpoint into :attr:`applied` without starting (a boot that may adopt first)."""
        cp = await self._store.checkpoint(self.domain)
        self.applied = cp.seq if cp is not None else 0
        self.log_last = max(self.log_last, self.applied)

    def reset(self) -> None:
        """Forget the in-memory state of a stopped applier (after an install: ES-57, ES-58).

        :meth:`start` then resumes from the new file's checkpoint; the consumer is rebuilt with drift
        ``behind_checkpoint`` (ES-17).
        """
        self._stopping = False
        self._task = None
        self._sub = None
        self._running.set()
        self.applied = 0
        self.log_last = 0
        self.drained = False
        self.faulted = False
        self.halted = ""
        self.moved_at = time.monotonic()
        self.behind_since = None

    @property
    def running(self) -> bool:
        """True while the apply loop runs."""
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        """Resume from the checkpoint (ES-17) and start applying.

        Raises:
            Refused: the consumer could not be read or created (``broker_unreachable``).
        """
        cp = await self._store.checkpoint(self.domain)
        self.applied = cp.seq if cp is not None else 0
        self.log_last = self.applied
        if cp is not None and cp.seq > 0 and await self._keyed_elsewhere(cp.seq, cp.stream_created_at):
            return  # out of service: never apply (or skip) a log the rows are not keyed to (ES-90)
        await self._reconcile()
        with contextlib.suppress(nats.js.errors.APIError, nats.errors.Error, asyncio.TimeoutError):
            info = await self._js.stream_info(self.stream)
            self.log_last = max(self.applied, int(info.state.last_seq))
            if self.applied >= self.log_last:
                self._level()  # nothing to replay: level at once (ES-39), no first fetch to wait out
        self._task = asyncio.create_task(self._loop(), name=f"applier-{self.domain}")

    async def last_on_log(self) -> int | None:
        """The log's last sequence as the broker says now (a stream info request), or None when the
        broker could not be asked. Used to tell a position no write ever produced from one this copy
        has not reached yet (issue 17)."""
        with contextlib.suppress(nats.js.errors.APIError, nats.errors.Error, asyncio.TimeoutError):
            info = await self._js.stream_info(self.stream)
            return int(info.state.last_seq)
        return None

    async def _keyed_elsewhere(self, seq: int, created_at: int) -> bool:
        """True (and the copy stops, out of service) when the rows are keyed to another log (ES-90):
        see :func:`~shared.estate.log._consumer.log_mismatch`. An unreadable stream decides nothing here
        (the loop's reader errors say so)."""
        try:
            info = await self._js.stream_info(self.stream)
        except (TimeoutError, nats.js.errors.APIError, nats.errors.Error):
            return False
        last = int(info.state.last_seq)
        verdict = log_mismatch(seq, created_at, self._created_at, last)
        if verdict is None:
            return False
        event, reason = verdict
        self.halted = f"{reason} ({self.stream}: checkpoint {seq}, log last {last})"
        self._stopping = True
        _log.error(
            event,
            domain=self.domain,
            stream=self.stream,
            checkpoint=seq,
            log_last=last,
            checkpoint_stream_created_at=created_at,
            stream_created_at=self._created_at,
            remedy="restore the log together with the rows, or move the estate file aside to replay afresh",
        )
        return True

    async def _reconcile(self) -> None:
        info: jsapi.ConsumerInfo | None
        try:
            info = await self._js.consumer_info(self.stream, self._durable)
        except nats.js.errors.NotFoundError:
            info = None
        drift, acked, delivered = consumer_drift(info, self.applied)
        if info is not None:
            if drift:
                with contextlib.suppress(nats.js.errors.NotFoundError):
                    await self._js.delete_consumer(self.stream, self._durable)
                level = _log.warning if drift == "acknowledged_past_checkpoint" else _log.info
                level(
                    "jetstream_domain_consumer_rebuilt",
                    domain=self.domain,
                    stream=self.stream,
                    drift=drift,
                    checkpoint=self.applied,
                    consumer_acked=acked,
                    consumer_delivered=delivered,
                )
        if info is None or drift:
            await self._create_consumer()

    async def _create_consumer(self) -> None:
        cfg = consumer_config(self._durable, self.applied)
        # A member that just joined a cluster (a replacement after a removal) is answered 10023
        # "insufficient resources" while the metadata group still places its first assets: retry
        # for up to 15 s before failing the boot (FL-28's create budget is larger still).
        deadline = time.monotonic() + 15.0
        while True:
            try:
                await self._js.add_consumer(self.stream, cfg)
                return
            except nats.js.errors.APIError as e:
                if e.err_code != 10023 or time.monotonic() >= deadline:
                    raise
                _log.info("jetstream_consumer_awaiting_resources", stream=self.stream, durable=self._durable)
                await asyncio.sleep(0.5)

    async def stop(self) -> None:
        """Finish the batch in hand (fetches wait at most 1 s) and stop; idempotent."""
        self._stopping = True
        self._running.set()
        if self._task is not None:
            await stop_task(self._task, name=f"estate-applier-{self.domain}", grace=5.0)
            self._task = None

    def pause(self) -> None:
        """Hold the applier after its current batch (a test seam for ES-11's ``pending``)."""
        self._running.clear()

    def resume(self) -> None:
        """Release :meth:`pause`."""
        self._running.set()

    # -- state ---------------------------------------------------------------------------------

    @property
    def lag(self) -> int:
        """Records known to be on the log and not applied here."""
        return max(0, self.log_last - self.applied)

    def copy_state(self) -> CopyState:
        """``serving``, ``lagging`` (ES-39) or ``out_of_service`` (ES-40: faulted or halted; ES-57/58:
        :attr:`refusing`)."""
        if self.faulted or self.halted or self.refusing or self.evicted:
            return "out_of_service"
        if not self.drained or self.lag > LAGGING_RECORDS:
            return "lagging"
        return "serving"

    def stalled(self, now: float | None = None) -> bool:
        """True when faulted, halted, refusing, or still for :data:`STALL_AFTER` seconds with records
        waiting (ES-29 ``stalled``).

        "Still" is judged by the applier's progress, never by the time since its last commit alone
        (issue 17): :attr:`moved_at` moves when a batch is taken in hand, when one commits, and
        whenever a fetch finds the copy level with the log. So a busy applier (a batch in hand,
        the first record after a long idle spell, a burst of writes) is not stalled and a stale read
        is served; an applier whose records wait while it takes none, or whose batch has not
        committed for a minute, is.

        Args:
            now: The ``time.monotonic()`` instant to judge at (None: now).
        """
        if self.faulted or self.halted or self.refusing:
            return True
        at = time.monotonic() if now is None else now
        return self.lag > 0 and at - self.moved_at > STALL_AFTER

    def note_log_end(self, last_seq: int) -> None:
        """Record the log's last sequence as read from the broker (heartbeat, ES-23)."""
        self.log_last = max(self.log_last, last_seq)

    async def wait_applied(self, seq: int, timeout: float) -> bool:
        """Wait until the checkpoint reaches ``seq``; False after ``timeout`` seconds."""
        if self.applied >= seq:
            return True
        if timeout <= 0:
            return False
        try:
            async with self._cond:
                await asyncio.wait_for(self._cond.wait_for(lambda: self.applied >= seq), timeout)
            return True
        except TimeoutError:
            return self.applied >= seq

    async def wait_drained(self, timeout: float) -> bool:
        """Wait until the applier has reached the log's end once; False after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not self.drained and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return self.drained

    # -- the loop ------------------------------------------------------------------------------

    async def _loop(self) -> None:
        try:
            await self._loop_inner()
        finally:
            if self._sub is not None:
                with contextlib.suppress(Exception):
                    await self._sub.unsubscribe()  # a drained connection must not wait on this reader
                self._sub = None

    async def _loop_inner(self) -> None:
        errors = 0
        while not self._stopping:
            await self._running.wait()
            if self._stopping:
                break
            try:
                if self._sub is None:
                    self._sub = await self._js.pull_subscribe_bind(self._durable, self.stream)
                msgs = await self._sub.fetch(self._batch, timeout=1.0)
                errors = 0
            except (nats.errors.TimeoutError, TimeoutError) as e:
                if self._sub is None:  # the bind itself timed out: a reader error, below
                    errors = await self._reader_error(e, errors)
                    continue
                # nothing arrived within the fetch's second; nats-py sometimes says so with a bare
                # TimeoutError (an OSError), which is no more a reader error than its own kind
                self._level()
                continue
            except (nats.js.errors.APIError, nats.errors.Error, OSError) as e:
                errors = await self._reader_error(e, errors)
                continue
            if not msgs:
                continue
            self.moved_at = time.monotonic()  # a batch in hand: busy, not still (issue 17)
            await self._apply_msgs(msgs)

    async def _reader_error(self, e: BaseException, errors: int) -> int:
        """Log a failed bind or fetch, back off, and after three in a row re-check the consumer
        and bind afresh; return the new count of errors in a row."""
        errors += 1
        _log.warning("statelog_reader_error", domain=self.domain, error=f"{type(e).__name__}: {e}")
        await asyncio.sleep(min(0.25 * errors, 2.0))
        if errors >= 3:
            with contextlib.suppress(Exception):
                await self._reconcile_or_create()
            if self._sub is not None:
                with contextlib.suppress(Exception):
                    await self._sub.unsubscribe()
            self._sub = None
        return errors

    async def _reconcile_or_create(self) -> None:
        try:
            await self._reconcile()
        except nats.js.errors.ServiceUnavailableError:
            await self._create_consumer()

    def _level(self) -> None:
        self.log_last = max(self.log_last, self.applied)
        if self.lag == 0:
            self.moved_at = time.monotonic()  # level: nothing waits, so nothing is still (issue 17)
            self.behind_since = None
            if not self.drained:
                self.drained = True
                if self.on_drained is not None:
                    self.on_drained()

    async def _apply_msgs(self, msgs: list[Msg]) -> None:
        items: list[tuple[Record, int, int]] = []
        last = msgs[-1]
        expect = self.applied + 1
        for m in msgs:
            md = m.metadata
            seq = int(md.sequence.stream)
            self.log_last = max(self.log_last, seq + int(md.num_pending or 0))
            if seq <= self.applied:
                continue  # a redelivery of something the checkpoint covers
            if seq > expect and not items and not self.compacted and await self._below_log():
                return
            expect = seq + 1
            try:
                rec = Record.decode(m.data)
            except (ValueError, KeyError, TypeError) as e:
                self._halt(f"undecodable record at {self.stream}:{seq}: {e}", seq)
                return
            stored = int(md.timestamp.timestamp() * 1_000_000) if md.timestamp else 0
            items.append((rec, seq, stored))
        if items:
            if self.behind_since is None and self.lag > 0:
                self.behind_since = time.monotonic()
            await self._commit_with_retry(items)
            if self._stopping and self.applied < items[-1][1]:
                return
        with contextlib.suppress(Exception):
            await last.ack()
        if self.lag == 0:
            self._level()

    async def _below_log(self) -> bool:
        """True (and the loop stops, refusing ``below_floor``) when the log's first record is past our next."""
        try:
            info = await self._js.stream_info(self.stream)
        except (TimeoutError, nats.js.errors.APIError, nats.errors.Error):
            return False
        first = int(info.state.first_seq)
        if first <= self.applied + 1:
            return False
        self.refusing = "below_floor"
        self._stopping = True
        _log.warning(
            "statelog_below_log",
            domain=self.domain,
            stream=self.stream,
            checkpoint=self.applied,
            first_seq=first,
        )
        if self.on_below is not None:
            self.on_below()
        return True

    def _halt(self, reason: str, seq: int) -> None:
        if not self.halted:
            self.halted = reason
            _log.error(
                "statelog_applier_stopped",
                domain=self.domain,
                stream=self.stream,
                position=self.applied,
                at_seq=seq,
                reason=reason,
            )
        self._stopping = True

    async def _commit_with_retry(self, items: list[tuple[Record, int, int]]) -> None:
        run = FailingRun(self.domain, self._budget)
        while True:
            try:
                await self._store.write(lambda conn: self._apply_batch(conn, items), fast=True)
                break
            except Exception as e:  # noqa: BLE001 - every apply failure is named and retried (ES-20)
                if run.failed(e, self.applied, self.faulted):
                    self.faulted = True
                if self._stopping:
                    return
                await asyncio.sleep(min(0.1 * run.attempt, 1.0))
        if run.since is not None:
            self.faulted = False
            run.recovered(items[-1][1])
        async with self._cond:
            self.applied = items[-1][1]
            self.moved_at = time.monotonic()
            self._cond.notify_all()

    def _apply_batch(self, conn: Connection, items: list[tuple[Record, int, int]]) -> None:
        if self.fault is not None:
            self.fault()
        apply_batch(
            conn,
            items,
            domain=self.domain,
            stream=self.stream,
            created_at=self._created_at,
            apply=self._apply,
        )
