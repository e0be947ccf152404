"""The completion ledger: which trigger constituents a seat has finished (FL-88..FL-90).

Records live in the ``ledger`` bucket (age 7 days, FL-34), one key per ``(scope, constituent)``:
``{scope}.{constituent}``, the constituent being an event id. Keys are the constituent event ids,
never a digest of a coalesced batch (that changes on every redelivery), so a redelivery that only
partly overlaps runs only what is new. There is no in-progress state: the seat lease already
serialises a seat's work.

Both directions fail open (FL-33, FL-89): an unreadable ledger answers "nothing worked" so the
turn runs (possibly twice); a failed write is logged and ignored, since it cannot un-ship the
turn's effects. The admission gate already stops new turns within one heartbeat of an unreachable
store.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from shared import logs
from shared.coordination import Coordination, CoordinationUnavailable

__all__ = ["Ledger"]

_log = logs.get("seat.ledger")
_SAFE = re.compile(r"^[A-Za-z0-9_=-]{1,128}$")


def _token(part: str) -> str:
    """A KV-key-safe token for one scope or constituent; injective (hashed when not safe)."""
    if _SAFE.match(part) and not part.startswith("h_"):
        return part
    return "h_" + hashlib.sha256(part.encode()).hexdigest()[:32]


class Ledger:
    """The completion ledger over the coordination store (FL-88).

    Args:
        coord: The coordination store.
    """

    def __init__(self, coord: Coordination) -> None:
        self._coord = coord

    @staticmethod
    def key(scope: str, constituent: str) -> str:
        """The ledger key of one constituent of one scope."""
        return f"{_token(scope)}.{_token(constituent)}"

    async def worked(self, scope: str, keys: Iterable[str]) -> set[str]:
        """Return the subset of ``keys`` this scope has already finished (read before a turn).

        Args:
            scope: The seat handle.
            keys: The trigger's constituent event ids.

        Returns:
            The constituents already recorded. When the ledger cannot be read: the empty set
            (fail open, FL-89: the turn runs), logged as ``ledger_read_failed`` naming the ``keys``
            (so a turn worked twice for it can be told from a real double run).
        """
        wanted = list(dict.fromkeys(keys))
        try:
            found = await asyncio.gather(*(self._coord.get("ledger", self.key(scope, k)) for k in wanted))
        except CoordinationUnavailable as e:
            _log.warning("ledger_read_failed", scope=scope, keys=wanted, error=str(e))
            return set()
        return {k for k, entry in zip(wanted, found, strict=True) if entry is not None}

    async def record(
        self, scope: str, key: str, detail: dict[str, Any] | None = None, *, at: datetime | None = None
    ) -> bool:
        """Record one constituent as finished, after the turn's side effects shipped.

        Args:
            scope: The seat handle.
            key: The constituent event id.
            detail: What to keep with it (turn id, outcome...), JSON-serialisable.
            at: When the work finished (UTC); now when None.

        Returns:
            True when written; False when the write failed (best effort, FL-89), logged as
            ``ledger_write_failed``.
        """
        value = json.dumps(
            {"detail": detail or {}, "at": (at or datetime.now(UTC)).isoformat()}, separators=(",", ":")
        ).encode()
        try:
            await self._coord.put("ledger", self.key(scope, key), value)
        except CoordinationUnavailable as e:
            _log.warning("ledger_write_failed", scope=scope, key=key, error=str(e))
            return False
        return True
