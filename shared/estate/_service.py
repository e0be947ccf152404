"""One data node's estate, answering calls (ES-25..ES-29, ES-34, ES-37, ES-39, ES-40, ES-65).

:class:`EstateService` is what the router asks — in-process on a data node, over NATS from peers.
Before running anything it checks its copy: out of service (applier faulted or halted, ES-40) →
``ran_nothing: not_serving``; lagging (ES-39) → ``ran_nothing: lagging`` unless ``take_anyway``.
Every call then waits up to 2 s for the asker's floors and ``min_position`` (ES-27, ES-37), else
``behind``. Reads are served at the level asked (ES-25) and report the level and lag actually served.

The write fence (ES-50): before a write — and a read, which makes the same split — the copy's
checkpoint must hold everything at or below ``max(floor, first_seq - 1)``, the published trim floor
(``trim_floors`` ``<domain>``) and the log's first sequence. Both are read at most once per
``floor_ttl`` (one heartbeat, 10 s) and re-read before any refusal. Short of it the call is refused
``behind`` (retry here) when replay can still close it (``first_seq <= checkpoint + 1``, after
waiting up to the floor wait for the applier) or ``below_floor`` (the router moves on) when only a
snapshot can. A floor that cannot be read refuses writes ``floor_unknown`` (retry in 4 s) once the
last reading is four heartbeats old (or there never was one), and then raises the ``floor_unknown``
alarm (ES-92); until then, and for reads always, the last floor known stands (a copy's stale read
needs no broker).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from shared import logs
from shared.coordination import Coordination, CoordinationUnavailable
from shared.text import not_text

from ._alarms import Alarms
from ._errors import EstateError, Fenced, InvalidField, OutcomeUnknown, Refused, to_wire
from ._protocol import Answer, Call, Status
from ._search_answer import search_answer
from .domains import OPS, ReadOp, WriteOp, reads, writes
from .log._applier import Applier
from .log._decide import DecideCtx, Rules
from .log._ids import COMPACTED, GENERATION, Position, mint_op_id, validate_op_id
from .log._log import StateLog
from .log._writer import Writer
from .store._store import EstateStore

__all__ = ["EstateService", "FLOOR_TTL", "FLOOR_UNKNOWN_RETRY", "FLOOR_WAIT"]

_log = logs.get("statelog")

FLOOR_WAIT = 2.0
"""Seconds an answering node waits to have applied the asker's floors (ES-37)."""
FLOOR_TTL = 10.0
"""Seconds a read trim floor and log head are reused by the write fence (one heartbeat, ES-50)."""
FLOOR_UNKNOWN_RETRY = 4.0
"""Retry hint of ``floor_unknown`` (ES-29)."""
_FLOOR_ALARM_AFTER = 4
"""Heartbeats a floor stays unreadable before the ``floor_unknown`` alarm (ES-92)."""
_LEVELS = ("linearizable", "session", "stale", "consistent_prefix")
_INLINE_SEARCH = 0.005
"""Seconds: a knowledge search runs on the event loop thread (``EstateStore.read_inline``) while this
copy's recent searches cost less on average (CPU seconds of the searching thread, an exponential mean
of weight :data:`_SEARCH_WEIGHT`): at 10 000 pages a search took 1.6 ms inline and 3.1 ms through a
reader thread on the busy 2-core bench machine; a larger index's searches go to a reader thread, so
the loop is never held long (issue 16, figure 7). CPU time, not wall time: a search descheduled by a
busy machine is not a costly one (time waiting for the disk is not counted either)."""
_SEARCH_WEIGHT = 0.1

ReadFn = Callable[[Connection, dict[str, Any]], Any]


@dataclass
class _FloorFacts:
    floor: int = 0
    first_seq: int = 0
    read_at: float = 0.0
    unread_since: float | None = None
    known: bool = False


