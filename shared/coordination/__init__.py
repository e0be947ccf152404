"""Coordination seam: the fleet-shared KV over JetStream (FL-32..FL-41).

Every call answers yes (a value), no (``None``/``False``/:class:`RevisionConflict`) or unknown
(:class:`CoordinationUnavailable`, FL-32). Nothing above this seam imports nats KV errors.
"""

from ._base import Coordination, Entry
from ._buckets import DUTY_CEILING, SLOTS, TRIM_HOLD_AGE, BucketSpec, Slot, bucket_specs, reconcile_interval
from ._errors import (
    BucketMismatch,
    CoordinationBusy,
    CoordinationError,
    CoordinationUnavailable,
    OutcomeUnknown,
    RevisionConflict,
)
from ._memory import FaultyCoordination, MemoryCoordination
from ._nats import NatsCoordination
from ._provision import provision

__all__ = [
    "DUTY_CEILING",
    "TRIM_HOLD_AGE",
    "SLOTS",
    "BucketMismatch",
    "BucketSpec",
    "Coordination",
    "CoordinationBusy",
    "CoordinationError",
    "CoordinationUnavailable",
    "Entry",
    "FaultyCoordination",
    "MemoryCoordination",
    "NatsCoordination",
    "OutcomeUnknown",
    "RevisionConflict",
    "Slot",
    "bucket_specs",
    "provision",
    "reconcile_interval",
]
