"""Admission and withdrawal of a node without ``data`` (FL-144, FL-63).

A node without its own estate copy claims no seat until some data node confirms that its copy is
level with its logs: every domain ``serving`` (not lagging, not out of service) in that node's
``estate.status`` answer. Until then ``/ready`` answers 503 ``admission_withheld``
(``ctx.extras["admission_withheld"]`` carries the detail).

Once admitted, the same probe runs every :data:`PROBE_INTERVAL` seconds. When
:data:`FAILURES_TO_SHED` probes in a row get no level answer — every data node silent, not serving,
or none live in presence (the router's "nobody answered") — the node is *unserviceable*: it logs
``seats_shed_unserviceable``, marks its presence (``unserviceable: true``; peers drop it from every
share, :mod:`shared.leases._fairshare`), releases every seat (reason ``unserviceable``: a running turn
finishes first) and claims none; ``/ready`` answers ``admission_withheld`` again. The first level
answer after that re-admits it (``seats_readmitted``). When presence names no live data node at
all the node withdraws at the first such probe: no copy can answer, and a node that waited for
three probes would meanwhile claim the seats of the data nodes whose presence just lapsed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from shared import logs
from shared.coordination import CoordinationUnavailable
from shared.router import EstateRouter, RouterError
from shared.runtime import NodeContext

__all__ = ["FAILURES_TO_SHED", "NONE_LIVE", "PROBE_INTERVAL", "PROBE_WAIT", "EstateWatch"]

_log = logs.get("seat.admission")

PROBE_INTERVAL = 2.0
"""Seconds between probes (ours)."""
PROBE_WAIT = 5.0
"""Seconds one probe waits for one data node's status (ours; below the router's 10 s read wait)."""
FAILURES_TO_SHED = 3
"""Probes in a row without a level answer before an admitted node withdraws (ours)."""
NONE_LIVE = "nobody answered: presence names no live data node"
"""The probe's detail when no data node is live in presence (the node withdraws at once)."""


def level(status: dict[str, Any]) -> bool:
    """True when an ``estate.status`` answer says every domain's copy is ``serving``."""
    domains = status.get("domains")
    if not isinstance(domains, dict) or not domains:
        return False
    return all(isinstance(d, dict) and d.get("state") == "serving" for d in domains.values())


class EstateWatch:
    """Admits a node without data once a data node's copy is level, withdraws it when none answers.

    Args:
        ctx: The node (``ctx.extras`` gets ``admission_withheld`` and ``unserviceable``).
        router: The node's estate router.
        on_change: ``await on_change(admitted)`` after each change of admission.
        interval: Seconds between probes.
        wait: Seconds per data node per probe.
        failures_to_shed: Failed probes in a row before withdrawing.
    """

    def __init__(
        self,
        ctx: NodeContext,
        router: EstateRouter,
        *,
        on_change: Callable[[bool], Awaitable[None]],
        interval: float = PROBE_INTERVAL,
        wait: float = PROBE_WAIT,
        failures_to_shed: int = FAILURES_TO_SHED,
    ) -> None:
        self._ctx = ctx
        self._router = router
        self._on_change = on_change
        self._interval = interval
        self._wait = wait
        self._failures_to_shed = failures_to_shed
        self.admitted = False
        self.failures = 0
        self.last_detail = "no data node has confirmed a level copy yet"
        self._task: asyncio.Task[None] | None = None
        self._none_live = False
        ctx.extras["admission_withheld"] = self.last_detail

    async def probe(self) -> tuple[str | None, str]:
        """Ask every live data node at once whether its copy is level (at most one wait long).

        Returns:
            ``(node, detail)``: the node that confirmed (None when none did) and what each said.
        """
        self._router.forget_view()
        try:
            nodes = await self._router.data_nodes()
        except CoordinationUnavailable as e:
            return None, f"presence unreadable: {e}"
        self._none_live = not nodes
        if not nodes:
            return None, NONE_LIVE

        async def ask(node: str) -> tuple[str, bool, str]:
            try:
                status = await self._router.call("estate.status", {}, node=node, timeout=self._wait)
            except RouterError as e:
                return node, False, str(e)
            except Exception as e:  # noqa: BLE001 - any other failure is that node not answering
                return node, False, f"{node}: {type(e).__name__}: {e}"
            if isinstance(status, dict) and level(status):
                return node, True, ""
            shown = status.get("domains") if isinstance(status, dict) else status
            return node, False, f"{node}: copy not level ({shown})"

        said: list[str] = []
        for node, ok, words in await asyncio.gather(*(ask(n) for n in nodes)):  # at most one wait
            if ok:
                return node, f"{node} confirmed a level copy"
            said.append(words)
        return None, "nobody answered with a level copy: " + "; ".join(said)

    async def step(self) -> None:
        """Run one probe and act on it (admit, withdraw, or count a failure)."""
        node, detail = await self.probe()
        self.last_detail = detail
        if node is not None:
            self.failures = 0
            if not self.admitted:
                self.admitted = True
                self._ctx.extras.pop("admission_withheld", None)
                readmit = bool(self._ctx.extras.pop("unserviceable", False))
                _log.info("seats_readmitted" if readmit else "seats_admitted", confirmed_by=node)
                await self._on_change(True)
            return
        self.failures += 1
        if not self.admitted:
            self._ctx.extras["admission_withheld"] = detail
            if self.failures == 1 or self.failures % 15 == 0:
                _log.info("admission_withheld", detail=detail, probes=self.failures)
            return
        if self.failures >= self._failures_to_shed or self._none_live:
            self.admitted = False
            self._ctx.extras["unserviceable"] = True
            self._ctx.extras["admission_withheld"] = f"unserviceable: {detail}"
            _log.warning(
                "seats_shed_unserviceable",
                seats=sorted(self._ctx.seats_held),
                probes=self.failures,
                detail=detail,
            )
            await self._on_change(False)

    async def _run(self) -> None:
        while True:
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the watch never dies; the next probe decides
                _log.warning("admission_probe_failed", error=f"{type(e).__name__}: {e}")
            await asyncio.sleep(self._interval)

    def start(self) -> None:
        """Start probing."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="estate-watch")

    async def stop(self) -> None:
        """Stop probing."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
