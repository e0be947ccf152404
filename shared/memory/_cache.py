"""Memory follows the seat (AG-7): hydration at acquisition, and a satellite's scratch cache.

A **data** node's copy applies ``CREWLET_MEMORY`` with everything else; hydrating a seat there is
waiting until its applier is through the log's last sequence L read at acquisition
(:func:`hydrate_on_data_node`). A **satellite** holds no copy: it replays the seat's subjects
``crewlet.memory.<handle>.>`` (the newest record of each, the whole state of a compacted log) with
an ephemeral ordered consumer into a :class:`ScratchCache`, and applies its own acknowledged writes
to it afterwards (FL-71). Both are bounded (15 s); a replay that stalls short of the count it was
promised fails (never loops). The seat's acquisition turns a failure into a release
(``acquire_failed``) and logs ``memory_hydration_failed``; success logs ``memory_hydrated``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js import api as jsapi

from shared.estate import STREAMS, Record
from shared.estate.domains.memory import parse_subject

__all__ = ["HYDRATE_WITHIN", "HydrationFailed", "ScratchCache", "hydrate_on_data_node", "hydrate_scratch"]

HYDRATE_WITHIN = 15.0
"""Seconds a seat's memory may take to hydrate before the seat is released (AG-7, upstream)."""


class HydrationFailed(Exception):
    """The seat's memory could not be made readable here within the bound.

    Attributes:
        reason: ``timeout``, ``stalled``, ``broker_unreachable`` or ``fault``.
    """

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        super().__init__(f"{reason}: {detail}")


class ScratchCache:
    """One seat's memory rows on a satellite holder: subject → (seq, table, row).

    Args:
        handle: The seat.
    """

    def __init__(self, handle: str) -> None:
        self.handle = handle
        self._rows: dict[str, tuple[int, str, dict[str, Any], int]] = {}
        self._sub: Any = None

    @property
    def following(self) -> bool:
        """True while the replay's consumer stays open, applying every later record of the seat."""
        return self._sub is not None

    async def close(self) -> None:
        """Stop following the log (on release); idempotent, never raises."""
        sub, self._sub = self._sub, None
        if sub is not None:
            # an ephemeral consumer left behind expires by itself (inactive_threshold)
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    def apply(self, subject: str, seq: int, row: dict[str, Any] | None, at: int = 0) -> None:
        """Apply one record (a put, or None for a tombstone) unless an equal or newer one is held."""
        parsed = parse_subject(subject)
        if parsed is None or parsed[0] != self.handle:
            return
        held = self._rows.get(subject)
        if held is not None and held[0] >= seq:
            return
        if row is None:
            self._rows.pop(subject, None)
        else:
            self._rows[subject] = (seq, parsed[1], row, at)

    def rows(self, tables: list[str] | None = None, *, limit: int = 10_000) -> list[dict[str, Any]]:
        """The rows, newest first, shaped as the estate's ``memory.rows`` read answers them."""
        out = []
        for subject, (seq, table, row, at) in self._rows.items():
            if tables is None or table in tables:
                out.append({**row, "_subject": subject, "_table": table, "_seq": seq, "_at": at})
        out.sort(key=lambda r: (r["_at"], r["_seq"]), reverse=True)
        return out[:limit]

    def __len__(self) -> int:
        return len(self._rows)


async def hydrate_scratch(
    js: JetStreamContext, handle: str, *, within: float = HYDRATE_WITHIN, follow: bool = False
) -> ScratchCache:
    """Replay ``crewlet.memory.<handle>.>`` (one record per subject: the log is compacted) into a
    fresh cache (AG-7, satellite).

    An ordered push consumer (ephemeral, R1, in memory) delivers the seat's subjects; its pending
    count, read once it exists, is the promise the replay must meet. With ``follow`` the consumer
    stays open once the replay is complete, so rows any node writes later (the reflect dispatcher's
    episodes, another holder's stamps) reach the cache too, until :meth:`ScratchCache.close`. Measured here (bench figure
    14): a push replay is 2-3x faster than fetching the same messages with a pull consumer.

    Raises:
        HydrationFailed: ``timeout`` past ``within`` seconds (``stalled`` when nothing arrived in the
            last 5 s of it), ``broker_unreachable`` when the consumer could not be made.
    """
    cache = ScratchCache(handle)
    got = 0
    moved = time.monotonic()
    finished = asyncio.Event()
    expected: list[int] = []

    async def take(m: Msg) -> None:
        nonlocal got, moved
        got += 1
        moved = time.monotonic()
        try:
            rec = Record.decode(m.data)
        except (ValueError, KeyError, TypeError):
            return  # an undecodable row is no memory this build can show; the data nodes halt on it
        row = rec.payload.get("row") if rec.kind == "memory_put" else None
        cache.apply(rec.subject, int(m.metadata.sequence.stream), row, rec.at)
        if (expected and got >= expected[0]) or int(m.metadata.num_pending or 0) == 0:
            finished.set()

    deadline = time.monotonic() + within
    try:
        sub = await js.subscribe(
            f"crewlet.memory.{handle}.>",
            stream=STREAMS["memory"],
            cb=take,
            ordered_consumer=True,
            config=jsapi.ConsumerConfig(deliver_policy=jsapi.DeliverPolicy.ALL),
            pending_msgs_limit=-1,
            pending_bytes_limit=-1,
        )
        info = await sub.consumer_info()
    except (nats.errors.Error, nats.js.errors.Error, TimeoutError) as e:
        raise HydrationFailed("broker_unreachable", f"{type(e).__name__}: {e}") from None
    try:
        expected.append(
            int(info.num_pending or 0) + int(info.delivered.consumer_seq or 0)
            if info.delivered
            else int(info.num_pending or 0)
        )
        if got >= expected[0]:
            finished.set()
        while not finished.is_set():
            now = time.monotonic()
            if now > deadline:
                reason = "stalled" if now - moved > 5.0 else "timeout"
                raise HydrationFailed(reason, f"{got} of {expected[0]} rows in {within:.0f} s")
            with contextlib.suppress(TimeoutError):  # wake at least every 0.5 s to check the deadline
                await asyncio.wait_for(finished.wait(), timeout=min(0.5, max(0.01, deadline - now)))
    except BaseException:
        cache._sub = sub
        await cache.close()
        raise
    cache._sub = sub
    if not follow:
        await cache.close()
    return cache


async def hydrate_on_data_node(
    last_seq: Callable[[], Awaitable[int]],
    applied: Callable[[], int],
    *,
    within: float = HYDRATE_WITHIN,
    poll: float = 0.05,
) -> int:
    """Wait until this data node's memory copy is through the log's last sequence (AG-7).

    Args:
        last_seq: Reads ``CREWLET_MEMORY``'s last sequence L now.
        applied: This copy's memory applier checkpoint.
        within: The bound in seconds.

    Returns:
        L.

    Raises:
        HydrationFailed: ``broker_unreachable`` when L could not be read; ``timeout`` when the copy
            did not reach L within the bound.
    """
    deadline = time.monotonic() + within
    try:
        target = await asyncio.wait_for(last_seq(), timeout=within)
    except Exception as e:  # noqa: BLE001 — whatever the broker said, the seat cannot be admitted
        raise HydrationFailed(
            "broker_unreachable", f"reading the memory log's end: {type(e).__name__}"
        ) from None
    while applied() < target:
        if time.monotonic() > deadline:
            raise HydrationFailed("timeout", f"the copy is at {applied()}, the log at {target}")
        await asyncio.sleep(poll)
    return target
