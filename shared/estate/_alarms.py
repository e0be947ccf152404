"""Alarms of this area (ES-92): a gauge per kind plus a WARN line when one starts and when it clears.

Each alarm is evaluated on existing ticks (the position heartbeat). The gauge is
``crewlet_alarm_active{kind}`` in the process's Prometheus registry (``crewlet.alarm.active`` in
the spec's dotted notation); the lines are ``alarm_started`` / ``alarm_cleared`` with ``kind``,
the measurement, and on clearing the ``duration_seconds`` it was active.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import REGISTRY, Gauge

from shared import logs

__all__ = ["Alarms"]

_log = logs.get("statelog")


def _gauge() -> Gauge:
    existing = getattr(REGISTRY, "_names_to_collectors", {}).get("crewlet_alarm_active")
    if isinstance(existing, Gauge):
        return existing
    return Gauge("crewlet_alarm_active", "1 while an alarm of this kind is active (ES-92)", ["kind"])


class Alarms:
    """The alarm states of one process.

    Attributes:
        active: Kind → the monotonic instant it started.
    """

    def __init__(self) -> None:
        self.active: dict[str, float] = {}
        self._gauge = _gauge()

    def set(self, kind: str, on: bool, **measurement: Any) -> None:
        """Raise or clear ``kind``; logs only on a change of state."""
        if on and kind not in self.active:
            self.active[kind] = time.monotonic()
            self._gauge.labels(kind=kind).set(1)
            _log.warning("alarm_started", kind=kind, **measurement)
        elif not on and kind in self.active:
            started = self.active.pop(kind)
            self._gauge.labels(kind=kind).set(0)
            _log.warning(
                "alarm_cleared",
                kind=kind,
                duration_seconds=round(time.monotonic() - started, 3),
                **measurement,
            )
