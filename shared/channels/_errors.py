"""Errors of the channels seam (CO-36, FL-124)::

    CrewletError
    └── ChannelError                  (shared.channels) the seam's base
        └── ChannelRecordInvalid      a stored channel row cannot be read (also a UsageError)

"The store could not be asked" stays :class:`~shared.coordination.CoordinationUnavailable` and "the
broker could not be asked" stays :class:`~shared.bus.BusError`: callers already choose a direction
for those, so this seam does not wrap them.
"""

from __future__ import annotations

from shared.errors import CrewletError, UsageError

__all__ = ["ChannelError", "ChannelRecordInvalid"]


class ChannelError(CrewletError):
    """Base of every error of the channels seam."""


class ChannelRecordInvalid(ChannelError, UsageError):
    """A row in the ``channels`` slot is not a channel record.

    Attributes:
        key: The row's key (the channel id).
        field: The field at fault, or None when the row is not a JSON object at all.
    """

    def __init__(self, key: str, message: str, field: str | None = None) -> None:
        super().__init__(f"channel {key!r}: {message}")
        self.key = key
        self.field = field
