"""Leases seam: presence, seat leases with epoch fencing, the completion ledger (FL-42..FL-75, FL-88..FL-90).

Seat leases: :class:`SeatHost` (claim, heartbeat, release, admission ``may_start``, the in-turn fence
``may_continue``, the ack fence ``holds``) over :class:`SeatLeases` (the three-write claim, CAS
renew, fenced release). Data nodes fence writes with :func:`check_epoch`.
"""

from ._duty import DUTY_TTLS, Duties, DutyTTLTooLong
from ._epochs import EpochRecord, check_epoch, current_epoch, read_epoch
from ._errors import LeaseContention, LeaseError
from ._fairshare import MAX_CLAIMS_PER_SWEEP, MAX_RELEASES_PER_SWEEP, FairShare, Selector
from ._host import SeatHost
from ._ledger import Ledger
from ._placement import FENCED_REASONS, VOLUNTARY_REASONS, ClaimAll, PlacementPolicy, Plan, ReleaseReason
from ._presence import Presence, live_data_nodes
from ._records import LeaseRecord, key_of, resource_of
from ._seat import CAS_ROUNDS, Grant, SeatLease, SeatLeases
from ._view import RoleWatch, fleet_view

__all__ = [
    "CAS_ROUNDS",
    "DUTY_TTLS",
    "FENCED_REASONS",
    "MAX_CLAIMS_PER_SWEEP",
    "MAX_RELEASES_PER_SWEEP",
    "VOLUNTARY_REASONS",
    "ClaimAll",
    "Duties",
    "DutyTTLTooLong",
    "EpochRecord",
    "FairShare",
    "Grant",
    "LeaseContention",
    "LeaseError",
    "LeaseRecord",
    "Ledger",
    "PlacementPolicy",
    "Plan",
    "Presence",
    "ReleaseReason",
    "RoleWatch",
    "SeatHost",
    "SeatLease",
    "SeatLeases",
    "Selector",
    "check_epoch",
    "current_epoch",
    "fleet_view",
    "key_of",
    "live_data_nodes",
    "read_epoch",
    "resource_of",
]
