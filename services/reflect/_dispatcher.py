"""The reflect dispatcher (AG-6): group ``crewlet-reflect`` on ``crewlet.events.agent_turn_completed``.

Every node joins (it needs no data: memory is read through the router and written through the
node's memory writer, FL-86). One delivery at a time, **always acked**: a pass that fails is not
worth a redelivery that would fail again, and a twin is harmless (the episode collapses on its
key, the profile counts a work key once). The gates (:mod:`._gates`) run first; then each worker
of :data:`._workers.ORDER` that the company leaves on, one raising never stopping the next
(``reflect_worker_failed``); the pass ends with ``reflection_completed{turn_id, workers}``, a log
line and an event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

import nats.errors

from shared import logs
from shared.budgets import Budgets
from shared.bus import REFLECT_GROUP, attach_group
from shared.memory import RoutedMemory

from . import _workers
from ._auxiliary import Auxiliary
from ._gates import Gated, RecentKeys, first_gate

__all__ = ["ReflectDispatcher"]

_log = logs.get("reflect")


class ReflectDispatcher:
    """One node's member of the reflect group (AG-6).

    Args:
        js: The node's JetStream context.
        node_id: This node.
        org: The applied org model now (``lambda: ctx.org``), or None.
        memory: Reads and writes of seats' memory.
        aux: The auxiliary model calls.
        budgets: The node's budgets (the ``no_budget`` gate), or None.
        emit: Records an event this node published.
        has_data: Whether this node runs ``data`` (the group does not need it).
    """

    def __init__(
        self,
        js: Any,
        *,
        node_id: str,
        org: Callable[[], Any],
        memory: RoutedMemory,
        aux: Auxiliary,
        budgets: Budgets | None,
        emit: Callable[[dict[str, Any]], None],
        has_data: bool,
    ) -> None:
        self._js = js
        self.node_id = node_id
        self._org = org
        self.memory = memory
        self.aux = aux
        self._budgets = budgets
        self._emit = emit
        self._has_data = has_data
        self._recent = RecentKeys()
        self._psub: Any = None
        self._task: asyncio.Task[None] | None = None
        self.passes = 0

    async def start(self) -> bool:
        """Join the group and start taking deliveries; False when this node may not join.

        Raises:
            BusUnavailable: the group could not be created or bound.
        """
        self._psub = await attach_group(self._js, REFLECT_GROUP, has_data=self._has_data)
        if self._psub is None:
            return False
        self._task = asyncio.create_task(self._run(), name="reflect-dispatcher")
        return True

    async def stop(self) -> None:
        """Stop taking deliveries (a pass in hand finishes first is not awaited: it is cancelled
        and its delivery comes back after the ack wait) and close the auxiliary clients."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._psub is not None:
            with contextlib.suppress(Exception):
                await self._psub.unsubscribe()
            self._psub = None
        await self.aux.aclose()

    async def _run(self) -> None:
        while True:
            try:
                msgs = await self._psub.fetch(1, timeout=2.0)
            except (nats.errors.TimeoutError, TimeoutError):
                continue
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the broker is away: ask again shortly
                _log.warning("reflect_fetch_failed", error=f"{type(e).__name__}: {e}")
                await asyncio.sleep(1.0)
                continue
            for msg in msgs:
                try:
                    await self.reflect(msg.data)
                except Exception as e:  # noqa: BLE001 - a defect in a pass never stops the member
                    _log.error("reflect_pass_failed", error=f"{type(e).__name__}: {e}")
                finally:
                    with contextlib.suppress(Exception):
                        await msg.ack()  # always (AG-6)

    async def reflect(self, raw: bytes) -> list[str] | None:
        """Run one pass over one delivery's bytes; the workers that ran, or None when a gate skipped."""
        self.passes += 1
        try:
            payload: Any = json.loads(raw)
        except ValueError:
            payload = None
        turn_id = payload.get("turn_id") if isinstance(payload, dict) else None
        org = self._org()
        try:
            seat, names = await first_gate(payload, org, self._budgets, self._recent)
        except Gated as g:
            _log.info("reflection_skipped", gate=g.gate, worker="all", turn_id=turn_id, detail=g.detail)
            return None
        assert isinstance(payload, dict)
        job = _workers.Job(payload, seat, org, self.memory, self.aux, org.company.learning)
        ran: list[str] = []
        for name in _workers.ORDER:
            if name not in names:
                continue
            worker = _workers.WORKERS[name]
            try:
                if await worker(job):
                    ran.append(name)
            except Exception as e:  # noqa: BLE001 - one worker raising never stops the next (AG-6)
                _log.warning(
                    "reflect_worker_failed", worker=name, turn_id=turn_id, error=f"{type(e).__name__}: {e}"
                )
        _log.info("reflection_completed", turn_id=turn_id, workers=ran, seat=seat.handle)
        self._emit(
            {
                "event_time": int(time.time() * 1_000_000),
                "event_id": f"reflection_completed.{turn_id}.{self.node_id}",
                "event_type": "reflection_completed",
                "source": self.node_id,
                "category": "turns",
                "agent_id": seat.handle,
                "data": {"turn_id": turn_id, "workers": ran, "seat": seat.handle},
                "parties": {seat.handle: "seat"},
            }
        )
        return ran
