"""Alarms of this area (ES-92): a gauge per kind plus a WARN line when one starts and when it clears.

Each alarm is evaluated on existing ticks (the position heartbeat). The gauge is
``crewlet_alarm_active{kind}`` in the process's Prometheus registry (``crewlet.alarm.active`` in
the spec's dotted notation); the lines are ``alarm_started`` / ``alarm_cleared`` with ``kind``,
the measurement, and on clearing the ``duration_seconds`` it was active.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from prometheus_client import REGISTRY, Gauge

from shared import logs

__all__ = ["Alarms", "active_alarms"]

_log = logs.get("statelog")


def _gauge() -> Gauge:
    existing = getattr(REGISTRY, "_names_to_collectors", {}).get("crewlet_alarm_active")
    if isinstance(existing, Gauge):
        return existing
    return Gauge("crewlet_alarm_active", "1 while an alarm of this kind is active (ES-92)", ["kind"])


_LIVE: weakref.WeakSet[Alarms] = weakref.WeakSet()


def active_alarms() -> dict[str, dict[str, Any]]:
    """Every alarm active in this process (``GET /estate``, ``crewlet retention status``).

    Returns:
        Kind → ``{"since": unix µs it started, "measurement": the last measurement it was set with}``
        over every live :class:`Alarms` of the process (the earliest start wins when two hold one kind).
    """
    out: dict[str, dict[str, Any]] = {}
    for alarms in list(_LIVE):
        for kind, detail in list(alarms.detail.items()):
            if kind in alarms.active and (kind not in out or detail["since"] < out[kind]["since"]):
                out[kind] = detail
    return out


class Alarms:
    """The alarm states of one process.

    Attributes:
        active: Kind → the monotonic instant it started.
        detail: Kind → ``{"since": unix µs, "measurement": {...}}`` while active (the last measurement).
    """

    def __init__(self) -> None:
        self.active: dict[str, float] = {}
        self.detail: dict[str, dict[str, Any]] = {}
        self._gauge = _gauge()
        _LIVE.add(self)

    def set(self, kind: str, on: bool, **measurement: Any) -> None:
        """Raise or clear ``kind``; logs only on a change of state."""
        if on:
            since = self.detail.get(kind, {}).get("since") or int(time.time() * 1_000_000)
            self.detail[kind] = {"since": since, "measurement": dict(measurement)}
        else:
            self.detail.pop(kind, None)
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
