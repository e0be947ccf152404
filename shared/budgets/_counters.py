"""The budget counters in the ``budgets`` slot: one compare-and-set primitive (FL-119).

A counter is one key per scope, period and window (``org.day.2026-11-29``) holding
``{"spent": tokens}`` and, after a refusal in that window, ``"refused": {"at", "requested",
"ceiling"}``. Every change is a read followed by a write at the read revision; a lost race is
re-read and retried with a jittered, growing pause until a deadline.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from typing import Any

from shared.coordination import (
    Coordination,
    CoordinationBusy,
    CoordinationUnavailable,
    RevisionConflict,
    Slot,
)

from ._errors import BudgetUnavailable

__all__ = ["SLOT", "CoordSource", "Counters", "Refused", "decode"]

SLOT: Slot = "budgets"
CoordSource = Coordination | Callable[[], Coordination | None] | None
Record = dict[str, Any]


class Refused(Exception):
    """A checked add found no room (internal: the caller turns it into ``BudgetExhausted``).

    Attributes:
        spent: Tokens the counter held when it refused.
    """

    def __init__(self, spent: int) -> None:
        self.spent = spent
        super().__init__(spent)


def decode(raw: bytes | None, key: str) -> Record:
    """Return a counter record (``{"spent": 0}`` for an absent key).

    Raises:
        BudgetUnavailable: the bytes are not a counter record (never read as "no usage").
    """
    if raw is None:
        return {"spent": 0}
    try:
        rec = json.loads(raw)
    except ValueError:
        raise BudgetUnavailable(f"budget counter {key!r} holds unreadable bytes") from None
    spent = rec.get("spent") if isinstance(rec, dict) else None
    if isinstance(spent, bool) or not isinstance(spent, int):
        raise BudgetUnavailable(f"budget counter {key!r} holds no whole 'spent' figure")
    return rec  # type: ignore[no-any-return]  # a dict, checked above


class Counters:
    """Counter reads and compare-and-set writes over the coordination store.

    Args:
        coord: The store, or a callable returning it (None while it is not open).
        cas_deadline: Seconds one update keeps retrying lost compare-and-sets.
    """

    def __init__(self, coord: CoordSource, *, cas_deadline: float) -> None:
        self._coord = coord
        self.cas_deadline = cas_deadline

    def store(self) -> Coordination:
        """Return the store.

        Raises:
            BudgetUnavailable: it is not open yet.
        """
        coord = self._coord() if callable(self._coord) else self._coord
        if coord is None:
            raise BudgetUnavailable("the coordination store is not open yet")
        return coord

    async def cas(self, key: str, mutate: Callable[[Record], Record]) -> tuple[Record, Record]:
        """Read ``key``, let ``mutate`` return the new record, write it at the read revision.

        Returns:
            ``(old, new)`` records.

        Raises:
            Refused: ``mutate`` refused.
            BudgetUnavailable: lost compare-and-sets past the deadline, or an unreadable record.
            CoordinationUnavailable: the store could not be asked (OutcomeUnknown included).
        """
        coord = self.store()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.cas_deadline
        attempt = 0
        while True:
            entry = await coord.get(SLOT, key)
            old = decode(entry.value if entry else None, key)
            new = mutate(old)
            try:
                await coord.update(
                    SLOT, key, json.dumps(new).encode(), revision=entry.revision if entry else 0
                )
                return old, new
            except (RevisionConflict, CoordinationBusy):
                # 10164 under concurrent writers of one counter: nothing of this write landed, so a
                # fresh read and another compare-and-set is safe (infra-facts N1)
                attempt += 1
                if loop.time() >= deadline:
                    raise BudgetUnavailable(
                        f"budget counter {key!r}: compare-and-set lost {attempt} times"
                        f" in {self.cas_deadline:g} s"
                    ) from None
                await asyncio.sleep(random.uniform(0, min(0.05, 0.001 * 2 ** min(attempt, 6))))

    async def add(self, key: str, delta: int, *, ceiling: int | None, clear_refusal: bool) -> tuple[int, int]:
        """Add ``delta`` tokens to ``key``; never below 0.

        Args:
            key: The counter.
            delta: Tokens to add (negative to take back).
            ceiling: Refuse when the sum would pass it; None for unchecked.
            clear_refusal: Drop the record's refusal marker (an admitted charge does).

        Returns:
            ``(before, after)`` in tokens.

        Raises:
            Refused, BudgetUnavailable, CoordinationUnavailable: see :meth:`cas`.
        """

        def mutate(old: Record) -> Record:
            spent = int(old["spent"])
            if ceiling is not None and spent + delta > ceiling:
                raise Refused(spent)
            new = {**old, "spent": max(0, spent + delta)}
            if clear_refusal:
                new.pop("refused", None)
            return new

        old, new = await self.cas(key, mutate)
        return int(old["spent"]), int(new["spent"])

    async def read(self, keys: list[str]) -> list[Record]:
        """Read several counters at once (absent ones read as ``{"spent": 0}``).

        Raises:
            BudgetUnavailable: the store could not be asked or a record is unreadable.
        """
        coord = self.store()
        try:
            entries = await asyncio.gather(*(coord.get(SLOT, k) for k in keys))
        except CoordinationUnavailable as e:
            raise BudgetUnavailable(str(e)) from e
        return [decode(e.value if e else None, k) for k, e in zip(keys, entries, strict=True)]

    async def exists(self, key: str) -> bool:
        """Whether ``key`` holds a counter.

        Raises:
            CoordinationUnavailable: the store could not be asked.
        """
        return await self.store().get(SLOT, key) is not None
