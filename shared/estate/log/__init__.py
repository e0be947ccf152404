"""The log: the ordered state logs and how a write reaches them and is applied (ES-5..ES-24, ES-51).

Owns the names (op ids, positions, subjects, streams: ``_ids``), the record (``_record``), the
JetStream streams (:class:`StateLog`), the shared shapes of deciding a write (``_decide``), the
writer that decides, appends and waits (:class:`Writer`), the applier that folds a log into the
rows with its checkpoint, anchors and ledger (:class:`Applier`), the gate records of eviction
(``_gates``) and the position heartbeat (:class:`PositionBeat`). It is domain-blind: the applier is
handed its apply function, the writer its decide and view. It may import
:mod:`shared.estate.store` and the estate's base modules, never a domain or the estate's life.
"""

from ._applier import LAGGING_RECORDS, STALL_AFTER, Applier, ApplyFn, ApplyOutcome, CopyState
from ._decide import DecideCtx, Decision, Rules, ViewFn, anchor_of, derived_id, iso
from ._gates import evicted_since, eviction_grace, gate_record, gate_subject, gates_of
from ._ids import (
    BUCKETS,
    COMPACTED,
    GENERATION,
    STREAMS,
    Domain,
    Position,
    derive_op_id,
    is_compacted,
    mint_op_id,
    object_subject,
    op_id_instant,
    register_log,
    search_bucket,
    validate_op_id,
)
from ._log import AppendConflict, AppendUnanswered, StateLog, StreamFacts
from ._positions import HEARTBEAT, PositionBeat
from ._record import MAX_RECORD, RECORD_VERSION_READ, Record
from ._writer import Writer

__all__ = [
    "BUCKETS",
    "COMPACTED",
    "GENERATION",
    "HEARTBEAT",
    "LAGGING_RECORDS",
    "MAX_RECORD",
    "RECORD_VERSION_READ",
    "STALL_AFTER",
    "STREAMS",
    "AppendConflict",
    "AppendUnanswered",
    "Applier",
    "ApplyFn",
    "ApplyOutcome",
    "CopyState",
    "DecideCtx",
    "Decision",
    "Domain",
    "PositionBeat",
    "Position",
    "Record",
    "Rules",
    "StateLog",
    "StreamFacts",
    "ViewFn",
    "Writer",
    "anchor_of",
    "derive_op_id",
    "is_compacted",
    "derived_id",
    "evicted_since",
    "eviction_grace",
    "gate_record",
    "gate_subject",
    "gates_of",
    "iso",
    "mint_op_id",
    "object_subject",
    "op_id_instant",
    "register_log",
    "search_bucket",
    "validate_op_id",
]
