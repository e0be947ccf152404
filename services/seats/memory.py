"""A held seat's memory on this node (AG-7): hydrated at acquisition, read by recall, forgotten on release.

Acquisition's memory step runs before the seat's MCP servers start and before its inbox and control
consumers attach (:meth:`SeatMemory.hydrate`, called first by the seats role's acquire hook). On a
**data** node it reads ``CREWLET_MEMORY``'s last sequence L and waits until this node's memory
applier is through L; on a **satellite** (``[seats]`` without ``data``) it replays the seat's subjects
into a per-seat :class:`~shared.memory.ScratchCache` whose consumer stays open while the seat is
held, so rows any node writes later (the reflect dispatcher's episodes) reach it too; this node's
own acknowledged writes are applied at once as well (a listener on the node's
:class:`~shared.memory.MemoryWriter`), without waiting for the consumer to deliver them. Bound
15 s; a failure logs ``memory_hydration_failed{seat, reason}`` and raises, so the seat host releases
the seat ``acquire_failed`` and another node takes it (FL-55). Success logs
``memory_hydrated{seat, rows, elapsed_ms}`` and observes ``crewlet_memory_hydration_duration_seconds``.
Release forgets the seat's publish watermark and drops its scratch cache.

Reads (:meth:`SeatMemory.rows`) answer from the scratch cache on a satellite, else through the
router at this node's floor for the seat (the writer's last acknowledged sequence, ES-37).

The fault hook ``memory_hydrate`` (AG-7) is a test's ``sitecustomize.py`` wrapping
:func:`shared.memory.hydrate_scratch` / :func:`shared.memory.hydrate_on_data_node`; this module calls
them through the package so a wrapper installed at interpreter start is the one called.
"""

from __future__ import annotations

import time
from typing import Any

from shared import logs, memory
from shared.estate import STREAMS
from shared.estate.log import StateLog
from shared.router import router_of
from shared.runtime import NodeContext
from shared.telemetry import default_metrics

__all__ = ["SeatMemory"]

_log = logs.get("seat.memory")


class SeatMemory:
    """The memory step of this node's seats, and where their memory is read (AG-7).

    Args:
        ctx: The node context (``extras["memory"]`` the writer, ``extras["estate"]`` on a data node).
        within: The hydration bound in seconds (15, AG-7).
    """

    def __init__(self, ctx: NodeContext, *, within: float = memory.HYDRATE_WITHIN) -> None:
        self.ctx = ctx
        self.within = within
        self.caches: dict[str, memory.ScratchCache] = {}

    @property
    def writer(self) -> memory.MemoryWriter | None:
        """The node's memory writer (every node opens one at boot, AG-2), or None."""
        found = self.ctx.extras.get("memory")
        return found if isinstance(found, memory.MemoryWriter) else None

    def _estate(self) -> Any:
        est = self.ctx.extras.get("estate")
        return est if est is not None and "memory" in getattr(est, "appliers", {}) else None

    @property
    def on_data_node(self) -> bool:
        """True when this node keeps an estate copy applying ``CREWLET_MEMORY``."""
        return "data" in self.ctx.cfg.roles

    async def hydrate(self, handle: str) -> int:
        """Make ``handle``'s memory readable here before the seat is admitted (AG-7).

        Returns:
            The seat's row count here.

        Raises:
            HydrationFailed: not within the bound, a stalled replay, the broker unreachable, or
                the ``memory_hydrate`` fault; logged ``memory_hydration_failed{seat, reason}``.
        """
        t0 = time.perf_counter()
        writer = self.writer  # opened at boot, after the roles were built: listen from the first acquire
        if writer is not None and self._own_write not in writer.listeners:
            writer.listeners.append(self._own_write)
        try:
            if self.on_data_node:
                count = await self._hydrate_copy(handle)
            else:
                cache = await memory.hydrate_scratch(self._js(), handle, within=self.within, follow=True)
                self.caches[handle] = cache
                count = len(cache)
        except memory.HydrationFailed as e:
            _log.warning("memory_hydration_failed", seat=handle, reason=e.reason, detail=str(e))
            raise
        except Exception as e:  # noqa: BLE001 - whatever broke, the seat is not admitted here
            _log.warning(
                "memory_hydration_failed", seat=handle, reason="error", detail=f"{type(e).__name__}: {e}"
            )
            raise memory.HydrationFailed("error", f"{type(e).__name__}: {e}") from e
        elapsed = time.perf_counter() - t0
        default_metrics().memory_hydration.observe(elapsed)
        _log.info("memory_hydrated", seat=handle, rows=count, elapsed_ms=round(elapsed * 1000, 1))
        return count

    async def _hydrate_copy(self, handle: str) -> int:
        est = self._estate()
        if est is None:
            raise memory.HydrationFailed("no_copy", "this data node's estate is not open yet")
        log = StateLog(self._js())

        async def last() -> int:
            return (await log.head("memory"))[1]

        def applied() -> int:
            return int(est.appliers["memory"].applied)

        target = await memory.hydrate_on_data_node(last, applied, within=self.within)
        router = router_of(self.ctx)
        router.note_position({"stream": STREAMS["memory"], "seq": target})
        found = await router.call("memory.count", {"handle": handle}, timeout=self.within)
        return int(found["data"]["rows"])

    def _js(self) -> Any:
        link = self.ctx.link
        if link is None:
            raise memory.HydrationFailed("broker_unreachable", "this node has no broker link")
        return link.js

    async def release(self, handle: str) -> None:
        """Flush the outbox, forget the seat's publish watermark, stop following its log and drop its
        scratch cache (AG-2, AG-7).

        The seats role calls this from the release hook, which the seat host runs before it deletes
        the lease: a write the broker did not take during the seat's last turn is published before
        the next holder can claim the seat and hydrate (AG-2: flushed on graceful release).
        """
        writer = self.writer
        if writer is not None:
            if writer.outbox.depth():
                try:
                    await writer.flush()
                except Exception as e:  # noqa: BLE001 - the 30 s loop retries; the release goes on
                    _log.warning("memory_outbox_flush_failed", seat=handle, error=f"{type(e).__name__}: {e}")
            writer.forget(handle)
        cache = self.caches.pop(handle, None)
        if cache is not None:
            await cache.close()

    def _own_write(self, subject: str, seq: int, row: dict[str, Any] | None, at: int) -> None:
        parsed = memory.parse_subject(subject)
        cache = self.caches.get(parsed[0]) if parsed is not None else None
        if cache is not None:
            cache.apply(subject, seq, row, at)

    async def rows(self, handle: str, tables: list[str], *, limit: int = 10_000) -> list[dict[str, Any]]:
        """The seat's rows of ``tables``, newest first (``memory.rows``' shape).

        A satellite holding the seat answers from its scratch cache; otherwise the router answers
        at the writer's floor for the seat.

        Raises:
            RouterError, EstateError: the read could not be served (the caller renders nothing).
        """
        cache = self.caches.get(handle)
        if cache is not None:
            return cache.rows(tables, limit=limit)
        router = router_of(self.ctx)
        writer = self.writer
        if writer is not None and writer.floor(handle):
            router.note_position({"stream": STREAMS["memory"], "seq": writer.floor(handle)})
        found = await router.call("memory.rows", {"handle": handle, "tables": tables, "limit": limit})
        return list(found["data"]["rows"])
