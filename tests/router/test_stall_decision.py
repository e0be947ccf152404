"""Busy is not stalled (ES-29, issue 17): the decision behind a read's ``stalled`` refusal.

A read is refused ``stalled`` only when the applier is faulted, halted or refusing, or when records
have waited :data:`~shared.estate.log._applier.STALL_AFTER` seconds while the applier made no progress.
Progress is a batch taken in hand, a batch committed, or a fetch that found the copy level; the
time since the last commit alone decides nothing (a copy idle for minutes whose first new record is
being applied was refused ``stalled`` before issue 17).
"""

from __future__ import annotations

import time
from typing import Any, cast

import pytest

from shared.estate.log import STALL_AFTER, Applier


def _applier(applied: int = 100) -> Applier:
    a = Applier(
        domain="tracker",
        js=cast(Any, None),  # the decision reads no broker and no file
        store=cast(Any, None),
        node_id="node-0",
        apply=cast(Any, None),
    )
    a.applied = a.log_last = applied
    return a


def test_a_level_copy_is_never_stalled_however_long_it_idled() -> None:
    a = _applier()
    a.moved_at = time.monotonic() - 10 * STALL_AFTER
    assert a.lag == 0 and not a.stalled()


def test_the_first_record_after_a_long_idle_spell_is_busy_not_stalled() -> None:
    a = _applier()
    a.moved_at = time.monotonic() - 10 * STALL_AFTER  # the last commit, minutes ago
    a._level()  # what every empty fetch of the idle spell does: the copy is level
    a.log_last = 101  # a write landed; its batch is being applied
    assert a.lag == 1 and not a.stalled()


def test_a_busy_applier_with_many_records_waiting_is_not_stalled() -> None:
    a = _applier()
    a.log_last = 100 + 30_000  # a burst: far behind, but a batch was taken just now
    a.moved_at = time.monotonic()
    assert not a.stalled()
    assert not a.stalled(now=a.moved_at + STALL_AFTER - 1)


def test_records_waiting_a_minute_without_progress_is_stalled() -> None:
    a = _applier()
    a.log_last = 105
    a.moved_at = time.monotonic() - STALL_AFTER - 1
    a._level()  # an empty fetch while records wait is no progress
    assert a.stalled()
    assert not a.stalled(now=a.moved_at + STALL_AFTER - 1)


@pytest.mark.parametrize("state", ["faulted", "halted", "refusing"])
def test_a_faulted_halted_or_refusing_copy_is_stalled_even_when_level(state: str) -> None:
    a = _applier()
    a.moved_at = time.monotonic()
    if state == "faulted":
        a.faulted = True
    elif state == "halted":
        a.halted = "undecodable record"
    else:
        a.refusing = "below_floor"
    assert a.lag == 0 and a.stalled()
