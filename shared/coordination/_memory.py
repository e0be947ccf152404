"""The in-memory twin of the coordination store (FL-39), and a faulty one for tests (FL-32).

The twin keeps the NATS backend's contract: per-bucket rising revisions (one counter per bucket,
like a stream sequence), age-based expiry measured from the last write, create-only-if-absent,
compare-and-set, and the same errors. It serves ``coordination.type: local`` (one node only) and
is held to the same contract test suite as the NATS backend.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from ._base import Coordination, Entry
from ._buckets import SLOTS, Slot, bucket_specs
from ._errors import CoordinationUnavailable, RevisionConflict

__all__ = ["FaultyCoordination", "MemoryCoordination"]


class MemoryCoordination(Coordination):
    """Coordination held in this process (``coordination.type: local``).

    Args:
        lease_ttl: The ``leases`` bucket's age.
        clock: A monotonic clock in seconds (tests may pass a fake one).
    """

    kind = "memory"

    def __init__(self, *, lease_ttl: timedelta = timedelta(seconds=45), clock: object = None) -> None:
        self._clock = clock if callable(clock) else time.monotonic
        specs = bucket_specs("crewlet", lease_ttl=lease_ttl)
        self._age = {slot: (s.age.total_seconds() if s.age else None) for slot, s in specs.items()}
        self._data: dict[Slot, dict[str, tuple[bytes, int, float, datetime]]] = {s: {} for s in SLOTS}
        self._seq: dict[Slot, int] = dict.fromkeys(SLOTS, 0)

    def _now(self) -> float:
        return float(self._clock())

    def _live(self, slot: Slot, key: str) -> tuple[bytes, int, float, datetime] | None:
        if slot not in self._data:
            raise ValueError(f"unknown coordination slot {slot!r}")
        item = self._data[slot].get(key)
        if item is None:
            return None
        age = self._age[slot]
        if age is not None and self._now() - item[2] >= age:
            del self._data[slot][key]
            return None
        return item

    def _write(self, slot: Slot, key: str, value: bytes) -> int:
        self._seq[slot] += 1
        rev = self._seq[slot]
        self._data[slot][key] = (bytes(value), rev, self._now(), datetime.now(UTC))
        return rev

    async def get(self, slot: Slot, key: str) -> Entry | None:
        """See :meth:`Coordination.get`."""
        item = self._live(slot, key)
        return None if item is None else Entry(key, item[0], item[1], item[3])

    async def create(self, slot: Slot, key: str, value: bytes) -> int:
        """See :meth:`Coordination.create`."""
        if self._live(slot, key) is not None:
            raise RevisionConflict(key, 0)
        return self._write(slot, key, value)

    async def update(self, slot: Slot, key: str, value: bytes, *, revision: int) -> int:
        """See :meth:`Coordination.update`."""
        item = self._live(slot, key)
        current = item[1] if item is not None else 0
        if current != revision:
            raise RevisionConflict(key, revision)
        return self._write(slot, key, value)

    async def put(self, slot: Slot, key: str, value: bytes) -> int:
        """See :meth:`Coordination.put`."""
        self._live(slot, key)
        return self._write(slot, key, value)

    async def delete(self, slot: Slot, key: str, *, revision: int | None = None) -> bool:
        """See :meth:`Coordination.delete`."""
        item = self._live(slot, key)
        if revision is not None and (item[1] if item else 0) != revision:
            raise RevisionConflict(key, revision)
        if item is None:
            return False
        del self._data[slot][key]
        self._seq[slot] += 1
        return True

    async def entries(self, slot: Slot, prefix: str = "") -> list[Entry]:
        """See :meth:`Coordination.entries`."""
        keys = sorted(k for k in list(self._data[slot]) if k.startswith(prefix))
        out = []
        for k in keys:
            item = self._live(slot, k)
            if item is not None:
                out.append(Entry(k, item[0], item[1], item[3]))
        return out

    async def close(self) -> None:
        """Nothing to release."""


class FaultyCoordination(Coordination):
    """A store that cannot be asked: every call raises :class:`CoordinationUnavailable` (FL-32 tests)."""

    kind = "faulty"

    async def get(self, slot: Slot, key: str) -> Entry | None:
        """Raise :class:`CoordinationUnavailable`."""
        raise CoordinationUnavailable("faulty backend")

    async def create(self, slot: Slot, key: str, value: bytes) -> int:
        """Raise :class:`CoordinationUnavailable`."""
        raise CoordinationUnavailable("faulty backend")

    async def update(self, slot: Slot, key: str, value: bytes, *, revision: int) -> int:
        """Raise :class:`CoordinationUnavailable`."""
        raise CoordinationUnavailable("faulty backend")

    async def put(self, slot: Slot, key: str, value: bytes) -> int:
        """Raise :class:`CoordinationUnavailable`."""
        raise CoordinationUnavailable("faulty backend")

    async def delete(self, slot: Slot, key: str, *, revision: int | None = None) -> bool:
        """Raise :class:`CoordinationUnavailable`."""
        raise CoordinationUnavailable("faulty backend")

    async def entries(self, slot: Slot, prefix: str = "") -> list[Entry]:
        """Raise :class:`CoordinationUnavailable`."""
        raise CoordinationUnavailable("faulty backend")

    async def close(self) -> None:
        """Nothing to release."""
