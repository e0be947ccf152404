"""Control plane seam: the company as one versioned document for the whole fleet (fleet.md §14).

Revisions with their origin in history, the activation pointer whose KV revision is the epoch
(FL-104, FL-105), sealed bodies (FL-107), the per-node reconciler with poll plus nudge (FL-108),
status (FL-110), posture (FL-111), the boot and offline rules (FL-109), redaction and diff (CO-27).
The apply itself — what a revision changes on a node — is the composition root's
(``crewlet/apply.py``): this seam knows no role.
"""

from ._diff import MASK, Change, diff, masked_credentials, redact
from ._errors import (
    CompanyRefused,
    ControlUnavailable,
    ControlUsageError,
    IfMatchFailed,
    PayloadUnopenable,
    RevisionAdvanced,
    UnknownRevision,
)
from ._local import LocalRecord, LocalRevision, node_store, offline_import
from ._posture import MAX_ATTEMPTS, Posture, PostureTracker, posture
from ._reconciler import EVENT_ERROR_LIMIT, REVISION_ACTIVATED_SUBJECT, ApplyOutcome, Reconciler
from ._records import (
    ACTIVATION_KEY,
    Activation,
    CreatedByKind,
    Revision,
    Sealer,
    Source,
    digest_of,
    new_revision_id,
    seed_revision_id,
)
from ._status import ERROR_TEXT_LIMIT, NodeStatus, cut_text, read_statuses, write_status
from ._store import ControlStore

__all__ = [
    "ACTIVATION_KEY",
    "ERROR_TEXT_LIMIT",
    "EVENT_ERROR_LIMIT",
    "MASK",
    "MAX_ATTEMPTS",
    "REVISION_ACTIVATED_SUBJECT",
    "Activation",
    "ApplyOutcome",
    "Change",
    "CompanyRefused",
    "ControlStore",
    "ControlUnavailable",
    "ControlUsageError",
    "CreatedByKind",
    "IfMatchFailed",
    "LocalRecord",
    "LocalRevision",
    "NodeStatus",
    "PayloadUnopenable",
    "Posture",
    "PostureTracker",
    "Reconciler",
    "Revision",
    "RevisionAdvanced",
    "Sealer",
    "Source",
    "UnknownRevision",
    "cut_text",
    "diff",
    "masked_credentials",
    "digest_of",
    "new_revision_id",
    "node_store",
    "offline_import",
    "posture",
    "read_statuses",
    "redact",
    "seed_revision_id",
    "write_status",
]
