"""The write path of one data node (ES-7, ES-9, ES-10, ES-11, ES-15).

For each write: (ES-9) wait until this node applied its own last write on the same log; read the
ledger and decide from one snapshot of local rows — an op the ledger holds is answered from it and
nothing is published (ES-7); append with the op id as message id and the subject expectation
(ES-10); on a subject conflict, apply through the subject's head and decide again; on a lost
acknowledgement, read the newest record on the subject before anyone is told ``unknown`` (ES-11); then
wait at most 5 s for the own record: ``applied`` (with the object read back) or ``pending`` (with
position and lag). Every answer carries its position (ES-15).

A create that names an ``external`` basis an item already holds answers outcome ``existing`` with
that item (CO-35): from the decision when this copy already holds the item (nothing is appended),
else from the ledger, where the apply — in log order, the same on every copy — recorded the fold
(:class:`~shared.estate.ApplyOutcome` ``resolved_to``).

The ledger horizon (ES-8): a node sweeps ledger rows older than ``retention.ledger_days`` and keeps
the cutoff in ``statelog_ledger_watermark`` (:mod:`shared.estate._sweep`). A write whose op id was
minted before that cutoff and has no ledger row cannot be vouched for — it may have landed and been
swept — so it is answered ``unknown`` with nothing published, logging ``statelog_write_unvouched``
(``minted_at``, ``refusal``). A create is the exception: its object id derives from the op id, so
when that row exists the answer is ``applied`` with it. Timeless derived ids (instant 0: the
company seeds, idempotent upserts) are not subject to it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from shared import logs

from .._errors import EstateError, OpReused, OutcomeUnknown, Refused, from_wire
from ..store import _sql as sql
from ..store._schema import T_LEDGER, T_LEDGER_WATERMARK
from ..store._store import EstateStore
from ._applier import Applier
from ._decide import Decision, ViewFn
from ._ids import GENERATION, Position, op_id_instant
from ._log import AppendConflict, AppendUnanswered, StateLog

__all__ = ["OWN_RECORD_WAIT", "Writer"]

# literal SQL (``exec_driver_sql``): runs on SQLAlchemy's connection and on the inline read path
_LEDGER_ROW = f"SELECT * FROM {T_LEDGER.name} WHERE domain = ? AND op_id = ?"
_WATERMARK = f"SELECT cutoff_instant FROM {T_LEDGER_WATERMARK.name} WHERE domain = ?"

_log = logs.get("statelog")

OWN_RECORD_WAIT = 5.0
"""Seconds a write waits for its own record before answering ``pending`` (ES-11: 60 s stall grace / 12)."""


_AGAIN = -1
""":meth:`Writer._append`: decide again."""
_UNKNOWN = -2
""":meth:`Writer._append`: the append's fate is unknown (``OutcomeUnknown``)."""


@dataclass
class _Attempt:
    """One write's appends: its deadline, whether an append went unanswered, the next backoff."""

    deadline: float
    unanswered: bool = False
    backoff: float = 0.25


