"""The memory domain on real data nodes (AG-1, AG-2, AG-7): first writer wins, compare-and-set,
tombstones, the outbox and a satellite's scratch replay, on a real nats-server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nats
import pytest

from shared import estate
from shared.estate import InvalidField, Refused, TooLarge
from shared.estate.log import StateLog
from shared.memory import MemoryWriter, Outbox, diary_id, hydrate_on_data_node, hydrate_scratch
from shared.telemetry import TurnMetrics

from .conftest import Inproc

pytestmark = pytest.mark.asyncio


def writer(node: Inproc, tmp: Path, **kw: Any) -> MemoryWriter:
    return MemoryWriter(
        StateLog(node.nc.jetstream(timeout=5.0)),
        node_id=node.node_id,
        outbox=Outbox(tmp / f"{node.node_id}-outbox.db"),
        **kw,
    )


async def rows(node: Inproc, handle: str, floor: int = 0, **args: Any) -> list[dict[str, Any]]:
    """The copy's rows of ``handle`` once its memory applier is through ``floor``."""
    for _ in range(200):
        if node.est.appliers["memory"].applied >= floor:
            break
        await asyncio.sleep(0.05)
    ans = await node.svc.serve(estate.Call(op="memory.rows", args={"handle": handle, **args}))
    assert ans.status == "ran" and ans.error is None, ans
    return list(ans.result["data"]["rows"])


def diary(content: str) -> tuple[tuple[str, ...], dict[str, Any]]:
    row_id = diary_id("agent-lead", content)
    return (row_id,), {"id": row_id, "kind": "diary_long", "content": content, "retrieval_count": 0}


async def test_three_entries_reach_every_copy_and_a_twin_collapses(inproc: Any, tmp_path: Path) -> None:
    a, b = await inproc("mem-a"), await inproc("mem-b")
    metrics = TurnMetrics()
    wa, wb = writer(a, tmp_path), writer(b, tmp_path, metrics=metrics)
    floor = 0
    for text in ("Ana prefers terse answers.", "Deploys need Bo's sign-off.", "SUP-2 is blocked on legal."):
        key, row = diary(text)
        w = await wa.create("lead", "agent_diary", key, row)
        assert w.status == "written" and w.seq > 0
        floor = max(floor, w.seq)
    assert wa.floor("lead") == floor
    on_a, on_b = await rows(a, "lead", floor), await rows(b, "lead", floor)
    assert len(on_a) == 3
    assert [(r["content"], r["_seq"]) for r in on_a] == [(r["content"], r["_seq"]) for r in on_b]
    # B republishes a byte-identical entry: the broker refuses it, counted as a collapse
    key, row = diary("Deploys need Bo's sign-off.")
    twin = await wb.create("lead", "agent_diary", key, row)
    assert twin.status == "collapsed"
    assert metrics.memory_collapsed.labels("agent_diary")._value.get() == 1
    # a reworded twin is kept (FL-75)
    key2, row2 = diary("Deploys need Bo's sign-off!")
    assert (await wb.create("lead", "agent_diary", key2, row2)).status == "written"
    # a tombstone removes it everywhere
    gone = await wa.delete("lead", "agent_diary", key)
    assert gone.status == "written"
    left_a = await rows(a, "lead", gone.seq)
    left_b = await rows(b, "lead", gone.seq)
    assert sorted(r["content"] for r in left_a) == sorted(r["content"] for r in left_b)
    assert "Deploys need Bo's sign-off." not in [r["content"] for r in left_a] and len(left_a) == 3


async def test_compare_and_set_counts_every_concurrent_update(inproc: Any, tmp_path: Path) -> None:
    a, b = await inproc("cas-a"), await inproc("cas-b")
    wa, wb = writer(a, tmp_path), writer(b, tmp_path)
    natural = ("lead", "ana", "", "")

    def bump(row: dict[str, Any] | None) -> dict[str, Any]:
        row = row or {"subject_handle": "ana", "interaction_count": 0}
        return {**row, "interaction_count": int(row["interaction_count"]) + 1}

    results = await asyncio.gather(
        *(w.update("lead", "counterparty_profiles", natural, bump) for w in (wa, wb) * 5)
    )
    assert all(r.status == "written" for r in results), results
    top = max(r.seq for r in results)
    for node in (a, b):
        (profile,) = await rows(node, "lead", top, tables=["counterparty_profiles"])
        assert profile["interaction_count"] == 10
    # nothing to change: no record
    same = await wa.update("lead", "counterparty_profiles", natural, lambda r: r)
    assert same.status == "unchanged"


async def test_refusals_name_the_field(inproc: Any, tmp_path: Path) -> None:
    a = await inproc("ref-a")
    w = writer(a, tmp_path, is_agent=lambda h: h != "founder")
    key, row = diary("x" * 70_000)
    with pytest.raises(TooLarge) as big:
        await w.create("lead", "agent_diary", key, row)
    assert big.value.field == "memory_record"
    with pytest.raises(Refused) as human:
        await w.create("founder", "agent_diary", *diary("hello"))
    assert human.value.refusal == "human_seat"
    with pytest.raises(InvalidField) as table:
        await w.create("lead", "diaries", *diary("hello"))
    assert table.value.field == "table"
    with pytest.raises(InvalidField) as handle:
        await w.create("lead.x", "agent_diary", *diary("hello"))
    assert handle.value.field == "handle"


