"""Estate seam: the replicated tracker, knowledge base and file rows of every data node (spec/estate.md).

Writes go through the ordered state logs even on one node (DESIGN.md); every data node applies the
same logs into its own SQLite copy. The router (``shared.router``) is how anything reaches it; this
package knows nothing of the router.

Layout, top to bottom (each sub-package's docstring says what it owns and may import; an
import-linter contract holds the order): the composition (``_estate``: :func:`open_estate`,
``_service``: :class:`EstateService`, ``_seed``, ``_events``); ``life`` (snapshot, donor,
catch-up, trim, eviction, backup, sweep); ``domains`` (one sub-package per domain and the registry);
``log`` (ids, records, streams, writer, applier, gates, positions); ``store`` (tables, SQLite).
Base modules any of them may import: ``_errors``, ``_alarms``, ``_tasks``, ``_protocol``.

How to add a domain (the domain seam, ``shared.estate.domains``):

1. Make ``shared/estate/domains/<name>/`` with ``_tables.py`` (its SQLModel tables on
   ``shared.estate.store.EstateModel``; additive only: a column added later comes last with a
   server default), its decide/apply/read modules, and an ``__init__`` whose docstring says what it
   owns and that builds ``DOMAIN = EstateDomain(...)`` declaring:
   ``name``; ``log`` (the ordered log its records ride: its own name for a new log, or a
   registered domain's); ``stream`` (only for a new log: its JetStream stream, e.g.
   ``CREWLET_MEMORY_LOG``); ``tables``; ``ddl`` (derived tables such as an FTS5 index, run
   ``IF NOT EXISTS`` at every open, left out of digests); ``writes`` (operation →
   ``WriteOp(decide, view, created?, inline?)``); ``reads`` (operation → ``ReadOp(read,
   inline?, search?)``); ``apply`` (record kind → ``(conn, record, seq) -> ApplyOutcome``,
   deterministic: rows and record only, ES-16; never kind ``gate``); ``corpus`` (the lexical index
   its log builds, if any); ``backup_objects`` (a query naming object-store objects its rows
   reference, if any).
2. Add ``<name>.DOMAIN`` to ``REGISTERED`` in ``shared/estate/domains/__init__.py`` (and its import
   on the line above it). That is all: the schema (tables, DDL, upgrade), the operation table
   ``OPS``, the service's writes and reads, the appliers (one per log, dispatching by kind, gate
   records included), the stream provisioning, the snapshot and backup positions, the catch-up,
   the eviction gestures and the ledger sweep all read the registry. Snapshot, backup and catch-up
   move the whole estate file, so a domain's tables travel with it without further declaration.
3. Test it under ``tests/estate`` through ``shared.estate`` as a caller would (``EstateService``
   calls), including a fresh open, a reopen of an older file and a snapshot adoption.
"""

from ._errors import (
    RETRY_HERE,
    EstateError,
    EstateServiceError,
    EstateUsageError,
    Fenced,
    InvalidField,
    NotFound,
    OpReused,
    OutcomeUnknown,
    Refused,
    StoreFailed,
    TooLarge,
    VersionConflict,
    WrongStream,
    from_wire,
    to_wire,
)
from ._estate import Estate, open_estate, rules_from_company
from ._events import EVENT_LIMIT, TRACE_LIMIT, EventLog
from ._protocol import PROTOCOL, Answer, Call, ReadLevel
from ._seed import company_seed
from ._service import EstateService
from .domains import DOMAINS, OPS
from .domains.files import MAX_FILE, object_key_for, validate_path
from .domains.pages import (
    DIVIDE_AT,
    PAGE_LIMIT,
    SLICE_WAIT,
    DividedSearch,
    SliceResponder,
    assign,
    merge_hits,
    slice_subject,
)
from .domains.tracker import COMMENT_LIMIT
from .life import (
    TERMS,
    BackupAgeWatch,
    BackupFailed,
    LedgerSweeper,
    TrimConclusion,
    conclude,
    record_watermark,
    sweep_ledger,
    take_backup,
)
from .log import (
    BUCKETS,
    STREAMS,
    Applier,
    ApplyOutcome,
    CopyState,
    DecideCtx,
    Decision,
    Domain,
    Position,
    Record,
    Rules,
    StateLog,
    derive_op_id,
    mint_op_id,
    object_subject,
    op_id_instant,
    search_bucket,
    validate_op_id,
)
from .store import EstateStore

__all__ = [
    "DIVIDE_AT",
    "SLICE_WAIT",
    "DividedSearch",
    "SliceResponder",
    "assign",
    "merge_hits",
    "slice_subject",
    "BUCKETS",
    "DOMAINS",
    "COMMENT_LIMIT",
    "EVENT_LIMIT",
    "MAX_FILE",
    "OPS",
    "PAGE_LIMIT",
    "PROTOCOL",
    "RETRY_HERE",
    "STREAMS",
    "TRACE_LIMIT",
    "Answer",
    "Applier",
    "ApplyOutcome",
    "BackupAgeWatch",
    "BackupFailed",
    "Call",
    "CopyState",
    "DecideCtx",
    "Decision",
    "Domain",
    "Estate",
    "EstateError",
    "EstateService",
    "EstateServiceError",
    "EstateStore",
    "EstateUsageError",
    "EventLog",
    "LedgerSweeper",
    "Fenced",
    "InvalidField",
    "NotFound",
    "OpReused",
    "OutcomeUnknown",
    "Position",
    "ReadLevel",
    "Record",
    "Refused",
    "Rules",
    "StateLog",
    "StoreFailed",
    "TERMS",
    "TooLarge",
    "TrimConclusion",
    "VersionConflict",
    "WrongStream",
    "company_seed",
    "conclude",
    "derive_op_id",
    "from_wire",
    "mint_op_id",
    "object_key_for",
    "object_subject",
    "op_id_instant",
    "record_watermark",
    "open_estate",
    "rules_from_company",
    "search_bucket",
    "sweep_ledger",
    "take_backup",
    "to_wire",
    "validate_op_id",
    "validate_path",
]
