"""Channel rows, the answer and the sweep on a real nats-server KV (CO-36, FL-99, FL-124).

Times are frozen (``now=``): the sweep decides from the instants in the rows, so a test never waits.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared import channels
from shared.bus import BusError
from shared.channels import AskScope

from .conftest import Kit

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def _scope(kit: Kit, **kw: object) -> AskScope:
    return AskScope(coord=kit.coord, bus=kit.bus, work_key="wk-1", trace_headers={}, **kw)  # type: ignore[arg-type]


async def _ask(kit: Kit, brief: str, *, at: datetime, requester: str = "lead", target: str = "dev") -> str:
    channel, created = await channels.ask(
        _scope(kit), requester=requester, target=target, brief=brief, asker_turn_id="turn-a", now=at
    )
    assert created
    return channel.channel_id


async def test_ask_opens_a_row_and_wakes_the_target_once(kit: Kit) -> None:
    scope = _scope(
        kit, delegation_depth=1, delegation_chain=("triage",), work_item={"key": "SUP-4", "id": "i4"}
    )
    channel, created = await channels.ask(
        scope,
        requester="lead",
        target="dev",
        brief="Which branch has the fix?",
        asker_turn_id="turn-a",
        work_item={"key": "SUP-4", "id": "i4", "project": "SUP"},
        now=T0,
    )
    assert created
    row = await channels.get_channel(kit.coord, channel.channel_id)
    assert row is not None
    assert (row.requester, row.target, row.status, row.message_count) == ("lead", "dev", "open", 1)
    assert (row.opened_at, row.closed_at, row.asker_turn_id) == (
        "2026-11-30T09:00:00.000000Z",
        None,
        "turn-a",
    )
    assert row.asker_work_item == {"key": "SUP-4", "id": "i4", "project": "SUP"}
    assert (row.delegation_depth, row.delegation_chain) == (2, ("triage", "lead"))

    # the same turn (or its redelivery: same work_key) asking the same thing again: one row, one wake
    again, created = await channels.ask(
        scope,
        requester="lead",
        target="dev",
        brief="Which branch has the fix?",
        asker_turn_id="turn-a",
        now=T0,
    )
    assert not created and again.channel_id == channel.channel_id
    [(env, headers)] = await kit.inbox("dev")
    assert headers["Nats-Msg-Id"] == f"a2a:{channel.channel_id}:request"
    assert (env.type, env.source, env.delegation_depth, env.delegation_chain) == (
        "a2a_request",
        "a2a",
        2,
        ["triage", "lead"],
    )
    assert env.parent_turn_id == "turn-a"
    p = env.payload
    assert (p["reply_mode"], p["channel_id"], p["sender"], p["brief"]) == (
        "engine",
        channel.channel_id,
        "lead",
        "Which branch has the fix?",
    )
    assert "Which branch has the fix?" in p["text"] and p["delegation_chain"] == ["triage", "lead"]
    assert p["asked_by"] == {
        "seat": "lead",
        "turn_id": "turn-a",
        "work_item": {"key": "SUP-4", "id": "i4", "project": "SUP"},
    }


async def test_answer_closes_and_wakes_the_asker_once(kit: Kit) -> None:
    cid = await _ask(kit, "Ping?", at=T0)
    closed = await channels.answer(
        kit.coord,
        kit.bus,
        cid,
        reply="Pong.",
        answered=True,
        answer_turn_id="turn-b",
        outcome="delivered",
        now=T0 + timedelta(minutes=3),
    )
    assert closed is not None
    assert (closed.status, closed.close_reason, closed.message_count, closed.reply) == (
        "closed",
        "answered",
        2,
        "Pong.",
    )
    assert closed.closed_at == "2026-11-30T09:03:00.000000Z"
    [(env, headers)] = await kit.inbox("lead")
    assert headers["Nats-Msg-Id"] == f"a2a:{cid}:answer"
    # one hop deeper than the ask (the request's depth): ask-on-every-answer loops reach the cap
    assert (env.type, env.delegation_depth, env.parent_turn_id) == ("a2a_message", 1, "turn-b")
    assert env.payload["answer"] == "Pong." and env.payload["reply_mode"] == "none"
    assert "Ping?" in env.payload["text"] and "Pong." in env.payload["text"]

    # a second answer (a redelivered answering turn) finds it closed: nothing more is published
    assert (
        await channels.answer(
            kit.coord,
            kit.bus,
            cid,
            reply="Pong again.",
            answered=True,
            answer_turn_id="turn-c",
            outcome="delivered",
        )
        is None
    )
    assert len(await kit.inbox("lead")) == 1
    row = await channels.get_channel(kit.coord, cid)
    assert row is not None and row.reply == "Pong." and row.answer_turn_id == "turn-b"


async def test_sweep_closes_idle_and_deletes_old_closed(kit: Kit) -> None:
    now = T0 + timedelta(days=10)
    idle = await _ask(kit, "idle for two hours", at=now - timedelta(hours=2))
    fresh = await _ask(kit, "asked ten minutes ago", at=now - timedelta(minutes=10))
    old = await _ask(kit, "answered nine days ago", at=now - timedelta(days=9, hours=1))
    await channels.answer(
        kit.coord, kit.bus, old, reply="done", answered=True, answer_turn_id="t", outcome="delivered",
        now=now - timedelta(days=9),
    )  # fmt: skip
    recent = await _ask(kit, "answered yesterday", at=now - timedelta(days=1, hours=1))
    await channels.answer(
        kit.coord, kit.bus, recent, reply="done", answered=True, answer_turn_id="t", outcome="delivered",
        now=now - timedelta(days=1),
    )  # fmt: skip

    report = await channels.sweep_channels(kit.coord, now=now)
    assert (report.closed, report.deleted, report.skipped) == ([idle], [old], [])
    rows = {c.channel_id: c for c in await channels.list_channels(kit.coord)}
    assert set(rows) == {idle, fresh, recent}
    assert (rows[idle].status, rows[idle].close_reason, rows[idle].message_count) == ("closed", "idle", 1)
    assert rows[idle].closed_at == channels.rfc3339(now)
    assert rows[fresh].status == "open" and rows[recent].close_reason == "answered"

    # one tick later nothing changes; 7 days after the idle close its row goes too
    again = await channels.sweep_channels(kit.coord, now=now + timedelta(minutes=1))
    assert (again.closed, again.deleted) == ([], [])
    later = await channels.sweep_channels(kit.coord, now=now + timedelta(days=7, seconds=1))
    assert sorted(later.deleted) == sorted([idle, recent]) and later.closed == [fresh]
    assert [c.channel_id for c in await channels.list_channels(kit.coord)] == [fresh]


async def test_an_answer_after_the_idle_close_is_dropped(kit: Kit) -> None:
    cid = await _ask(kit, "slow one", at=T0)
    report = await channels.sweep_channels(kit.coord, now=T0 + timedelta(hours=1, seconds=1))
    assert report.closed == [cid]
    late = await channels.answer(
        kit.coord, kit.bus, cid, reply="sorry, late", answered=True, answer_turn_id="t", outcome="delivered"
    )
    assert late is None and await kit.inbox("lead") == []


async def test_sweep_leaves_a_channel_touched_since_it_read_it(kit: Kit) -> None:
    cid = await _ask(kit, "race", at=T0)
    # the sweep's guard: only closed when the activity it read is still the newest
    assert (
        await channels.close_channel(
            kit.coord,
            cid,
            reason="idle",
            now=T0 + timedelta(hours=2),
            if_idle_since=T0 - timedelta(seconds=1),
        )
        is None
    )
    row = await channels.get_channel(kit.coord, cid)
    assert row is not None and row.status == "open"


async def test_unreadable_rows_are_skipped_not_fatal(kit: Kit) -> None:
    await kit.coord.put("channels", "ch_garbage", b"not json")
    cid = await _ask(kit, "fine", at=T0)
    report = await channels.sweep_channels(kit.coord, now=T0 + timedelta(hours=2))
    assert report.closed == [cid]
    assert await kit.coord.get("channels", "ch_garbage") is not None


async def test_a_failed_publish_closes_the_channel(kit: Kit) -> None:
    await kit.nc.jetstream().delete_stream("CREWLET_AGENT")  # the broker refuses the inbox publish
    with pytest.raises(BusError):
        await channels.ask(
            _scope(kit), requester="lead", target="dev", brief="anyone?", asker_turn_id="t", now=T0
        )
    [row] = await channels.list_channels(kit.coord)
    assert (row.status, row.close_reason, row.outcome) == ("closed", "failed", "unsent")
