"""The scheduler on a real nats-server KV, on a frozen clock (CO-33, FL-97, FL-125).

Each test passes ``now=`` to :meth:`Scheduler.tick`; the claims live in the real ``fires`` bucket.
A broker outage is the shipped :class:`FaultyCoordination` (every call answers "unknown") swapped in
for the ticks it lasts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from services.workers.scheduler import Fire, Scheduler
from shared.coordination import (
    Coordination,
    Entry,
    FaultyCoordination,
    OutcomeUnknown,
    Slot,
)

from .conftest import Inbox, Kv, company_data, every, org_of

PULSE = [{"name": "pulse", "cron": "*/5 * * * *", "task": "check the queue"}]
T0 = datetime(2026, 11, 30, 9, 0, 5, tzinfo=UTC)


def _events(logs: Sequence[Mapping[str, Any]], name: str) -> list[Mapping[str, Any]]:
    return [e for e in logs if e["event"] == name]


async def test_three_hour_outage_while_up_fires_once_and_records_the_skipped(kv: Kv) -> None:
    org = org_of(company_data(PULSE))
    inbox = Inbox()
    sched = kv.scheduler(inbox)
    assert [f.label for f in await sched.tick(org, now=T0)] == ["20261130T0900"]
    # the broker goes away for three hours; the node stays up and keeps ticking
    sched.coord = FaultyCoordination()
    with structlog.testing.capture_logs() as logs:
        for now in every(T0 + timedelta(minutes=5), T0 + timedelta(hours=3), 600.0):
            assert await sched.tick(org, now=now) == []
    assert sched.last_evaluated == T0  # the window stayed open
    assert _events(logs, "schedule_claim_unknown")
    sched.coord = kv.coord
    back = datetime(2026, 11, 30, 12, 1, 0, tzinfo=UTC)
    with structlog.testing.capture_logs() as logs:
        fired = await sched.tick(org, now=back)
    assert [(f.label, f.catchup) for f in fired] == [("20261130T1200", True)]
    skipped = _events(logs, "skipped_catchup")
    assert [(e["schedule"], e["seat"], e["count"], e["fire_label"], e["oldest_label"]) for e in skipped] == [
        ("pulse", "ops", 35, "20261130T1155", "20261130T0905")
    ]
    assert [e["fire_label"] for e in _events(logs, "scheduled_task_fired")] == ["20261130T1200"]
    states = list((await kv.claims()).values())
    assert states.count("fired") == 2 and states.count("skipped") == 35
    # back to regular ticks: the next slot fires on time, nothing is caught up again
    nxt: list[Fire] = []
    for now in every(back + timedelta(seconds=10), datetime(2026, 11, 30, 12, 5, 5, tzinfo=UTC)):
        nxt += await sched.tick(org, now=now)
    assert [(f.label, f.catchup) for f in nxt] == [("20261130T1205", False)]
    assert inbox.labels() == ["20261130T0900", "20261130T1200", "20261130T1205"]


async def test_every_tick_after_a_gap_catches_up_not_only_the_first(kv: Kv) -> None:
    org = org_of(company_data(PULSE))
    inbox = Inbox()
    sched = kv.scheduler(inbox)
    now = T0
    await sched.tick(org, now=now)
    for gap in (timedelta(hours=1), timedelta(minutes=40), timedelta(hours=2)):  # stalled loop, lost duty...
        now += gap
        assert len(await sched.tick(org, now=now)) == 1
    assert inbox.labels() == ["20261130T0900", "20261130T1000", "20261130T1040", "20261130T1240"]


async def test_a_missed_slot_older_than_the_window_is_skipped_not_fired(kv: Kv) -> None:
    org = org_of(company_data([{"name": "daily", "cron": "0 9 * * *", "task": "t"}]))
    inbox = Inbox()
    sched = kv.scheduler(inbox)
    await sched.tick(org, now=datetime(2026, 11, 30, 8, 59, 55, tzinfo=UTC))
    with structlog.testing.capture_logs() as logs:
        # back at 11:30: 2.5 h late, the window is half a day clamped to 2 h
        assert await sched.tick(org, now=datetime(2026, 11, 30, 11, 30, tzinfo=UTC)) == []
    assert [(e["reason"], e["count"]) for e in _events(logs, "skipped_catchup")] == [("outside_window", 1)]
    # back at 10:30 instead (a fresh scheduler, same store): 1.5 h late, caught up
    other = Scheduler(kv.coord, Inbox())
    day2 = await other.tick(org, now=datetime(2026, 12, 1, 10, 30, tzinfo=UTC))
    assert [f.label for f in day2] == ["20261201T0900"]


async def test_catchup_off_after_a_gap_skips_the_missed_slot(kv: Kv) -> None:
    org = org_of(company_data([{"name": "p", "cron": "*/5 * * * *", "task": "t", "catchup": False}]))
    inbox = Inbox()
    sched = kv.scheduler(inbox)
    await sched.tick(org, now=T0)  # 5 s late: on time, fires
    assert await sched.tick(org, now=T0 + timedelta(minutes=7)) == []  # 09:05 missed by 2 min
    assert await sched.tick(org, now=T0 + timedelta(minutes=10, seconds=3)) != []  # 09:10 on time
    assert inbox.labels() == ["20261130T0900", "20261130T0910"]


async def test_a_restart_fires_the_catchup_once_and_a_second_restart_does_not(kv: Kv) -> None:
    org = org_of(company_data(PULSE))
    first = Inbox()
    await kv.scheduler(first).tick(org, now=T0)
    # the node dies after 09:00 and comes back at 09:06:10: a new Scheduler, same store
    second = Inbox()
    await kv.scheduler(second).tick(org, now=datetime(2026, 11, 30, 9, 6, 10, tzinfo=UTC))
    assert second.labels() == ["20261130T0905"]
    # restarted again at 09:06:40: 09:05 was fired already, nothing goes out, nothing is "skipped"
    third = Inbox()
    with structlog.testing.capture_logs() as logs:
        await kv.scheduler(third).tick(org, now=datetime(2026, 11, 30, 9, 6, 40, tzinfo=UTC))
    assert third.fires == [] and _events(logs, "skipped_catchup") == []
    assert list((await kv.claims()).values()).count("fired") == 2


async def test_moving_the_duty_mid_window_fires_nothing_twice(kv: Kv, kv2: Kv) -> None:
    org = org_of(
        company_data(
            PULSE,
            unit_schedules=[{"name": "standup", "cron": "*/10 * * * *", "task": "sync"}],
        )
    )
    inbox = Inbox()  # every seat's inbox, whichever node publishes
    a, b = kv.scheduler(inbox), kv2.scheduler(inbox)
    start = datetime(2026, 11, 30, 9, 0, 1, tzinfo=UTC)
    ticks = every(start, start + timedelta(hours=1), 10.0)
    for i, now in enumerate(ticks):
        if i < 200:
            await a.tick(org, now=now)  # A holds the duty
        if 150 <= i < 260 or i >= 320:
            await b.tick(org, now=now + timedelta(seconds=3))  # B overlaps, then loses it, then wins it back
        if 260 <= i < 320:
            await a.tick(org, now=now)  # A regains it meanwhile
    sent = [(h, f.name, f.label) for h, f in inbox.fires]
    assert len(sent) == len(set(sent)), sent
    # every slot of the hour went out exactly once per target
    assert sorted(lbl for h, n, lbl in sent if n == "pulse") == [
        f"20261130T{9 + m // 60:02d}{m % 60:02d}" for m in range(0, 61, 5)
    ]
    assert len([1 for h, n, _ in sent if n == "standup"]) == 7 * 2  # lead and dev, 09:00..10:00


async def test_a_failed_publish_gives_the_slot_back_and_the_next_tick_fires_it(kv: Kv) -> None:
    org = org_of(company_data(PULSE))
    inbox = Inbox(fail=1)
    sched = kv.scheduler(inbox)
    with structlog.testing.capture_logs() as logs:
        assert await sched.tick(org, now=T0) == []
    assert _events(logs, "scheduled_fire_failed") and await kv.claims() == {}
    assert sched.last_evaluated is None  # the window stays open
    fired = await sched.tick(org, now=T0 + timedelta(seconds=10))
    assert [f.label for f in fired] == ["20261130T0900"] and inbox.labels() == ["20261130T0900"]


async def test_the_fire_payload_carries_the_timeout(kv: Kv) -> None:
    org = org_of(company_data([{"name": "p", "cron": "*/5 * * * *", "task": "t", "timeout_seconds": 42}]))
    inbox = Inbox()
    await kv.scheduler(inbox).tick(org, now=T0)
    ((handle, fire),) = inbox.fires
    assert (
        handle == "ops" and fire.timeout_seconds == 42 and fire.at == datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    )


class LostAnswer(Coordination):
    """The real store, except that the first claim lands but its answer is lost (OutcomeUnknown)."""

    kind = "lost-answer"

    def __init__(self, real: Coordination) -> None:
        self.real, self.lost = real, False

    async def get(self, slot: Slot, key: str) -> Entry | None:
        return await self.real.get(slot, key)

    async def create(self, slot: Slot, key: str, value: bytes) -> int:
        revision = await self.real.create(slot, key, value)
        if not self.lost:
            self.lost = True
            raise OutcomeUnknown("answer lost")
        return revision

    async def update(self, slot: Slot, key: str, value: bytes, *, revision: int) -> int:
        return await self.real.update(slot, key, value, revision=revision)

    async def put(self, slot: Slot, key: str, value: bytes) -> int:
        return await self.real.put(slot, key, value)

    async def delete(self, slot: Slot, key: str, *, revision: int | None = None) -> bool:
        return await self.real.delete(slot, key, revision=revision)

    async def entries(self, slot: Slot, prefix: str = "") -> list[Entry]:
        return await self.real.entries(slot, prefix)

    async def close(self) -> None:
        return None


async def test_a_claim_whose_answer_was_lost_is_recognised_as_ours_next_tick(kv: Kv, kv2: Kv) -> None:
    org = org_of(company_data(PULSE))
    inbox = Inbox()
    sched = Scheduler(LostAnswer(kv.coord), inbox)
    assert await sched.tick(org, now=T0) == []  # the claim landed, the answer did not: nothing published
    assert sched.last_evaluated is None
    # a peer holding the duty meanwhile cannot fire the slot: the claim is there
    assert await kv2.scheduler(Inbox()).tick(org, now=T0 + timedelta(seconds=5)) == []
    fired = await sched.tick(org, now=T0 + timedelta(seconds=10))
    assert [f.label for f in fired] == ["20261130T0900"] and inbox.labels() == ["20261130T0900"]
    # a second scheduler that never wrote it does not publish it
    assert await Scheduler(kv.coord, Inbox()).tick(org, now=T0 + timedelta(seconds=20)) == []
