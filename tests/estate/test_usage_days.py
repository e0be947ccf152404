"""Usage days (ES-69, AG-47, AG-48) on a real nats-server with in-process data nodes.

A node without an estate copy records turns in its own ``node.db`` (:class:`shared.records.TurnStore`)
and runs a :class:`UsagePublisher` with an injected clock, so the day cut moves without waiting for
midnight; two data nodes apply its days and answer ``usage.query``. The page-read cap and the
parameter refusals are checked on the derivation and the read's argument check directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import nats
import pytest

from shared import estate
from shared.estate.domains.usage import (
    UsagePublisher,
    check_query,
    fold_day,
    turn_usage,
)
from shared.records import TurnStore
from shared.triggers import Trigger
from shared.turns import RoundRecord, ToolExecution, TurnResult, TurnStart
from tests.estate.conftest import Inproc

Start = Callable[..., Awaitable[Inproc]]
ZONE = ZoneInfo("Pacific/Auckland")  # the company clock: UTC+13 in December, so the cut is not UTC's


class Clock:
    """An injected clock: unix seconds, moved by the test."""

    def __init__(self, at: datetime) -> None:
        self.now = at.timestamp()

    def __call__(self) -> float:
        return self.now


async def record_turn(
    store: TurnStore, seat: str, at: float, *, tokens: tuple[int, int], reads: int = 0, n: int = 0
) -> str:
    """Record one finished turn of ``seat`` started at ``at`` with ``tokens`` (in, out) and ``reads``
    page reads (distinct pages), through the recorder protocol a turn uses."""
    turn_id = f"t-{seat}-{int(at)}-{n}"
    start = TurnStart(turn_id, f"wk-{turn_id}", seat, f"agent-{seat}", 1, Trigger(event_id=turn_id), at, "")
    await store.turn_started(start)
    calls = [
        ToolExecution(
            1,
            i + 1,
            f"c{i}",
            "get_page",
            "builtin",
            {"space": "eng", "title": f"p{i}"},
            None,
            {"id": f"page-{i}"},
            "",
            False,
            None,
            None,
            None,
            False,
            at,
            0.01,
        )  # fmt: skip
        for i in range(reads)
    ]
    rnd = RoundRecord(1, "default", "scripted", at, 0.5, input_tokens=tokens[0], output_tokens=tokens[1])
    result = TurnResult(
        start, outcome="delivered", rounds=[rnd], tool_calls=calls, input_tokens=tokens[0],
        output_tokens=tokens[1], provider_keys=["default"], models=["scripted"], ended_at=at + 3,
        duration_seconds=3.0,
    )  # fmt: skip
    await store.turn_finished(result)
    return turn_id


async def query(node: Inproc, **args: Any) -> dict[str, Any]:
    ans = await node.svc.serve(estate.Call(op="usage.query", args=args))
    assert ans.status == "ran" and ans.error is None, ans
    data: dict[str, Any] = ans.result["data"]
    return data


async def wait_total(node: Inproc, want: int, **args: Any) -> dict[str, Any]:
    """Poll ``usage.query`` on ``node`` until its total tokens are ``want`` (the applier is async)."""
    last: dict[str, Any] = {}
    for _ in range(100):
        last = await query(node, **args)
        if last["total"]["total_tokens"] == want:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"{node.node_id}: total {last.get('total')} never reached {want}")


def test_300_page_reads_in_a_seat_day_keep_256_and_count_44_dropped() -> None:
    row = {
        "seat": "lead",
        "outcome": "delivered",
        "started_at": 1.0,
        "ended_at": 2.0,
        "record": {
            "tool_calls": [
                {"name": "get_page", "result": {"id": f"page-{i}"}, "arguments": {}} for i in range(300)
            ]
            + [{"name": "get_page", "is_error": True, "result": None}],  # a failed read is no read
            "rounds": [{"phase": "execute", "provider_key": "k", "model": "m", "input_tokens": 5}],
        },
    }
    (day,) = fold_day("n1", "2026-12-01", [turn_usage(row)])
    value = day.payload()
    assert len(value["page_reads"]) == 256 and value["reads_dropped"] == 44
    assert value["page_reads"][0] == {"page": "page-0", "via": "get_page", "reads": 1}
    assert value["durations"]["1"] == 1 and value["outcomes"] == {"delivered": 1}
    assert value["spend"] == [
        {
            "phase": "execute", "worker": "", "provider": "k", "model": "m", "input_tokens": 5,
            "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0, "rounds": 1,
        }
    ]  # fmt: skip
    assert value["sandbox_runs"] == 0 and value["approvals"] == 0


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"from": "2026-12-02", "to": "2026-12-01"}, "from"),
        ({"from": "2026-01-01", "to": "2026-12-01"}, "to"),  # 335 days > 181
        ({"from": "2026-12-01", "to": "2026-12-01", "group_by": "colour"}, "group_by"),
        ({"from": "yesterday", "to": "2026-12-01"}, "from"),
    ],
)
def test_bad_parameters_are_refused_naming_them(args: dict[str, Any], field: str) -> None:
    with pytest.raises(estate.InvalidField) as refused:
        check_query(args)
    assert refused.value.field == field
    ok = check_query({"from": "2026-06-04", "to": "2026-12-01", "group_by": "model"})  # 181 days: allowed
    assert ok["group_by"] == "model"


async def test_a_nodes_days_reach_every_data_node_and_move_with_the_company_clock(
    inproc: Start, tmp_path: Path, nats_server: Any
) -> None:
    a, b = await inproc("a"), await inproc("b")
    store = TurnStore(tmp_path / "n9" / "node.db", node="n9")
    nc = await nats.connect(nats_server.url, name="n9")
    clock = Clock(datetime(2026, 12, 1, 23, 59, 0, tzinfo=ZONE))
    pub = UsagePublisher(
        nc.jetstream(timeout=5.0), node_id="n9", turns=store.finished_between,
        timezone=lambda: "Pacific/Auckland", clock=clock, tick=3600,
    )  # fmt: skip
    try:
        # two turns before midnight on the company clock (11:59 UTC: the same UTC day either way)
        await record_turn(store, "lead", clock.now - 30, tokens=(100, 20))
        await record_turn(store, "dev", clock.now - 10, tokens=(50, 5), reads=3)
        assert await pub.tick() == 2  # two seat-day objects
        assert pub.last_days == ("2026-11-30", "2026-12-01")
        day = {"from": "2026-12-01", "to": "2026-12-01"}
        for node in (a, b):
            got = await wait_total(node, 175, **day, group_by="seat")
            assert [(g["key"], g["total_tokens"], g["turns"]) for g in got["groups"]] == [
                ("dev", 55, 1),
                ("lead", 120, 1),
            ]
            assert got["nodes"] == ["n9"] and got["total"]["page_reads"] == 3
            assert got["horizon"] == {"first_day": "2026-12-01", "last_day": "2026-12-01"}
        assert await pub.tick() == 0  # nothing changed: nothing published again

        # a turn just before midnight appears after the next tick, on the day it started
        late = clock.now + 59.5  # 23:59:59.5 company time
        clock.now += 61  # 00:00:01 on 2 December
        await record_turn(store, "lead", late, tokens=(7, 3))
        await record_turn(store, "lead", clock.now, tokens=(1, 1), n=1)
        assert await pub.tick() == 2  # yesterday's lead object changed, today's is new
        assert pub.last_days == ("2026-12-01", "2026-12-02")
        got = await wait_total(b, 185, **day)
        assert got["groups"] == [
            {
                "key": "2026-12-01", "input_tokens": 157, "output_tokens": 28, "total_tokens": 185,
                "cache_read_tokens": 0, "cache_write_tokens": 0, "rounds": 3, "turns": 3,
            }
        ]  # fmt: skip
        both = await wait_total(a, 187, **{"from": "2026-12-01", "to": "2026-12-02"}, group_by="day")
        assert [g["key"] for g in both["groups"]] == ["2026-12-01", "2026-12-02"]

        # 181 days on (01:00 company time: New Zealand's winter clock is an hour behind), a day
        # applied makes the first two old: they leave in the transaction that applies it
        clock.now += 181 * 86400 + 7200
        await record_turn(store, "lead", clock.now, tokens=(2, 2), n=2)
        assert await pub.tick() == 1
        window = {"from": "2027-05-01", "to": "2027-06-01"}
        for node in (a, b):
            for _ in range(100):
                got = await query(node, **window)
                if got["horizon"]["last_day"] == "2027-06-01":
                    break
            assert got["horizon"] == {"first_day": "2027-06-01", "last_day": "2027-06-01"}, got["horizon"]
            assert got["total"]["total_tokens"] == 4
        # a data node that joins now replays the compacted log (superseded records gone: gaps) to
        # the same rows, and serves reads without waiting for a floor
        c = await inproc("c")
        assert (await query(c, **window))["horizon"] == {"first_day": "2027-06-01", "last_day": "2027-06-01"}
        da, db, dc = [await n.est.store.digest() for n in (a, b, c)]
        for table in ("usage_days", "usage_spend"):
            assert da["tables"][table] == db["tables"][table] == dc["tables"][table]
    finally:
        await pub.stop(final=False)
        await nc.close()
        store.close()


async def test_an_underivable_day_is_not_published(inproc: Start, tmp_path: Path, nats_server: Any) -> None:
    a = await inproc("a")
    nc = await nats.connect(nats_server.url, name="n8")

    async def broken(start: float, end: float, known: Any) -> list[dict[str, Any]]:
        raise OSError("node.db is unreadable")

    clock = Clock(datetime(2026, 12, 1, 12, 0, tzinfo=ZONE))
    pub = UsagePublisher(
        nc.jetstream(timeout=5.0), node_id="n8", turns=broken, timezone=lambda: "UTC", clock=clock
    )
    try:
        assert await pub.tick() == 0
        got = await query(a, **{"from": "2026-11-01", "to": "2026-12-01"})
        assert got["nodes"] == [] and got["horizon"] == {"first_day": None, "last_day": None}
    finally:
        await pub.stop(final=False)
        await nc.close()


def test_a_scheduled_turn_counts_on_its_seat_and_on_its_schedule() -> None:
    def row(n: int, fire: str) -> dict[str, Any]:
        payload = {"source": "schedule", "schedule": "standup", "scope": "unit:eng", "fire_label": fire}
        return {
            "seat": "dev",
            "outcome": "delivered",
            "started_at": 10.0 + n,
            "ended_at": 400.0 + n,  # 390 s: the 900 s bucket
            "record": {
                "trigger": {"source": "schedule", "payload": payload},
                "rounds": [{"phase": "review", "provider_key": "k", "model": "m", "output_tokens": 4}],
            },
        }

    uses = [turn_usage(row(0, "20261201T0900")), turn_usage(row(1, "20261201T0900"))]
    sched, seat = fold_day("n1", "2026-12-01", uses)  # ordered by id
    assert (seat.kind, sched.kind) == ("seat", "schedule")
    assert sched.payload()["schedule"] == "unit:eng/standup" and sched.payload()["fires"] == 1
    assert seat.payload()["durations"]["900"] == 2 and seat.payload()["fires"] == 1
    assert sched.id.startswith("n1.2026-12-01.schedule-") and seat.id == "n1.2026-12-01.seat-dev"
    assert [s["phase"] for s in sched.payload()["spend"]] == ["review"]
