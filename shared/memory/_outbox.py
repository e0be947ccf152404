"""The node-local memory outbox (AG-2, FL-71): writes the broker did not take, kept to retry.

A SQLite file in the node's data directory (``memory-outbox.db``), or memory only when the node
has none. One row per subject: a later write to the same subject replaces the waiting one (the
newest state is what a compacted log keeps). Rows older than 24 h are dropped, logged
``memory_write_dropped``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared import logs

__all__ = ["DROP_AFTER", "Outbox", "Waiting"]

DROP_AFTER = 24 * 3600.0
"""Seconds a waiting write is kept before it is dropped (AG-2 [ours])."""

_log = logs.get("memory")


@dataclass(frozen=True)
class Waiting:
    """One waiting write.

    Attributes:
        subject: The row's subject.
        row: The row to publish, or None for a tombstone.
        immutable: A create (expects no record on the subject) rather than an update.
        queued_at: Unix seconds it was queued.
    """

    subject: str
    row: dict[str, Any] | None
    immutable: bool
    queued_at: float


class Outbox:
    """The outbox of one node.

    Args:
        path: The SQLite file, or None for memory only (a node without a data directory).
        clock: Unix seconds (injectable for the 24 h drop).
    """

    def __init__(self, path: Path | None, *, clock: Any = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path) if path is not None else ":memory:", check_same_thread=False)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS outbox (subject TEXT PRIMARY KEY, row TEXT, immutable INTEGER, queued_at REAL)"
        )
        self._db.commit()

    def put(self, subject: str, row: dict[str, Any] | None, *, immutable: bool) -> None:
        """Queue a write (replacing one waiting on the same subject)."""
        body = None if row is None else json.dumps(row, separators=(",", ":"), ensure_ascii=False)
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO outbox VALUES (?, ?, ?, ?)",
                (subject, body, int(immutable), self._clock()),
            )
            self._db.commit()

    def waiting(self) -> list[Waiting]:
        """Return the waiting writes, oldest first, after dropping those older than :data:`DROP_AFTER`."""
        cutoff = self._clock() - DROP_AFTER
        with self._lock:
            old = self._db.execute(
                "SELECT subject, queued_at FROM outbox WHERE queued_at < ?", (cutoff,)
            ).fetchall()
            for subject, at in old:
                _log.warning("memory_write_dropped", subject=subject, age_s=int(self._clock() - at))
            self._db.execute("DELETE FROM outbox WHERE queued_at < ?", (cutoff,))
            self._db.commit()
            found = self._db.execute(
                "SELECT subject, row, immutable, queued_at FROM outbox ORDER BY queued_at"
            ).fetchall()
        return [Waiting(s, None if r is None else json.loads(r), bool(i), float(q)) for s, r, i, q in found]

    def done(self, subject: str, queued_at: float) -> None:
        """Remove a write once published (unless a newer one replaced it meanwhile)."""
        with self._lock:
            self._db.execute("DELETE FROM outbox WHERE subject = ? AND queued_at = ?", (subject, queued_at))
            self._db.commit()

    def depth(self) -> int:
        """Writes waiting now."""
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM outbox").fetchone()[0])

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._db.close()
