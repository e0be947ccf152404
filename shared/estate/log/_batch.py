"""One applied batch: the records, their anchors, the checkpoint and the ledger in one transaction
(ES-7, ES-10, ES-16, ES-17).

:func:`apply_batch` runs on the store's writer thread inside ``BEGIN IMMEDIATE``; the applier acks
its consumer only after the commit. A record whose op id the ledger already holds folds to nothing
(a repeat past the broker's window); a refusal at apply is kept in the ledger row so every retry is
answered with it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection

from shared import logs

from .._errors import EstateError, to_wire
from ..store import _sql as sql
from ..store._schema import T_LEDGER
from ._ids import GENERATION, op_id_instant
from ._record import Record

__all__ = ["ApplyFn", "ApplyOutcome", "FailingRun", "apply_batch"]

_log = logs.get("statelog")


@dataclass(frozen=True)
class ApplyOutcome:
    """What one record did, for the ledger (ES-7).

    Attributes:
        object_kind: The kind of object it was about (``task``, ``page``...).
        object_id: That object's id.
        error: When the record was refused at apply (e.g. a stale ``if_match`` or a vanished
            parent), the refusal every retry is answered with; None when it applied.
        resolved_to: When the record folded onto an object filed earlier in log order instead of
            filing its own (a create whose ``external`` basis an item already holds, CO-35), that
            object's id: the ledger records outcome ``existing`` and the answer shows that object.
            None otherwise.

    .. versionchanged:: 0.1 ``resolved_to`` (issue 10).
    """

    object_kind: str
    object_id: str
    error: EstateError | None = None
    resolved_to: str | None = None


ApplyFn = Callable[[Connection, Record, int], ApplyOutcome]
"""``(conn, record, seq) -> outcome``: a domain's deterministic apply of one record."""


_ANCHOR_UPSERT = (
    "INSERT INTO statelog_anchor (domain, subject, last_consumed_seq) VALUES (?, ?, ?) "
    "ON CONFLICT (domain, subject) DO UPDATE SET last_consumed_seq = excluded.last_consumed_seq"
)
_CHECKPOINT_UPSERT = (
    "INSERT INTO statelog_checkpoint (domain, stream, generation, seq, applied_through, stream_created_at, "
    "checkpoint_stored_at, checkpoint_op_id, max_record_version, rule_versions) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, '{}') "
    "ON CONFLICT (domain) DO UPDATE SET stream = excluded.stream, generation = excluded.generation, "
    "seq = excluded.seq, applied_through = excluded.applied_through, stream_created_at = excluded.stream_created_at, "
    "checkpoint_stored_at = excluded.checkpoint_stored_at, checkpoint_op_id = excluded.checkpoint_op_id, "
    "max_record_version = max(excluded.max_record_version, statelog_checkpoint.max_record_version)"
)
_LEDGER_SEEN = "SELECT seq FROM statelog_ledger WHERE domain = ? AND op_id = ?"


def apply_batch(
    conn: Connection,
    items: list[tuple[Record, int, int]],
    *,
    domain: str,
    stream: str,
    created_at: int,
    apply: ApplyFn,
) -> None:
    """Apply ``(record, seq, stored_at)`` items in the open transaction with the anchors, the checkpoint
    and the ledger rows (ES-7, ES-10, ES-16); barrier records move the checkpoint only."""
    max_version = 0
    anchors: dict[str, int] = {}
    for rec, seq, _stored in items:
        max_version = max(max_version, rec.version)
        if rec.kind != "barrier":
            _apply_one(conn, rec, seq, domain, stream, apply)
        anchors[rec.subject] = seq
    sql.run(conn, _ANCHOR_UPSERT, [(domain, subj, seq) for subj, seq in anchors.items()])
    rec, seq, stored = items[-1]
    sql.run(
        conn,
        _CHECKPOINT_UPSERT,
        (
            domain,
            stream,
            GENERATION,
            seq,
            seq,
            created_at,
            stored,
            rec.op_id,
            max_version,
        ),
    )


def _apply_one(conn: Connection, rec: Record, seq: int, domain: str, stream: str, apply: ApplyFn) -> None:
    if sql.one(conn, _LEDGER_SEEN, (domain, rec.op_id)) is not None:
        return  # ES-7: the op already applied; a repeat folds to nothing
    outcome = apply(conn, rec, seq)
    try:
        minted = op_id_instant(rec.op_id) * 1000
    except EstateError:
        minted = 0
    sql.insert_row(
        conn,
        T_LEDGER,
        {
            "domain": domain,
            "op_id": rec.op_id,
            "object_kind": outcome.object_kind,
            "object_id": outcome.object_id,
            "stream": stream,
            "generation": rec.generation,
            "seq": seq,
            "applied_at": rec.at,
            "minted_at": minted,
            "outcome": "rejected"
            if outcome.error is not None
            else ("existing" if outcome.resolved_to else "applied"),
            "error": json.dumps(to_wire(outcome.error)) if outcome.error is not None else "",
            "resolved_to": outcome.resolved_to or "",
        },
    )


class FailingRun:
    """A run of failing batch commits on one log (ES-20): ``statelog_apply_retrying`` (WARN) once,
    ``statelog_apply_faulted`` (ERROR) past the retry budget, ``statelog_apply_recovered`` (INFO).

    Args:
        domain: The log.
        budget: Seconds of failing before the copy faults.

    Attributes:
        since: The ``time.monotonic()`` instant of the run's first failure; None before one.
        attempt: Failures so far.
    """

    def __init__(self, domain: str, budget: float) -> None:
        self.domain = domain
        self.budget = budget
        self.since: float | None = None
        self.attempt = 0
        self.last_error = ""

    def failed(self, e: BaseException, position: int, faulted: bool) -> bool:
        """Count one failure at checkpoint ``position``; True when the copy faults now (past the budget)."""
        self.attempt += 1
        self.last_error = f"{type(e).__name__}: {e}"
        now = time.monotonic()
        if self.since is None:
            self.since = now
            _log.warning(
                "statelog_apply_retrying", domain=self.domain, position=position, error=self.last_error
            )
        if not faulted and now - self.since >= self.budget:
            _log.error(
                "statelog_apply_faulted",
                domain=self.domain,
                position=position,
                error=self.last_error,
                retry_budget_seconds=self.budget,
            )
            return True
        return False

    def recovered(self, position: int) -> None:
        """Log the end of the run: the batch through ``position`` committed."""
        _log.info(
            "statelog_apply_recovered",
            domain=self.domain,
            position=position,
            after=round(time.monotonic() - (self.since or 0.0), 3),
            last_error=self.last_error,
        )
