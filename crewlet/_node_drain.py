"""The pieces of a node's drain (FL-129): the progress line and the roles' drain-then-stop.

The drain's order is :meth:`crewlet.node.NodeRun.drain`; these are its two reusable steps.
"""

from __future__ import annotations

import asyncio
import time

from shared import logs
from shared.runtime import NodeContext, RoleService

__all__ = ["DRAIN_REPORT_EVERY", "report_drain", "wind_down"]

_log = logs.get("node")


DRAIN_REPORT_EVERY = 10.0
"""Seconds between two ``drain_in_progress`` lines while a drain runs (FL-129)."""


async def report_drain(ctx: NodeContext, every: float = DRAIN_REPORT_EVERY) -> None:
    """Log ``drain_in_progress`` (turns in flight, seats still held, seconds since the drain began)
    every ``every`` seconds until cancelled at the end of the drain (FL-129)."""
    began = time.monotonic()
    while True:
        await asyncio.sleep(every)
        _log.info(
            "drain_in_progress",
            in_flight=ctx.in_flight,
            seats_held=len(ctx.seats_held),
            seconds=round(time.monotonic() - began, 1),
        )


async def wind_down(roles: list[RoleService], ctx: NodeContext) -> None:
    """Drain every role of ``roles``, then stop each, in the order given (FL-129).

    A failing drain or stop is logged (``role_drain_failed``, ``role_stop_failed``) and never skips
    the rest.
    """
    for role in roles:
        try:
            await role.drain(ctx)
        except Exception as e:  # noqa: BLE001 - a failing drain must not skip the rest
            _log.error("role_drain_failed", role=role.name, error=f"{type(e).__name__}: {e}")
    for role in roles:
        try:
            await role.stop(ctx)
        except Exception as e:  # noqa: BLE001
            _log.error("role_stop_failed", role=role.name, error=f"{type(e).__name__}: {e}")