class Writer:
    """Decides and appends writes for one data node.

    Args:
        store: The estate file.
        log: The state logs.
        appliers: Domain → its applier.
        budget: Seconds for deciding and appending (ES-9/ES-10/ES-12: 5).
    """

    def __init__(
        self, store: EstateStore, log: StateLog, appliers: dict[str, Applier], *, budget: float = 5.0
    ) -> None:
        self._store = store
        self._log = log
        self._appliers = appliers
        self._budget = budget
        self._last_own: dict[str, int] = {}

    def _position(self, domain: str, seq: int) -> Position:
        return Position(self._appliers[domain].stream, GENERATION, seq)

    def _answer(
        self,
        domain: str,
        outcome: str,
        op_id: str,
        seq: int,
        obj: dict[str, Any] | None,
        *,
        lag: int | None = None,
    ) -> dict[str, Any]:
        pos = self._position(domain, seq)
        out: dict[str, Any] = {
            "outcome": outcome,
            "op_id": op_id,
            "position": pos.as_dict(),
            "position_token": pos.token(),
            "object": obj,
        }
        if lag is not None:
            out["lag"] = {"records": lag}
        return out

    async def write(
        self,
        domain: str,
        op_id: str,
        decide: Callable[[Connection], Decision],
        view: ViewFn,
        *,
        created: Callable[[Connection, str], bool] | None = None,
        inline: bool = False,
    ) -> dict[str, Any]:
        """Run one write to its answer.

        Args:
            domain: ``tracker`` or ``pages``.
            op_id: The operation id (already validated).
            decide: Reads the snapshot and returns the decision (raising on bad input).
            view: Reads the answer's object back from the rows.
            created: For a create whose object id derives from the op id: whether that object's
                row exists (ES-8's exception for an op minted before the ledger watermark).
            inline: ``decide`` and ``view`` use literal SQL only (``exec_driver_sql``): the decision's
                snapshot and the answer's read-back run on the event loop thread
                (``EstateStore.read_inline``, issue 16) instead of a reader thread. Same snapshot,
                same transaction boundaries.

        Returns:
            ``{"outcome": "applied"|"existing"|"pending", "op_id", "position": {...},
            "position_token", "object": {...}|None, "lag"?}``; ``existing``: a create folded onto
            the item already holding its ``external`` basis, which ``object`` shows (CO-35).

        Raises:
            EstateUsageError: the call is wrong (ledger refusals included: ``op_reused``, conflicts).
            Refused: ``behind`` (own last write not applied within 5 s), ``no_quorum``,
                ``broker_unreachable``, ``log_full`` — nothing was stored.
            OutcomeUnknown: an append went unanswered and could not be resolved in the budget, or
                the op was minted before the ledger watermark and has no row (ES-8: nothing is
                published).
        """
        applier = self._appliers[domain]
        start = time.monotonic()
        deadline = start + self._budget
        own = self._last_own.get(domain, 0)
        if not await applier.wait_applied(own, self._budget):
            raise Refused(
                "behind",
                f"this node's own last write at {self._position(domain, own).token()} "
                f"is not applied here yet",
                retry_after=1.0,
                node="",
            )
        att = _Attempt(deadline)
        read = self._store.read_inline if inline else self._store.read
        while True:
            led, decision, err, cutoff = await read(lambda conn: self._snapshot(conn, domain, op_id, decide))
            if led is not None:
                return await self._from_ledger(domain, op_id, led, decision, view)
            if not att.unanswered and op_id_instant(op_id) * 1000 < cutoff:
                vouched = await self._unvouched(domain, op_id, decision, view, created)
                if vouched is not None:
                    return vouched
            if err is not None:
                raise err
            assert decision is not None
            if decision.record is None:
                return await self._unwritten(domain, op_id, decision, view, read)
            seq = await self._append(domain, op_id, decision, applier, att)
            if seq == _AGAIN:
                continue
            if seq == _UNKNOWN:
                break
            return await self._appended(domain, op_id, seq, decision, view, read)
        raise OutcomeUnknown(
            op_id,
            "the append was not acknowledged and its record is not on the log's "
            "subject head; retry with the same op_id",
        )

    async def _unwritten(
        self, domain: str, op_id: str, decision: Decision, view: ViewFn, read: Callable[..., Any]
    ) -> dict[str, Any]:
        """Answer a write that needs no record: nothing would change, or it folds onto an object
        already filed (``existing``, CO-35)."""
        seq = self._appliers[domain].applied
        obj_id = decision.resolved_to or decision.object_id
        noop = decision.noop
        if noop is None:
            noop = await read(lambda c, oid=obj_id: view(c, oid))
        return self._answer(domain, "existing" if decision.resolved_to else "applied", op_id, seq, noop)

    async def _appended(
        self, domain: str, op_id: str, seq: int, decision: Decision, view: ViewFn, read: Callable[..., Any]
    ) -> dict[str, Any]:
        """Wait up to :data:`OWN_RECORD_WAIT` for the record at ``seq`` to apply here and answer from the
        ledger, else answer ``pending`` (ES-11)."""
        applier = self._appliers[domain]
        self._last_own[domain] = max(self._last_own.get(domain, 0), seq)
        if await applier.wait_applied(seq, OWN_RECORD_WAIT):
            led, obj = await read(lambda conn: self._landed(conn, domain, op_id, view))
            if led is not None:
                return self._ledger_answer(domain, op_id, led, decision, obj)
            return self._answer(domain, "applied", op_id, seq, None)  # a record that applied nothing
        return self._answer(domain, "pending", op_id, seq, None, lag=applier.lag)

    async def _append(
        self, domain: str, op_id: str, decision: Decision, applier: Applier, att: _Attempt
    ) -> int:
        """Append the decision's record (ES-10, ES-12); return its sequence, or :data:`_AGAIN` (decide
        again: a newer record landed first, or a retryable refusal) or :data:`_UNKNOWN` (an unanswered
        append that could not be found in the budget).

        Raises:
            Refused: ``behind`` (the newer record is not applied here within the budget), or the log's
                own refusal when nothing was appended.
        """
        assert decision.record is not None
        remaining = att.deadline - time.monotonic()
        try:
            seq, _dup = await self._log.append(decision.record, expect=decision.expect)
        except AppendConflict as c:
            head = c.last_seq
            if head is None:
                found = await self._log.last_on_subject(domain, decision.record.subject)
                head = found[0] if found else 0
            if not await applier.wait_applied(head, max(remaining, 0.0)):
                if att.unanswered:
                    return _UNKNOWN
                raise Refused(
                    "behind",
                    f"a newer record on {decision.record.subject} (seq {head}) is not "
                    f"applied here within {self._budget:.0f} s",
                    retry_after=1.0,
                ) from None
            return _AGAIN
        except AppendUnanswered as e:
            att.unanswered = True
            try:
                found = await self._log.last_on_subject(domain, decision.record.subject)
            except Refused:
                found = None
            if found is not None and found[1] == op_id:
                return found[0]
            if remaining > att.backoff:
                await asyncio.sleep(att.backoff)  # the same message id collapses a repeat (ES-12)
                att.backoff = min(att.backoff * 2, 1.0)
                return _AGAIN
            _log.warning("statelog_publish_unknown", domain=domain, op_id=op_id, error=str(e))
            return _UNKNOWN
        except Refused as r:
            if r.refusal in ("no_quorum", "broker_unreachable") and remaining > att.backoff:
                await asyncio.sleep(att.backoff)
                att.backoff = min(att.backoff * 2, 1.0)
                return _AGAIN
            if att.unanswered:
                _log.warning("statelog_publish_unknown", domain=domain, op_id=op_id, error=str(r))
                return _UNKNOWN
            raise
        return seq

    async def _unvouched(
        self,
        domain: str,
        op_id: str,
        decision: Decision | None,
        view: ViewFn,
        created: Callable[[Connection, str], bool] | None,
    ) -> dict[str, Any] | None:
        """ES-8: answer an op minted before the ledger watermark that has no ledger row.

        Returns:
            None when the op is younger than the watermark (or timeless, or there is none): decide
            as usual. The ``applied`` answer of a create whose derived object exists.

        Raises:
            OutcomeUnknown: the op cannot be vouched for; nothing is published.
        """
        minted = op_id_instant(op_id) * 1000  # unix µs
        if minted <= 0:
            return None

        def read(conn: Connection) -> tuple[int, bool, dict[str, Any] | None]:
            cutoff = int(conn.exec_driver_sql(_WATERMARK, (domain,)).scalar() or 0)
            if minted >= cutoff or decision is None or created is None:
                return cutoff, False, None
            oid = decision.object_id
            if not created(conn, oid):
                return cutoff, False, None
            return cutoff, True, view(conn, oid)

        cutoff, found, obj = await self._store.read(read)
        if minted >= cutoff:
            return None
        if found:
            return self._answer(domain, "applied", op_id, self._appliers[domain].applied, obj)
        _log.warning(
            "statelog_write_unvouched",
            domain=domain,
            op_id=op_id,
            minted_at=minted,
            watermark=cutoff,
            refusal="unknown",
        )
        raise OutcomeUnknown(
            op_id,
            f"minted before this node's ledger watermark ({cutoff} µs) and not in its ledger: it may have "
            f"landed and been swept; nothing was published",
        )

    @staticmethod
    def _landed(conn: Any, domain: str, op_id: str, view: ViewFn) -> tuple[Any, dict[str, Any] | None]:
        led = sql.one(conn, _LEDGER_ROW, (domain, op_id))
        if led is None or led.outcome == "rejected":
            return led, None
        return led, view(conn, str(led.resolved_to or led.object_id))

    @staticmethod
    def _snapshot(
        conn: Any, domain: str, op_id: str, decide: Callable[[Connection], Decision] | None
    ) -> tuple[Any, Decision | None, EstateError | None, int]:
        led = sql.one(conn, _LEDGER_ROW, (domain, op_id))
        cutoff = int(conn.exec_driver_sql(_WATERMARK, (domain,)).scalar() or 0) if led is None else 0
        if decide is None:
            return led, None, None, cutoff
        try:
            return led, decide(conn), None, cutoff
        except EstateError as e:
            return led, None, e, cutoff

    async def _from_ledger(
        self, domain: str, op_id: str, led: Any, decision: Decision | None, view: ViewFn
    ) -> dict[str, Any]:
        self._ledger_answer(domain, op_id, led, decision, None)  # raises the refusal, if any
        obj = await self._store.read(lambda c: view(c, str(led.resolved_to or led.object_id)))
        return self._ledger_answer(domain, op_id, led, decision, obj)

    def _ledger_answer(
        self, domain: str, op_id: str, led: Any, decision: Decision | None, obj: dict[str, Any] | None
    ) -> dict[str, Any]:
        pos = Position(str(led.stream), int(led.generation), int(led.seq))
        if decision is not None and decision.object_id != led.object_id:
            raise OpReused(op_id, pos.token(), f"{led.object_kind}:{led.object_id}")
        if led.outcome == "rejected" and led.error:
            raise from_wire(json.loads(led.error))
        outcome = "existing" if led.outcome == "existing" else "applied"
        return self._answer(domain, outcome, op_id, int(led.seq), obj)
