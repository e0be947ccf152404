"""The watchdog ends a wedged loop with exit code 75, stands down when nothing is watched, and is
disarmed by a graceful stop (FL-100..FL-102). The exit function is the one injected edge; the
thread, the clock and the blocked event loop are real."""

from __future__ import annotations

import asyncio
import io
import time

from shared.runtime import EXIT_WEDGED, Watchdog


async def test_a_blocked_event_loop_exits_75() -> None:
    exits: list[int] = []
    out = io.StringIO()
    wd = Watchdog(1.0, exit=exits.append, stream=out)
    wd.start()
    await asyncio.sleep(0.3)
    time.sleep(
        1.5
    )  # wedge the event loop past the threshold (and short of the 2 x TTL faulthandler backstop)
    await asyncio.sleep(0)
    assert exits == [EXIT_WEDGED]
    assert wd.fired == "event_loop"
    assert "has not turned for" in out.getvalue() and "exiting 75" in out.getvalue()
    await wd.stop()


async def test_a_live_loop_is_not_killed_and_stop_disarms() -> None:
    exits: list[int] = []
    wd = Watchdog(1.0, exit=exits.append, stream=io.StringIO())
    wd.start()
    await asyncio.sleep(1.5)  # turning normally: beats every 0.2 s
    assert exits == [] and wd.worst_lag() < 1.0
    await wd.stop()
    time.sleep(1.5)  # a blocked teardown after the stop is not the watchdog's business
    assert exits == []


async def test_a_loop_that_never_beat_has_no_lag_and_gone_is_not_wedged() -> None:
    exits: list[int] = []
    wd = Watchdog(1.0, exit=exits.append, stream=io.StringIO())
    silent = wd.register("sweep")  # registered, never stamped: lag 0
    wd.start()
    await asyncio.sleep(1.5)
    assert exits == []
    silent.done()
    assert wd._loop_task is not None
    wd._loop_task.cancel()  # the event loop beat ends: nothing is watched any more
    await asyncio.sleep(0.5)
    assert not wd._armed.is_set() and exits == []
