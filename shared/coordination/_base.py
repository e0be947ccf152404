"""The coordination contract: a KV with compare-and-set, held by two backends (FL-32, FL-39).

Values are bytes; revisions are positive integers that only rise per key; revision 0 means
"absent" in a compare-and-set. Reads of one key see the same caller's earlier writes (FL-37).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from datetime import datetime

from ._buckets import Slot

__all__ = ["Coordination", "Entry"]


@dataclass(frozen=True)
class Entry:
    """One stored value.

    Attributes:
        key: The key.
        value: The bytes stored.
        revision: The key's revision (the stream sequence on NATS).
        created: When the store wrote it (the broker's clock on NATS, FL-36); timezone-aware UTC.
    """

    key: str
    value: bytes
    revision: int
    created: datetime


class Coordination(abc.ABC):
    """A coordination store: one bucket per slot (:data:`~shared.coordination.SLOTS`).

    Every method answers *yes* (a value), *no* (``None``, ``False`` or :class:`RevisionConflict`)
    or raises :class:`CoordinationUnavailable` for *unknown* (FL-32).
    """

    #: ``embedded-kv`` or ``memory``.
    kind: str

    @abc.abstractmethod
    async def get(self, slot: Slot, key: str) -> Entry | None:
        """Return the key's entry, or None when it is absent or expired.

        Raises:
            CoordinationUnavailable: the store could not be asked.
        """

    @abc.abstractmethod
    async def create(self, slot: Slot, key: str, value: bytes) -> int:
        """Write ``key`` only if it is absent; return the new revision.

        Raises:
            RevisionConflict: the key exists.
            OutcomeUnknown: the write was sent and no answer came (re-read).
            CoordinationUnavailable: the store could not be asked.
        """

    @abc.abstractmethod
    async def update(self, slot: Slot, key: str, value: bytes, *, revision: int) -> int:
        """Write ``key`` only if it is at ``revision`` (compare-and-set); return the new revision.

        Args:
            slot: The bucket.
            key: The key.
            value: The new bytes.
            revision: The revision the caller read; 0 means "only if absent".

        Raises:
            RevisionConflict: the key is at another revision.
            OutcomeUnknown: the write was sent and no answer came (re-read).
            CoordinationUnavailable: the store could not be asked.
        """

    @abc.abstractmethod
    async def put(self, slot: Slot, key: str, value: bytes) -> int:
        """Write ``key`` unconditionally; return the new revision.

        Raises:
            OutcomeUnknown: the write was sent and no answer came.
            CoordinationUnavailable: the store could not be asked.
        """

    @abc.abstractmethod
    async def delete(self, slot: Slot, key: str, *, revision: int | None = None) -> bool:
        """Delete ``key`` (only at ``revision`` when given); True when it was present.

        Raises:
            RevisionConflict: ``revision`` was given and the key is at another one.
            OutcomeUnknown: the delete was sent and no answer came.
            CoordinationUnavailable: the store could not be asked.
        """

    @abc.abstractmethod
    async def entries(self, slot: Slot, prefix: str = "") -> list[Entry]:
        """Return every live entry whose key starts with ``prefix``, in key order.

        A listing may lag a peer's write by a moment (FL-37); it never omits this caller's own
        acknowledged writes.

        Raises:
            CoordinationUnavailable: the store could not be asked.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Release what the backend holds (not the broker connection, which it does not own)."""
