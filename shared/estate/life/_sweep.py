"""Per-node retention sweeps of the estate file (ES-8, ES-85).

Swept on every data node, not as a singleton duty: each node holds its own copy, and the rows
swept are node-local (never written through the log).

- The operation ledger (``statelog_ledger``): rows applied more than ``retention.ledger_days``
  (30) days ago are deleted, and the cutoff is kept per domain in ``statelog_ledger_watermark``
  (``reason`` ``sweep``). The watermark only rises. A write minted before it with no ledger row is
  then answered ``unknown`` (:mod:`shared.estate._writer`, ES-8).
- The inbox (``tracker.native.inbox_retention_days``): this project keeps no inbox table in the
  estate (wakes ride the bus and are not stored as rows here), so there is nothing to sweep.
- History rows are never swept (ES-85).

:class:`LedgerSweeper` runs :func:`sweep_ledger` at start and then every ``interval`` seconds
(hourly); the data role starts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from sqlalchemy import Connection, delete, select

from shared import logs

from ..domains import LOGS
from ..store._schema import T_LEDGER, T_LEDGER_WATERMARK
from ..store._store import EstateStore

__all__ = ["SWEEP_INTERVAL", "LedgerSweeper", "record_watermark", "sweep_ledger"]

_log = logs.get("statelog")

SWEEP_INTERVAL = 3600.0
"""Seconds between sweeps on one node (ours: hourly)."""


def record_watermark(conn: Connection, domain: str, cutoff: int, reason: str) -> int:
    """Raise ``domain``'s ledger watermark to ``cutoff`` (unix µs) in the open transaction.

    Args:
        conn: A write connection.
        domain: ``tracker`` or ``pages``.
        cutoff: The instant below which ledger rows may be gone.
        reason: ``sweep`` or ``join`` (an adoption from a donor whose snapshot lacked a ledger).

    Returns:
        The watermark now stored (the higher of the old one and ``cutoff``: it never goes down).

    Raises:
        ValueError: ``reason`` is neither ``sweep`` nor ``join``, or ``cutoff`` is negative.
    """
    if reason not in ("sweep", "join"):
        raise ValueError(f"reason: {reason!r} is neither sweep nor join")
    if cutoff < 0:
        raise ValueError(f"cutoff: {cutoff} is negative")
    old = conn.execute(
        select(T_LEDGER_WATERMARK.c.cutoff_instant).where(T_LEDGER_WATERMARK.c.domain == domain)
    ).scalar()
    if old is not None and int(old) >= cutoff:
        return int(old)
    conn.exec_driver_sql(
        "INSERT INTO statelog_ledger_watermark (domain, cutoff_instant, reason) VALUES (?, ?, ?) "
        "ON CONFLICT(domain) DO UPDATE SET cutoff_instant = excluded.cutoff_instant, reason = excluded.reason",
        (domain, cutoff, reason),
    )
    return cutoff


async def sweep_ledger(
    store: EstateStore, *, ledger_days: float, now_us: int | None = None, domains: tuple[str, ...] = LOGS
) -> dict[str, int]:
    """Delete ledger rows applied more than ``ledger_days`` ago and record the cutoff (ES-8, ES-85).

    Args:
        store: This node's estate file.
        ledger_days: ``retention.ledger_days`` (30).
        now_us: Now, unix microseconds (tests pass another instant).
        domains: The domains whose ledgers are swept.

    Returns:
        Domain → rows deleted. Logs ``statelog_ledger_swept`` (``domain``, ``rows``, ``cutoff``)
        per domain that lost rows.

    Raises:
        ValueError: ``ledger_days`` is not above zero.
        StoreFailed: the file could not be written.
    """
    if ledger_days <= 0:
        raise ValueError(f"ledger_days: {ledger_days} must be above zero")
    now = int(time.time() * 1_000_000) if now_us is None else now_us
    cutoff = now - int(ledger_days * 86_400 * 1_000_000)

    def run(conn: Connection) -> dict[str, int]:
        out: dict[str, int] = {}
        for domain in domains:
            res = conn.execute(
                delete(T_LEDGER).where(T_LEDGER.c.domain == domain, T_LEDGER.c.applied_at < cutoff)
            )
            out[domain] = int(res.rowcount or 0)
            record_watermark(conn, domain, cutoff, "sweep")
        return out

    swept = await store.write(run)
    for domain, rows in swept.items():
        if rows:
            _log.info("statelog_ledger_swept", domain=domain, rows=rows, cutoff=cutoff)
    return swept


class LedgerSweeper:
    """The hourly per-node ledger sweep (ES-85).

    Args:
        store: This node's estate file.
        ledger_days: ``retention.ledger_days``.
        interval: Seconds between sweeps (:data:`SWEEP_INTERVAL`).
    """

    def __init__(self, store: EstateStore, *, ledger_days: float, interval: float = SWEEP_INTERVAL) -> None:
        self._store = store
        self._days = ledger_days
        self._interval = interval
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                await sweep_ledger(self._store, ledger_days=self._days)
            except Exception as e:  # noqa: BLE001 - a failed sweep is retried on the next round
                _log.warning("statelog_ledger_sweep_failed", error=f"{type(e).__name__}: {e}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._interval)

    def start(self) -> None:
        """Sweep now and every ``interval`` seconds after."""
        if self._task is None:
            self._stopping.clear()
            self._task = asyncio.create_task(self._loop(), name="estate-ledger-sweep")

    async def stop(self) -> None:
        """Stop after the sweep in hand (the loop ends by its flag)."""
        self._stopping.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
            self._task = None
