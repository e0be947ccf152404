"""Stopping the estate's background loops so that a node's stop always ends (ES-8, FL-129).

Python 3.11's ``asyncio.wait_for`` can swallow a cancellation that arrives as its inner await
completes, so a loop cancelled at that instant keeps running and ``await task`` never returns: a
data node's teardown then hangs on its heartbeat or snapshot loop while its readers keep logging
timeouts. :func:`stop_task` never waits on a task without a bound.
"""

from __future__ import annotations

import asyncio

from shared import logs

__all__ = ["stop_task"]

_log = logs.get("statelog")
CANCEL_GRACE = 5.0
"""Seconds a cancelled loop gets to unwind before it is left behind (logged)."""


async def stop_task(task: asyncio.Task[None], *, name: str, grace: float = 0.0) -> bool:
    """Let ``task`` finish on its own for ``grace`` seconds, else cancel it and wait at most
    :data:`CANCEL_GRACE` seconds more; never raises (the loop logs its own failures).

    Args:
        task: The loop, already told to stop (its stop flag set) when ``grace`` > 0.
        name: For the log line when it has to be left behind (``estate_task_abandoned``).
        grace: Seconds to wait before cancelling; 0 cancels at once.

    Returns:
        True when the task ended; False when it was left running.
    """
    if grace > 0 and not task.done():
        await asyncio.wait({task}, timeout=grace)
    if not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_GRACE)
    if not task.done():
        _log.warning("estate_task_abandoned", task=name, grace_seconds=grace + CANCEL_GRACE)
        return False
    if not task.cancelled() and task.exception() is not None:
        _log.debug("estate_task_ended", task=name, error=repr(task.exception()))
    return True
