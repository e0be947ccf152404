"""Publishing a node's usage days (ES-69): every node, data or not, derives its own days and
publishes each day object's whole cumulative value to ``CREWLET_USAGE_LOG``.

One subject per (node, company day, seat or schedule):
``crewlet.statelog.usage.obj.day.<node>.<YYYY-MM-DD>.<object>`` (:func:`~._derive.object_id`). The
log is compacted (one message per subject), so the newest value is the object. Every
:data:`TICK` seconds, and at start, today and yesterday (on the company ``timezone``, read each
tick) are re-derived from the node's turn records; a value equal to what this process last
published for the subject is not sent again. A day whose records cannot be read is not published
(``usage_day_not_derived{day}``, WARN): the last value on the log stands. A publish the broker did
not take is tried again next tick (``usage_day_publish_failed``). :meth:`UsagePublisher.stop`
publishes once more, so a node drained for good leaves its last turns' spend behind.

The clock is injected (``clock``), so a test moves the day cut without waiting for midnight.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from nats.js import JetStreamContext

from shared import logs

from ..._errors import EstateError
from ...log._ids import GENERATION, mint_op_id, object_subject
from ...log._log import AppendConflict, AppendUnanswered, StateLog
from ...log._record import Record
from ._derive import TurnUsage, company_day, day_bounds, fold_day, turn_usage

__all__ = ["TICK", "TurnSource", "UsagePublisher"]

_log = logs.get("usage")

TICK = 15.0
"""Seconds between derivations while the day moves (ES-69)."""


class TurnSource(Protocol):
    """The node's turn records as the publisher reads them (``shared.records.TurnStore``)."""

    def __call__(
        self, start: float, end: float, known: Mapping[str, float]
    ) -> Awaitable[list[dict[str, Any]]]:
        """Return the finished turns started in ``[start, end)`` (unix seconds).

        ``known`` maps turn ids to the ``ended_at`` the caller already derived; such a row may come
        back with ``record`` None (unchanged). Raises whatever reading the records raised.
        """


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name or "UTC")
    except (ValueError, KeyError, OSError):
        return ZoneInfo("UTC")


class UsagePublisher:
    """Derives and publishes one node's usage days (ES-69, AG-47).

    Args:
        js: The node's JetStream context.
        node_id: This node's id (the writer of every record, and the subjects' ``<node>``).
        turns: Reads the node's turn records (:class:`TurnSource`).
        timezone: Returns the company ``timezone`` (an IANA name), read each tick.
        clock: Unix seconds now (``time.time``); injected by tests to move the day cut.
        tick: Seconds between derivations (:data:`TICK`).

    Attributes:
        published: Record publishes the broker acknowledged since start.
        last_days: The days the last tick derived (yesterday, today).
    """

    def __init__(
        self,
        js: JetStreamContext,
        *,
        node_id: str,
        turns: TurnSource,
        timezone: Callable[[], str],
        clock: Callable[[], float] = time.time,
        tick: float = TICK,
    ) -> None:
        self._log = StateLog(js)
        self.node_id = node_id
        self._turns = turns
        self._timezone = timezone
        self._clock = clock
        self._tick = tick
        self._sent: dict[str, str] = {}  # subject → digest of the value last acknowledged
        self._cache: dict[str, tuple[float, str, TurnUsage]] = {}  # turn id → (ended_at, day, usage)
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.published = 0
        self.last_days: tuple[str, ...] = ()

    def start(self) -> None:
        """Start the loop: a tick now (today and yesterday re-derived at every start), then every ``tick``."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="usage-days")

    async def stop(self, *, final: bool = True) -> None:
        """Stop the loop; with ``final``, derive and publish once more (the drain's last turns)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if final:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.tick(), 10.0)

    async def _loop(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception as e:  # noqa: BLE001 - a tick never ends the loop; the next one retries
                _log.warning("usage_tick_failed", error=f"{type(e).__name__}: {e}")
            await asyncio.sleep(self._tick)

    def days(self) -> tuple[str, str, ZoneInfo]:
        """Return ``(yesterday, today, zone)`` on the company clock now."""
        tz = _zone(self._timezone())
        now = datetime.fromtimestamp(self._clock(), tz)
        return (now - timedelta(days=1)).date().isoformat(), now.date().isoformat(), tz

    async def tick(self) -> int:
        """Derive yesterday and today and publish every changed day object; return how many landed."""
        async with self._lock:
            yesterday, today, tz = self.days()
            self.last_days = (yesterday, today)
            landed = 0
            for day in (yesterday, today):
                objects = await self._derive(day, tz)
                if objects is None:
                    continue
                for oid, payload in objects:
                    landed += await self._publish(oid, payload)
            self._forget(yesterday)
            return landed

    async def _derive(self, day: str, tz: ZoneInfo) -> list[tuple[str, dict[str, Any]]] | None:
        """The day's objects as ``(id, payload)``, or None (logged) when its records cannot be read."""
        start, end = day_bounds(day, tz)
        known = {tid: ended for tid, (ended, d, _) in self._cache.items() if d == day}
        try:
            rows = await self._turns(start, end, known)
            usages = []
            for row in sorted(rows, key=lambda r: (float(r.get("started_at") or 0), str(r.get("turn_id")))):
                tid, ended = str(row.get("turn_id") or ""), float(row.get("ended_at") or 0.0)
                cached = self._cache.get(tid)
                if row.get("record") is None and cached is not None and cached[0] == ended:
                    usages.append(cached[2])
                    continue
                use = turn_usage(row)
                self._cache[tid] = (ended, company_day(float(row.get("started_at") or start), tz), use)
                usages.append(use)
        except Exception as e:  # noqa: BLE001 - an underivable day is not published; the last value stands
            _log.warning("usage_day_not_derived", day=day, error=f"{type(e).__name__}: {e}")
            return None
        return [(o.id, o.payload()) for o in fold_day(self.node_id, day, usages)]

    def _forget(self, oldest: str) -> None:
        for tid in [t for t, (_, d, _) in self._cache.items() if d < oldest]:
            del self._cache[tid]
        keep = {s: v for s, v in self._sent.items() if s.split(".")[6] >= oldest}
        self._sent = keep

    async def _publish(self, oid: str, payload: dict[str, Any]) -> int:
        subject = object_subject("usage", "day", oid)
        digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
        if self._sent.get(subject) == digest:
            return 0
        rec = Record(
            kind="usage_day",
            domain="usage",
            subject=subject,
            op_id=mint_op_id(f"usage-{oid}"),
            writer=self.node_id,
            generation=GENERATION,
            at=int(self._clock() * 1_000_000),
            payload=payload,
            scope=(f"usage:{oid}",),
        )
        try:
            await self._log.append(rec, expect=None)
        except (EstateError, AppendConflict, AppendUnanswered) as e:
            _log.warning("usage_day_publish_failed", day=payload["day"], object=oid, error=str(e))
            return 0
        self._sent[subject] = digest
        self.published += 1
        return 1
