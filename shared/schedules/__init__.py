"""Schedules seam: the org's schedules and their slots as UTC instants (CO-33).

Pure functions shared by the scheduler duty (``services.workers.scheduler``) and the
``GET /schedules`` route (``services.ingress``): role services never import each other, so the
slot arithmetic lives here. Every slot comes from croniter's zone-aware answer and is compared as a
UTC instant; a wall time repeated by an autumn change counts once (its first instant); a spring
slot inside the skipped hour is croniter's first valid minute after it.
"""

from ._slots import (
    FIRES_AGE,
    ScheduleRef,
    catchup_window,
    claim_key,
    fire_label,
    is_repeat,
    next_slot,
    prev_slot,
    schedules_of,
    slots_between,
    utc_instant,
)

__all__ = [
    "FIRES_AGE",
    "ScheduleRef",
    "catchup_window",
    "claim_key",
    "fire_label",
    "is_repeat",
    "next_slot",
    "prev_slot",
    "schedules_of",
    "slots_between",
    "utc_instant",
]