class EstateService:
    """A data node's copy, callable (ES-32: the router's local handler and the RPC server's backend).

    Args:
        node_id: This node's id.
        store: The estate file.
        log: The state logs.
        appliers: Domain → applier.
        rules: Company facts checked at decide time.
        floor_wait: Seconds to wait for floors (ES-37: 2).
        coord: The coordination store, to read the published trim floors (``trim_floors``) for the
            write fence (ES-50); None: no floor is known to be published (0), the log's first
            sequence still fences.
        floor_ttl: Seconds a read floor and log head are reused (one heartbeat: 10).

    Attributes:
        on_write: Called with ``(op, call, answer)`` after every write that ran (the event log hook).
        coord: As the argument; the data role may set it after construction.
        alarms: This copy's ``floor_unknown`` alarm (ES-92).
    """

    def __init__(
        self,
        *,
        node_id: str,
        store: EstateStore,
        log: StateLog,
        appliers: dict[str, Applier],
        rules: Rules | None = None,
        floor_wait: float = FLOOR_WAIT,
        coord: Coordination | None = None,
        floor_ttl: float = FLOOR_TTL,
    ) -> None:
        self.node_id = node_id
        self.coord = coord
        self.floor_ttl = floor_ttl
        self.alarms = Alarms()
        self._floors: dict[str, _FloorFacts] = {}
        self.store = store
        self.log = log
        self.appliers = appliers
        self.rules = rules or Rules()
        self.writer = Writer(store, log, appliers)
        self._floor_wait = floor_wait
        self._writes: dict[str, WriteOp] = writes()
        self._not_served_logged: set[str] = set()
        self._search_cost = 0.0
        """CPU seconds a knowledge search took here lately (:data:`_INLINE_SEARCH`)."""
        self.on_write: Callable[[str, Call, dict[str, Any]], None] | None = None
        self.fence_check: Callable[[str, int], Awaitable[bool]] | None = None
        """Set by the data role: ``fence_check(seat, epoch)`` is True while ``epoch`` may still write
        for ``seat`` (FL-74). A write whose args carry ``fence: {seat, epoch}`` is refused as
        :class:`Fenced` when it answers False; the check raising (the store could not be asked)
        refuses it retryably (``fence_unknown``)."""
        self.searcher: Callable[[Call], Awaitable[Answer]] | None = None
        """Set by the data role: answers ``pages.search`` (the divided search, ES-62), scanning
        through :meth:`serve_copy`; None answers it from this copy alone."""
        self._reads: dict[str, ReadOp] = reads()

    # -- state -------------------------------------------------------------------------------

    def positions(self) -> dict[str, int]:
        """Stream → the sequence this copy has applied."""
        return {a.stream: a.applied for a in self.appliers.values()}

    def copy_state(self, domain: str) -> str:
        """``serving``, ``lagging`` or ``out_of_service`` for ``domain``'s copy (ES-39, ES-40)."""
        state = self.appliers[domain].copy_state()
        if state == "out_of_service" and domain not in self._not_served_logged:
            self._not_served_logged.add(domain)
            _log.error(
                "estate_partition_not_served",
                domain=domain,
                reason=self.appliers[domain].halted or self.appliers[domain].refusing or "faulted",
            )
        elif state != "out_of_service":
            self._not_served_logged.discard(domain)
        return state

    def in_service(self, domain: str | None = None) -> bool:
        """True when ``domain``'s copy (every domain's when None) is not out of service."""
        domains = [domain] if domain else list(self.appliers)
        return all(self.copy_state(d) != "out_of_service" for d in domains)

    def lagging(self, domain: str | None) -> bool:
        """True when ``domain``'s copy lags its log (ES-39)."""
        return domain is not None and self.copy_state(domain) == "lagging"

    # -- serving ---------------------------------------------------------------------------------

    def _answer(self, status: Status, **kw: Any) -> Answer:
        return Answer(status=status, node=self.node_id, positions=self.positions(), **kw)

    async def _check_fence(self, call: Call) -> None:
        """Refuse a seat's write made under an epoch it no longer holds (FL-74), before anything is appended."""
        fence = call.args.pop("fence", None)
        if not isinstance(fence, dict) or self.fence_check is None:
            return
        seat, epoch = str(fence.get("seat", "")), fence.get("epoch")
        if not isinstance(epoch, int):
            raise InvalidField("fence.epoch", "must be the seat's lease epoch (an integer)")
        try:
            ok = await self.fence_check(seat, epoch)
        except Exception as e:  # noqa: BLE001 - unknown: refuse retryably, never let a zombie through
            raise Refused(
                "fence_unknown", f"cannot check seat {seat!r}'s epoch: {e}", retry_after=1.0
            ) from None
        if not ok:
            _log.warning("estate_write_fenced", seat=seat, epoch=epoch, op=call.op, op_id=call.op_id)
            raise Fenced(seat, epoch)

    async def serve(self, call: Call) -> Answer:
        """Answer one router call: a knowledge search through :attr:`searcher` when one is set (the
        divided search of ES-62, which scans through :meth:`serve_copy` itself), everything else
        through :meth:`serve_copy`. Never raises for a refusal (it is in the answer)."""
        read = self._reads.get(call.op)
        if self.searcher is not None and read is not None and read.search:
            return await self.searcher(call)
        return await self.serve_copy(call)

    async def serve_copy(self, call: Call) -> Answer:
        """Run one call against this copy alone; never raises for a refusal (it is in the answer)."""
        spec = OPS.get(call.op)
        if spec is None:
            return self._answer("ran", error=to_wire(InvalidField("op", f"unknown operation {call.op!r}")))
        domain, kind = spec
        if domain is not None:
            state = self.copy_state(domain)
            if state == "out_of_service":
                return self._answer(
                    "ran_nothing",
                    reason="not_serving",
                    detail=f"the {domain} copy on {self.node_id} is out of service",
                )
            if state == "lagging" and not call.take_anyway:
                a = self.appliers[domain]
                return self._answer(
                    "ran_nothing",
                    reason="lagging",
                    detail=f"{a.lag} records behind {a.stream}" if a.drained else "catching up since start",
                )
        try:
            bad = not_text({"op_id": call.op_id, **call.args}) if call.args or call.op_id else None
            if bad is not None:
                # text no UTF-8 writer can encode (a lone surrogate from a model's tool call): named
                # and refused before any statement or append, never an unknown outcome (issue 17)
                raise InvalidField(*bad)
            if kind == "write":
                assert domain is not None
                await self._check_fence(call)
                await self._check_floor(domain, write=True)
                result = await self._write(call, domain)
            else:
                result = await self._read(call, domain)
            return self._answer("ran", result=result)
        except Refused as r:
            return self._answer("ran_nothing", reason=r.refusal, detail=str(r), retry_after=r.retry_after)
        except OutcomeUnknown as u:
            return self._answer("unvouched", error=to_wire(u), detail=str(u))
        except EstateError as e:
            return self._answer("ran", error=to_wire(e))
        except Exception as e:  # noqa: BLE001 - a caller always gets an answer, never a traceback
            _log.error("estate_call_failed", op=call.op, error=f"{type(e).__name__}: {e}")
            if kind == "write":  # it may have been appended: only the ledger can tell (ES-35)
                lost = OutcomeUnknown(call.op_id or "", f"{type(e).__name__}: {e}")
                return self._answer("unvouched", error=to_wire(lost), detail=str(lost))
            return self._answer("ran_nothing", reason="failed", detail=f"{type(e).__name__}: {e}")

    async def _wait_floor(self, domain: str, call: Call) -> None:
        applier = self.appliers[domain]
        target = int(call.floors.get(applier.stream, 0) or 0)
        if call.min_position:
            target = max(target, Position.parse(call.min_position, domain=domain).seq)
        if target > max(applier.log_last, applier.applied):
            # a position this copy has not heard of: if the log does not hold it either, no write
            # produced it, and waiting (or a Retry-After) would never end (issue 17); a position a
            # write answered is on the log before the answer, so this never refuses a real one
            last = await applier.last_on_log()
            if last is not None and target > last:
                mine = call.min_position and Position.parse(call.min_position, domain=domain).seq == target
                raise InvalidField(
                    "min_position" if mine else "floors",
                    f"{target} is past the end of {applier.stream} (its last record is {last}); "
                    "a position comes from a write's answer",
                )
        if target and not await applier.wait_applied(target, self._floor_wait):
            raise Refused(
                "behind",
                f"{self.node_id} has applied {applier.stream} to {applier.applied}, short of {target}",
                retry_after=1.0,
                node=self.node_id,
            )

    # -- the write fence (ES-50) ---------------------------------------------------------------

    async def _read_floor(self, domain: str) -> int:
        """The published floor of ``domain`` in this generation (0 when none); raises when unreadable."""
        if self.coord is None:
            return 0
        entry = await self.coord.get("trim_floors", domain)
        if entry is None:
            return 0
        try:
            row = json.loads(entry.value)
        except (ValueError, UnicodeDecodeError):
            raise CoordinationUnavailable(f"trim_floors {domain} is not a floor record") from None
        if not isinstance(row, dict) or int(row.get("generation") or 0) != GENERATION:
            return 0  # another generation's floor says nothing about this log
        floor = row.get("floor")
        if not isinstance(floor, int) or floor < 0:
            raise CoordinationUnavailable(f"trim_floors {domain} names no floor")
        return floor

    async def _floor_facts(self, domain: str, *, fresh: bool) -> _FloorFacts:
        """Return ``domain``'s floor and first sequence, re-read when older than ``floor_ttl``."""
        facts = self._floors.setdefault(domain, _FloorFacts())
        now = time.monotonic()
        if facts.known and not fresh and now - facts.read_at < self.floor_ttl:
            return facts
        try:
            floor = await self._read_floor(domain)
            first, _last = await self.log.head(domain)
        except (CoordinationUnavailable, Refused) as e:
            if facts.unread_since is None:
                facts.unread_since = now
            unread = now - facts.unread_since
            self.alarms.set(
                "floor_unknown",
                unread >= _FLOOR_ALARM_AFTER * self.floor_ttl,
                domain=domain,
                unread_seconds=round(unread, 1),
                error=str(e),
            )
            raise Refused(
                "floor_unknown",
                f"the trim floor of {domain} cannot be read: {e}",
                retry_after=FLOOR_UNKNOWN_RETRY,
                node=self.node_id,
            ) from None
        facts.floor = max(facts.floor, floor)  # within a generation the floor never goes down
        facts.first_seq = first
        facts.read_at = now
        facts.known = True
        if facts.unread_since is not None:
            facts.unread_since = None
            self.alarms.set("floor_unknown", False, domain=domain)
        return facts

    async def _check_floor(self, domain: str, *, write: bool) -> None:
        """Refuse a call this copy cannot decide or answer on: below the floor or the log (ES-50).

        Raises:
            Refused: ``below_floor`` (only a snapshot closes it), ``behind`` (replay closes it and
                did not within the floor wait), ``floor_unknown`` (writes only: the floor is unread).
        """
        applier = self.appliers[domain]
        if applier.compacted:  # never trimmed, and a gap is a superseded record (ES-69, AG-1)
            return

        def last_known(refusal: Refused) -> _FloorFacts:
            # a read goes on from the last floor known; a write for four heartbeats after it
            known = self._floors.get(domain)
            if known is None or not known.known:
                raise refusal
            if write and time.monotonic() - known.read_at >= _FLOOR_ALARM_AFTER * self.floor_ttl:
                raise refusal
            return known

        try:
            facts = await self._floor_facts(domain, fresh=False)
        except Refused as r:
            facts = last_known(r)
        if applier.applied >= max(facts.floor, facts.first_seq - 1):
            return
        try:
            facts = await self._floor_facts(domain, fresh=True)  # never refuse on a stale reading
        except Refused as r:
            facts = last_known(r)
        need = max(facts.floor, facts.first_seq - 1)
        if applier.applied >= need:
            return
        if facts.first_seq > applier.applied + 1:
            raise Refused(
                "below_floor",
                f"{self.node_id}'s {domain} copy is at {applier.applied}; {applier.stream} starts at "
                f"{facts.first_seq} (trim floor {facts.floor}): the records between are gone, only a "
                f"snapshot can close it",
                node=self.node_id,
            )
        if await applier.wait_applied(need, self._floor_wait):
            return
        raise Refused(
            "behind",
            f"{self.node_id} has applied {applier.stream} to {applier.applied}, short of the trim floor {need}",
            retry_after=1.0,
            node=self.node_id,
        )

    async def _write(self, call: Call, domain: str) -> dict[str, Any]:
        op_id = validate_op_id(call.op_id) if call.op_id else mint_op_id(call.op.replace(".", "-"))
        await self._wait_floor(domain, call)
        spec = self._writes[call.op]
        ctx = DecideCtx(op_id=op_id, writer=self.node_id, at=int(time.time() * 1_000_000), rules=self.rules)
        answer = await self.writer.write(
            domain,
            op_id,
            lambda conn: spec.decide(conn, ctx, call.args),
            spec.view,
            created=spec.created,
            inline=spec.inline,
        )
        if self.on_write is not None:
            try:
                self.on_write(call.op, call, answer)
            except Exception as e:  # noqa: BLE001 - the event log must never fail a landed write
                _log.warning("estate_event_record_failed", op=call.op, error=f"{type(e).__name__}: {e}")
        return answer

    async def _read(self, call: Call, domain: str | None) -> dict[str, Any]:
        if domain is None:
            return await self._admin(call)
        level = call.read_level
        if level not in _LEVELS:
            raise InvalidField("read_level", f"{level!r} is not one of {', '.join(_LEVELS)}")
        if level == "session" and not call.min_position:
            raise InvalidField(
                "read_level", "session needs min_position; ask linearizable, or stale with min_position"
            )
        applier = self.appliers[domain]
        if applier.stalled():
            raise Refused(
                "stalled", f"the {domain} applier on {self.node_id} is not moving", node=self.node_id
            )
        await self._wait_floor(domain, call)
        await self._check_floor(domain, write=False)
        if level == "linearizable":
            seq = await self.log.barrier(domain, op_id=mint_op_id(f"barrier-{domain}"), writer=self.node_id)
            budget = max(0.5, min(10.0, call.deadline - time.time())) if call.deadline else 10.0
            if not await applier.wait_applied(seq, budget):
                raise Refused(
                    "behind",
                    f"the barrier at {seq} was not applied within {budget:.1f} s",
                    retry_after=1.0,
                    node=self.node_id,
                )
        seen = applier.applied
        spec = self._reads[call.op]
        rules = self.rules

        def fn(conn: Any, args: dict[str, Any]) -> Any:
            return spec.read(conn, rules, args)

        if spec.search:
            data = search_answer(
                await self._search(fn, call.args), call.args, not self.appliers[domain].drained
            )
        elif spec.inline:  # a point read: a few indexed statements, cheaper than a reader thread (issue 16)
            data = await self.store.read_inline(lambda conn: fn(conn, call.args))
        else:
            data = await self.store.read(lambda conn: fn(conn, call.args))
        pos = Position(applier.stream, GENERATION, seen)
        meta: dict[str, Any] = {
            "level": level,
            "position": pos.as_dict(),
            "position_token": pos.token(),
            "served_by": self.node_id,
        }
        if level == "stale":
            meta["lag"] = {"records": applier.lag}
        return {"data": data, "meta": meta}

    async def _search(self, fn: ReadFn, args: dict[str, Any]) -> list[dict[str, Any]] | dict[str, Any]:
        """Run ``pages.search`` inline while searches here are cheap (:data:`_INLINE_SEARCH`), else on a
        reader thread; either way one read transaction, and its CPU time updates the mean."""

        def timed(conn: Connection) -> list[dict[str, Any]] | dict[str, Any]:
            t0 = time.thread_time()
            try:
                hits: list[dict[str, Any]] | dict[str, Any] = fn(conn, args)
                return hits
            finally:
                took = time.thread_time() - t0
                self._search_cost += _SEARCH_WEIGHT * (took - self._search_cost)

        if self._search_cost < _INLINE_SEARCH:
            return await self.store.read_inline(timed)  # type: ignore[arg-type]
        return await self.store.read(timed)

    async def _admin(self, call: Call) -> dict[str, Any]:
        status = {
            "node": self.node_id,
            "domains": {
                d: {
                    "stream": a.stream,
                    "applied": a.applied,
                    "log_last": a.log_last,
                    "lag": a.lag,
                    "state": self.copy_state(d),
                    "drained": a.drained,
                }
                for d, a in self.appliers.items()
            },
        }
        if call.op == "estate.digest":
            status["digest"] = await self.store.digest(ledger_skip=frozenset(COMPACTED))
        return status
