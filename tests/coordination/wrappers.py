"""Coordination wrappers for tests: a store that can be broken on demand, and one that loses replies.

They wrap a real backend (the in-memory twin or NATS) and change only what the test names, so the
code under test still talks to a real store.
"""

from __future__ import annotations

from shared.coordination import (
    Coordination,
    CoordinationUnavailable,
    Entry,
    FaultyCoordination,
    OutcomeUnknown,
    RevisionConflict,
    Slot,
)


class Switchable(Coordination):
    """Delegates to ``inner`` until :attr:`broken` is set; then behaves as :class:`FaultyCoordination`."""

    kind = "switchable"

    def __init__(self, inner: Coordination) -> None:
        self.inner = inner
        self.faulty = FaultyCoordination()
        self.broken = False

    def _target(self) -> Coordination:
        return self.faulty if self.broken else self.inner

    async def get(self, slot: Slot, key: str) -> Entry | None:
        return await self._target().get(slot, key)

    async def create(self, slot: Slot, key: str, value: bytes) -> int:
        return await self._target().create(slot, key, value)

    async def update(self, slot: Slot, key: str, value: bytes, *, revision: int) -> int:
        return await self._target().update(slot, key, value, revision=revision)

    async def put(self, slot: Slot, key: str, value: bytes) -> int:
        return await self._target().put(slot, key, value)

    async def delete(self, slot: Slot, key: str, *, revision: int | None = None) -> bool:
        return await self._target().delete(slot, key, revision=revision)

    async def entries(self, slot: Slot, prefix: str = "") -> list[Entry]:
        return await self._target().entries(slot, prefix)

    async def close(self) -> None:
        await self.inner.close()


class LostReplies(Switchable):
    """Writes land in ``inner`` but the caller hears :class:`OutcomeUnknown` for the next ``lose`` writes.

    Models a write that timed out after the server committed it (infra-facts §3, SIGTERM case).
    With ``conflict_always`` every ``update`` loses its compare-and-set instead (FL-51 contention).
    """

    def __init__(self, inner: Coordination, *, lose: int = 0, conflict_always: bool = False) -> None:
        super().__init__(inner)
        self.lose = lose
        self.conflict_always = conflict_always
        self.lost = 0

    def _maybe_lose(self, key: str) -> None:
        if self.lose > 0:
            self.lose -= 1
            self.lost += 1
            raise OutcomeUnknown(f"{key}: reply lost (test)")

    async def create(self, slot: Slot, key: str, value: bytes) -> int:
        rev = await super().create(slot, key, value)
        self._maybe_lose(key)
        return rev

    async def update(self, slot: Slot, key: str, value: bytes, *, revision: int) -> int:
        if self.conflict_always:
            raise RevisionConflict(key, revision)
        rev = await super().update(slot, key, value, revision=revision)
        self._maybe_lose(key)
        return rev

    async def delete(self, slot: Slot, key: str, *, revision: int | None = None) -> bool:
        ok = await super().delete(slot, key, revision=revision)
        self._maybe_lose(key)
        return ok


__all__ = ["CoordinationUnavailable", "LostReplies", "Switchable"]
