"""Estate seam: the replicated tracker, knowledge base and file rows of every data node (spec/estate.md).

Writes go through the ordered state logs even on one node (DESIGN.md); every data node applies the
same logs into its own SQLite copy. The router (``shared.router``) is how anything reaches it; this
package knows nothing of the router.
"""

from ._applier import Applier, ApplyOutcome, CopyState
from ._backup import BackupAgeWatch, BackupFailed, take_backup
from ._decide import DecideCtx, Decision, Rules
from ._divided import DIVIDE_AT, SLICE_WAIT, DividedSearch, SliceResponder, assign, merge_hits, slice_subject
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
from ._files import MAX_FILE, object_key_for, validate_path
from ._ids import (
    BUCKETS,
    DOMAINS,
    STREAMS,
    Domain,
    Position,
    derive_op_id,
    mint_op_id,
    object_subject,
    op_id_instant,
    search_bucket,
    validate_op_id,
)
from ._log import StateLog
from ._pages import PAGE_LIMIT
from ._protocol import OPS, PROTOCOL, Answer, Call, ReadLevel
from ._record import Record
from ._seed import company_seed
from ._service import EstateService
from ._store import EstateStore
from ._sweep import LedgerSweeper, record_watermark, sweep_ledger
from ._tracker import COMMENT_LIMIT
from ._trim import TERMS, TrimConclusion, conclude

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
