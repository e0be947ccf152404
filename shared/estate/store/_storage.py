"""Bounded storage, measured (issue 11; ES-59, ES-92): the estate file's and WAL's sizes as gauges,
and the ``wal_large`` alarm.

:func:`observe_storage` is called on every position beat (ES-23, every 10 s). It reads
:meth:`EstateStore.sizes` (two ``stat`` calls, no SQL), sets the process-wide gauges and evaluates
``wal_large`` (the WAL past 1 GiB, ES-92) on the beat's :class:`Alarms`; the same sizes ride on the
node's positions row (``store_bytes``, ``wal_bytes``) so ``GET /estate`` and ``crewlet retention
status`` can show every node's.

Gauges (no labels: one estate per process; in the process's default Prometheus registry, which
``/metrics`` serves beside the turn metrics):

- ``crewlet_estate_store_bytes``: ``estate.db`` in bytes;
- ``crewlet_estate_wal_bytes``: ``estate.db-wal`` in bytes at the last beat;
- ``crewlet_estate_wal_peak_bytes``: the largest WAL size seen since the store was opened.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY, Gauge

from .._alarms import Alarms
from ._store import EstateStore

__all__ = ["WAL_LARGE_BYTES", "observe_storage"]

WAL_LARGE_BYTES = 1 << 30
"""``wal_large`` fires while the estate WAL is larger than this many bytes (1 GiB, ES-92)."""


def _gauge(name: str, doc: str) -> Gauge:
    existing = getattr(REGISTRY, "_names_to_collectors", {}).get(name)
    if isinstance(existing, Gauge):
        return existing
    return Gauge(name, doc)


_STORE = _gauge("crewlet_estate_store_bytes", "Size of this node's estate file in bytes (ES-59).")
_WAL = _gauge("crewlet_estate_wal_bytes", "Size of this node's estate WAL in bytes at the last beat.")
_WAL_PEAK = _gauge(
    "crewlet_estate_wal_peak_bytes", "Largest estate WAL size in bytes seen since the store was opened."
)


def observe_storage(
    store: EstateStore, alarms: Alarms, *, wal_large_bytes: int = WAL_LARGE_BYTES
) -> dict[str, int]:
    """Measure the estate file and its WAL, set the gauges and evaluate ``wal_large`` (ES-92).

    Args:
        store: The open estate file.
        alarms: The alarms of the tick that calls this (the position beat's).
        wal_large_bytes: The ``wal_large`` threshold in bytes (1 GiB; lowered only by tests).

    Returns:
        ``{"store_bytes": int, "wal_bytes": int}`` (bytes; 0 for a file that is absent), the two
        fields of the positions row. Never raises: an unreadable size is 0.
    """
    sizes = store.sizes()
    _STORE.set(sizes["store_bytes"])
    _WAL.set(sizes["wal_bytes"])
    _WAL_PEAK.set(sizes["wal_peak_bytes"])
    measurement: dict[str, Any] = {
        "wal_bytes": sizes["wal_bytes"],
        "threshold_bytes": wal_large_bytes,
        "store_file": str(store.path),
    }
    alarms.set("wal_large", sizes["wal_bytes"] > wal_large_bytes, **measurement)
    return {"store_bytes": sizes["store_bytes"], "wal_bytes": sizes["wal_bytes"]}
