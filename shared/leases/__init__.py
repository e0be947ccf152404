"""Leases seam: presence, seat and duty leases with epoch fencing (FL-42..FL-75, FL-91..FL-99)."""

from ._presence import Presence
from ._records import LeaseRecord, key_of, resource_of
from ._view import fleet_view

__all__ = ["LeaseRecord", "Presence", "fleet_view", "key_of", "resource_of"]
