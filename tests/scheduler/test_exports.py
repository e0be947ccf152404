"""The schedules seam's and the scheduler's public names are pinned (STYLE: ``__all__`` is tested)."""

from __future__ import annotations

import services.workers.scheduler as scheduler
import shared.schedules as schedules


def test_public_names() -> None:
    assert sorted(schedules.__all__) == sorted(
        [
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
    )
    assert sorted(scheduler.__all__) == sorted(
        [
            "FIRES_AGE",
            "MAX_SKIP_CLAIMS",
            "ON_TIME_SLACK",
            "ON_TIME_TICKS",
            "Fire",
            "Plan",
            "ScheduleRef",
            "Scheduler",
            "Skipped",
            "due_fires",
            "plan_tick",
        ]
    )
    for mod in (schedules, scheduler):
        assert all(hasattr(mod, name) for name in mod.__all__)
