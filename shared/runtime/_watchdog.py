"""The watchdog: a wedged node exits with code 75 (FL-100..FL-103).

Watched loops (the event-loop lag beat, the lease heartbeat, the sweep, duty loops) stamp a
:class:`Beat`; a separate thread compares each live beat's age with the threshold, which is the
lease TTL and is not configurable. When a live loop's lag exceeds it, the thread writes one line to
stderr (not through the logger: the logger may be what is stuck) and calls ``os._exit(75)``: no
cleanup, no signal, no graceful path, since the stuck code would have to run them. The distinct
exit code makes a supervisor's restart log say what happened.

- A registered loop that has not beaten yet has lag 0; when no watched loop is live any more the
  watchdog stands down (``watchdog_stood_down``) instead of exiting (FL-102).
- It is disarmed first in a graceful shutdown (FL-101): teardown may legitimately block.
- A C extension holding the GIL freezes this thread too, so the event-loop beat also re-arms
  ``faulthandler.dump_traceback_later(2 × TTL, exit=True)`` as a backstop (FL-100's Python caveat).
- Fencing, not this watchdog, is the defence against zombies (FL-103): it only removes the actor.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from shared import logs

__all__ = ["EXIT_WEDGED", "Beat", "Watchdog"]

EXIT_WEDGED = 75
"""The exit code of a node the watchdog ended (FL-100)."""

_log = logs.get("seat.watchdog")


class Beat:
    """One watched loop's heartbeat. Call :meth:`stamp` at least once a second while the loop is live."""

    def __init__(self, name: str, registry: Watchdog) -> None:
        self.name = name
        self._registry = registry
        self.last: float | None = None

    def stamp(self) -> None:
        """Record that the loop is turning (monotonic clock)."""
        self.last = time.monotonic()

    def done(self) -> None:
        """Unregister: the loop ended on purpose, so it is gone, not wedged (FL-102)."""
        self._registry._remove(self)


class Watchdog:
    """Ends the process when a live watched loop stops beating for longer than ``threshold`` seconds.

    Args:
        threshold: Seconds of lag that count as wedged: the lease TTL (FL-100).
        exit: Called with :data:`EXIT_WEDGED`; ``os._exit`` in production, a recorder in tests.
        stream: Where the one line goes (stderr).
    """

    def __init__(
        self, threshold: float, *, exit: Callable[[int], object] = os._exit, stream: TextIO | None = None
    ):
        self.threshold = threshold
        self.poll = min(1.0, threshold / 5)
        self._exit = exit
        self._stream = stream
        self._beats: list[Beat] = []
        self._lock = threading.Lock()
        self._armed = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self.fired: str | None = None

    def register(self, name: str) -> Beat:
        """Register a watched loop; its lag is 0 until its first stamp."""
        beat = Beat(name, self)
        with self._lock:
            self._beats.append(beat)
        return beat

    def _remove(self, beat: Beat) -> None:
        with self._lock:
            if beat in self._beats:
                self._beats.remove(beat)

    def worst_lag(self) -> float:
        """The largest lag of a live loop, in seconds (reported on ``/health``)."""
        now = time.monotonic()
        with self._lock:
            lags = [now - b.last for b in self._beats if b.last is not None]
        return max(lags, default=0.0)

    def start(self) -> None:
        """Arm: start the compare thread and the event-loop lag beat (call from the running loop)."""
        self._armed.set()
        beat = self.register("event_loop")
        self._loop_task = asyncio.get_running_loop().create_task(self._loop_beat(beat), name="watchdog-beat")
        self._thread = threading.Thread(target=self._run, name="crewlet-watchdog", daemon=True)
        self._thread.start()
        _log.info("watchdog_started", threshold_seconds=self.threshold, poll_seconds=self.poll)

    async def _loop_beat(self, beat: Beat) -> None:
        try:
            while True:
                beat.stamp()
                faulthandler.dump_traceback_later(2 * self.threshold, exit=True)
                await asyncio.sleep(min(1.0, self.poll))
        finally:
            faulthandler.cancel_dump_traceback_later()
            beat.done()

    def _run(self) -> None:
        last_poll = time.monotonic()
        while self._armed.is_set():
            time.sleep(self.poll)
            if not self._armed.is_set():
                return
            now = time.monotonic()
            overslept, last_poll = now - last_poll > self.threshold, now
            if overslept:
                # this thread's own sleep overshot the threshold: the whole process was frozen
                # (SIGSTOP, a suspended VM), not one loop wedged. Let the loop beat again before
                # judging it; fencing, not this watchdog, handles what the frozen node held (FL-103).
                _log.info("watchdog_process_resumed")
                with self._lock:
                    for b in self._beats:
                        if b.last is not None:
                            b.last = now
                continue
            with self._lock:
                live = list(self._beats)
            if not live:
                self._armed.clear()
                _log.info("watchdog_stood_down")
                return
            for b in live:
                if b.last is not None and now - b.last > self.threshold:
                    self.fired = b.name
                    stream = self._stream or sys.__stderr__
                    if stream is not None:
                        with contextlib.suppress(Exception):
                            stream.write(
                                f"crewlet watchdog: loop {b.name!r} has not turned for {now - b.last:.1f} s "
                                f"(threshold {self.threshold:g} s): exiting {EXIT_WEDGED}\n"
                            )
                            stream.flush()
                    self._armed.clear()
                    self._exit(EXIT_WEDGED)
                    return

    async def stop(self) -> None:
        """Disarm first in a graceful shutdown (FL-101) and log ``watchdog_stopped``."""
        if not self._armed.is_set() and self._thread is None:
            return
        self._armed.clear()
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        faulthandler.cancel_dump_traceback_later()
        self._thread = None
        _log.info("watchdog_stopped")