async def test_outbox_keeps_a_write_the_broker_did_not_take(
    inproc: Any, tmp_path: Path, nats_server: Any
) -> None:
    a = await inproc("box-a")
    dead = await nats.connect(nats_server.url, name="dead")
    await dead.close()
    box = tmp_path / "shared-outbox.db"
    offline = MemoryWriter(StateLog(dead.jetstream(timeout=1.0)), node_id="box-a", outbox=Outbox(box))
    key, row = diary("Written while the broker was away.")
    w = await offline.create("lead", "agent_diary", key, row)
    assert w.status == "deferred" and offline.outbox.depth() == 1
    # the node comes back (a new connection, the same outbox file): the flush publishes it
    back = MemoryWriter(StateLog(a.nc.jetstream(timeout=5.0)), node_id="box-a", outbox=Outbox(box))
    assert await back.flush() == 1 and back.outbox.depth() == 0
    found = await rows(a, "lead", back.floor("lead"))
    assert [r["content"] for r in found] == ["Written while the broker was away."]


async def test_scratch_replay_holds_what_a_data_copy_holds(inproc: Any, tmp_path: Path) -> None:
    a = await inproc("sat-a")
    w = writer(a, tmp_path)
    for i in range(5):
        await w.create("lead", "agent_diary", *diary(f"fact {i}"))
    await w.create("other", "agent_diary", *diary("not lead's"))
    gone = await w.delete("lead", "agent_diary", diary("fact 0")[0])
    js = a.nc.jetstream(timeout=5.0)
    cache = await hydrate_scratch(js, "lead")
    on_copy = await rows(a, "lead", gone.seq)
    assert sorted(r["content"] for r in cache.rows()) == sorted(r["content"] for r in on_copy)
    assert len(cache) == 4
    assert len(await hydrate_scratch(js, "nobody")) == 0  # a seat with no memory hydrates at once
    log = StateLog(js)
    target = await hydrate_on_data_node(lambda: _last(log), lambda: a.est.appliers["memory"].applied)
    assert target >= gone.seq
    assert json.loads(json.dumps(cache.rows()[0]))["kind"] == "diary_long"


async def _last(log: StateLog) -> int:
    return (await log.head("memory"))[1]


async def test_a_following_scratch_cache_sees_rows_other_nodes_write_later(
    inproc: Any, tmp_path: Path
) -> None:
    a, b = await inproc("fol-a"), await inproc("fol-b")
    await writer(a, tmp_path).create("lead", "agent_diary", *diary("before the seat moved"))
    cache = await hydrate_scratch(a.nc.jetstream(timeout=5.0), "lead", follow=True)
    assert cache.following and len(cache) == 1
    # another node (the reflect dispatcher's, say) writes an episode after the satellite took the seat
    other = writer(b, tmp_path)
    w = await other.create(
        "lead", "episodes", ("lead", "SUP-9"), {"agent_handle": "lead", "work_key": "SUP-9"}
    )
    for _ in range(100):
        if len(cache) == 2:
            break
        await asyncio.sleep(0.05)
    assert [r["_seq"] for r in cache.rows(["episodes"])] == [w.seq]
    await cache.close()
    assert not cache.following
    await other.create("lead", "agent_diary", *diary("after release"))
    await asyncio.sleep(0.5)
    assert len(cache) == 2  # released: the cache follows no more


async def test_a_release_publishes_what_waits_in_the_outbox_before_the_lease_goes(
    inproc: Any, tmp_path: Path, nats_server: Any
) -> None:
    """AG-2: the seats role's release hook (run before the lease is deleted) flushes the outbox."""
    from types import SimpleNamespace

    from services.seats.memory import SeatMemory

    a = await inproc("rel-a")
    dead = await nats.connect(nats_server.url, name="dead")
    await dead.close()
    box = Outbox(tmp_path / "rel-outbox.db")
    during = MemoryWriter(StateLog(dead.jetstream(timeout=1.0)), node_id="rel-a", outbox=box)
    assert (
        await during.create("lead", "episodes", ("lead", "SUP-4"), {"work_key": "SUP-4"})
    ).status == "deferred"
    # the broker is back by the time the seat is released: the same outbox, a live connection
    live = MemoryWriter(StateLog(a.nc.jetstream(timeout=5.0)), node_id="rel-a", outbox=box)
    seats = SeatMemory(SimpleNamespace(extras={"memory": live}, cfg=SimpleNamespace(roles=["seats"])))  # type: ignore[arg-type]
    await seats.release("lead")
    assert box.depth() == 0
    head = await StateLog(a.nc.jetstream(timeout=5.0)).head("memory")
    found = await rows(a, "lead", head[1], tables=["episodes"])
    assert [r["work_key"] for r in found] == ["SUP-4"]
