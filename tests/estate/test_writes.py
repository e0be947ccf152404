"""The log, the ledger, arbitration and the applier on a real nats-server (ES-7..ES-11, ES-16, ES-17, ES-20).

Data nodes here run in-process (each with its own connection and estate file) so faults can be
injected precisely; the end-to-end checks with node processes are in ``test_node.py``/``test_fleet.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import nats
from structlog.testing import capture_logs

from shared import estate
from shared.estate import Call
from shared.estate.log import AppendUnanswered

from .conftest import Inproc, seed, stop_inproc

Start = Callable[..., Awaitable[Inproc]]


async def _stream_msgs(node: Inproc, subject: str) -> int:
    info = await node.nc.jetstream().stream_info("CREWLET_TRACKER_LOG", subjects_filter=subject)
    return int((info.state.subjects or {}).get(subject, 0))


async def _create(node: Inproc, title: str, *, op_id: str = "", project: str = "ENG") -> estate.Answer:
    return await node.svc.serve(
        Call(op="work.create", args={"project": project, "title": title}, op_id=op_id)
    )


async def test_a_retried_write_lands_once_and_reused_ids_are_refused(inproc: Start) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    op = estate.mint_op_id("create-ENG")
    first = await _create(a, "Fix the lantern", op_id=op)
    again = await _create(a, "Fix the lantern", op_id=op)
    assert first.status == again.status == "ran" and first.result["outcome"] == "applied"
    assert again.result["position"] == first.result["position"]
    assert again.result["object"]["key"] == first.result["object"]["key"] == "ENG-1"
    subject = estate.object_subject("tracker", "task", first.result["object"]["id"])
    assert await _stream_msgs(a, subject) == 1
    listed = await a.svc.serve(Call(op="work.list", args={"project": "ENG"}))
    assert [i["key"] for i in listed.result["data"]["items"]] == ["ENG-1"]
    # The same id for another object is op_reused, naming where it landed (ES-7).
    other = await _create(a, "Another")
    upd = await a.svc.serve(
        Call(op="work.update", args={"key": other.result["object"]["key"], "status": "done"}, op_id=op)
    )
    assert upd.error is not None and upd.error["code"] == "op_reused"
    assert upd.error["position"] == first.result["position_token"]


async def test_a_lone_surrogate_in_a_write_is_refused_naming_the_field(inproc: Start) -> None:
    """Issue 17: text no UTF-8 writer can encode (a model's tool call may carry ``"\\ud800"``) is
    refused ``invalid`` naming the field, nothing is published, and the same op id with good text
    then lands: never an "unknown outcome" repeated forever."""
    a = await inproc("a")
    await seed(a, "ENG")
    op = estate.mint_op_id("create-ENG")
    for _ in range(2):
        bad = await _create(a, "Fix the \ud800 lantern", op_id=op)
        assert bad.error is not None and bad.error["code"] == "invalid", bad
        assert bad.error["field"] == "title" and "surrogate" in bad.error["detail"], bad.error
    good = await _create(a, "Fix the lantern", op_id=op)
    assert good.status == "ran" and good.result["outcome"] == "applied"
    listed = await a.svc.serve(Call(op="work.list", args={"project": "ENG"}))
    assert [i["title"] for i in listed.result["data"]["items"]] == ["Fix the lantern"]


async def test_a_repeat_past_the_broker_window_folds_in_the_applier(inproc: Start) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    op = estate.mint_op_id("create-ENG")
    ans = await _create(a, "Once", op_id=op)
    rec = estate.Record(
        kind="task_create",
        domain="tracker",
        op_id=op,
        writer="a",
        generation=1,
        at=1,
        subject=estate.object_subject("tracker", "task", "other"),
        payload={"id": "other", "project_id": "x", "title": "twice"},
    )
    js = a.nc.jetstream()
    ack = await js.publish(rec.subject, rec.encode(), headers={"Nats-Msg-Id": op + "-beyond-window"})
    assert await a.est.appliers["tracker"].wait_applied(ack.seq, 30)
    listed = await a.svc.serve(Call(op="work.list", args={}))
    assert [i["key"] for i in listed.result["data"]["items"]] == [ans.result["object"]["key"]]


async def test_concurrent_if_match_updates_one_wins_one_conflicts(inproc: Start) -> None:
    a = await inproc("a")
    b = await inproc("b")
    await seed(a, "ENG")
    created = await _create(a, "Contended")
    assert await b.est.appliers["tracker"].wait_applied(created.result["position"]["seq"], 30)
    calls = [
        n.svc.serve(Call(op="work.update", args={"key": "ENG-1", "if_match": 1, "title": f"by {n.node_id}"}))
        for n in (a, b)
    ]
    results = await asyncio.gather(*calls)
    won = [r for r in results if r.error is None]
    lost = [r for r in results if r.error is not None]
    assert len(won) == 1 and len(lost) == 1, results
    err = lost[0].error
    assert err is not None and err["code"] == "conflict" and err["current_version"] == 2
    # Without if_match both land, one after the other: neither is lost (ES-10).
    results = await asyncio.gather(
        *(
            n.svc.serve(Call(op="work.update", args={"key": "ENG-1", "priority": p}))
            for n, p in ((a, "high"), (b, "urgent"))
        )
    )
    assert all(r.error is None and r.status == "ran" for r in results), results
    final = await a.svc.serve(Call(op="work.get", args={"key": "ENG-1"}, read_level="linearizable"))
    assert final.result["data"]["version"] == 4
    kinds = [h["fields"] for h in final.result["data"]["history"] if h["kind"] == "updated"]
    assert len(kinds) == 3


async def test_a_lost_acknowledgement_is_resolved_to_applied(inproc: Start) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    real = a.svc.log.append
    dropped: list[int] = []

    async def drop_ack(record: estate.Record, *, expect: int | None) -> tuple[int, bool]:
        seq, dup = await real(record, expect=expect)
        if not dropped:
            dropped.append(seq)
            raise AppendUnanswered("test: the PubAck was dropped")
        return seq, dup

    a.svc.log.append = drop_ack  # type: ignore[method-assign]
    with capture_logs() as logs:
        ans = await _create(a, "Acked or not")
    assert dropped and ans.status == "ran" and ans.result["outcome"] == "applied"
    assert ans.result["position"]["seq"] == dropped[0]
    assert not [e for e in logs if e["event"] == "statelog_publish_unknown"]


async def test_a_stalled_applier_answers_pending_with_a_position(inproc: Start) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    a.est.appliers["tracker"].pause()
    await asyncio.sleep(1.2)  # let the fetch in hand finish
    ans = await _create(a, "Later")
    assert ans.result["outcome"] == "pending" and ans.result["position"]["seq"] > 0 and "lag" in ans.result
    a.est.appliers["tracker"].resume()
    assert await a.est.appliers["tracker"].wait_applied(ans.result["position"]["seq"], 30)
    got = await a.svc.serve(Call(op="work.get", args={"key": "ENG-1"}))
    assert got.result["data"]["title"] == "Later"


async def test_floors_make_a_lagging_copy_answer_behind(inproc: Start) -> None:
    a = await inproc("a")
    b = await inproc("b", floor_wait=0.3)
    await seed(a, "ENG")
    b.est.appliers["tracker"].pause()
    await asyncio.sleep(1.2)
    w = await _create(a, "Read me")
    floors = {"CREWLET_TRACKER_LOG": w.result["position"]["seq"]}
    behind = await b.svc.serve(Call(op="work.list", args={"project": "ENG"}, floors=floors, take_anyway=True))
    assert behind.status == "ran_nothing" and behind.reason == "behind"
    by_pos = await b.svc.serve(
        Call(op="work.get", args={"key": "ENG-1"}, take_anyway=True, min_position=w.result["position_token"])
    )
    assert by_pos.status == "ran_nothing" and by_pos.reason == "behind"
    b.est.appliers["tracker"].resume()
    served = await b.svc.serve(Call(op="work.list", args={"project": "ENG"}, floors=floors))
    assert served.status == "ran" and [i["title"] for i in served.result["data"]["items"]] == ["Read me"]


async def test_read_levels_and_refusals(inproc: Start) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    bare = await a.svc.serve(Call(op="work.list", args={}, read_level="session"))
    assert bare.error is not None and bare.error["field"] == "read_level"
    wrong = await a.svc.serve(Call(op="work.list", args={}, min_position="CREWLET_PAGES_LOG@1:1"))
    assert wrong.error is not None and wrong.error["code"] == "wrong_stream"
    # a position no write produced is refused naming it, at once: never "behind" with a Retry-After forever
    for far in ("CREWLET_TRACKER_LOG@1:100000", f"CREWLET_TRACKER_LOG@1:{2**63}"):
        past = await a.svc.serve(Call(op="work.list", args={}, min_position=far))
        assert past.error is not None and past.error["code"] == "invalid", past
        assert past.error["field"] == "min_position" and "past the end" in past.error["detail"]
    floors = await a.svc.serve(Call(op="work.list", args={}, floors={"CREWLET_TRACKER_LOG": 100000}))
    assert floors.error is not None and floors.error["field"] == "floors", floors
    lin = await a.svc.serve(Call(op="work.list", args={}, read_level="linearizable"))
    assert lin.status == "ran" and lin.result["meta"]["level"] == "linearizable"
    stale = await a.svc.serve(Call(op="work.list", args={}))
    assert stale.result["meta"]["level"] == "stale" and stale.result["meta"]["lag"] == {"records": 0}


async def test_search_says_building_until_the_first_lap(inproc: Start) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    w = await a.svc.serve(
        Call(op="pages.write", args={"space": "ENG", "title": "Beacon", "body": "lighthouse"})
    )
    assert w.result["outcome"] == "applied"
    pages = a.est.appliers["pages"]
    pages.drained = False  # as on a freshly booted node still on its first lap (ES-65)
    missing = await a.svc.serve(Call(op="pages.search", args={"query": "nothing-here"}, take_anyway=True))
    assert (
        missing.result["data"]["state"] == "building"
        and "not searchable from here yet" in missing.result["data"]["sentence"]
    )
    found = await a.svc.serve(Call(op="pages.search", args={"query": "lighthouse"}, take_anyway=True))
    assert found.result["data"]["state"] == "building" and found.result["data"]["hits"]
    assert "may be missing" in found.result["data"]["sentence"]
    pages.drained = True
    done = await a.svc.serve(Call(op="pages.search", args={"query": "nothing-here"}))
    assert done.result["data"]["state"] == "empty" and "matched" in done.result["data"]["sentence"]


async def test_restart_resumes_from_rows_and_a_lost_file_replays(inproc: Start, tmp_path: Any) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    for i in range(5):
        await _create(a, f"item {i}")
    before = await a.est.store.digest()
    await stop_inproc(a)
    with capture_logs() as clean:
        again = await inproc("a")
    assert (await again.est.store.digest()) == before
    assert not [e for e in clean if e["event"] == "jetstream_domain_consumer_rebuilt"]
    await stop_inproc(again)
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / "a" / f"estate.db{suffix}").unlink(missing_ok=True)
    with capture_logs() as lost:
        third = await inproc("a")
    assert (await third.est.store.digest()) == before
    rebuilt = [e for e in lost if e["event"] == "jetstream_domain_consumer_rebuilt"]
    assert {e["drift"] for e in rebuilt} == {"acknowledged_past_checkpoint"}
    assert all(e["log_level"] == "warning" for e in rebuilt)


async def test_apply_failures_are_named_retried_and_recovered(inproc: Start) -> None:
    a = await inproc("a", retry_budget=0.5)
    await seed(a, "ENG")
    applier = a.est.appliers["tracker"]
    failing = {"on": True}

    def fault() -> None:
        if failing["on"]:
            raise RuntimeError("disk says no")

    with capture_logs() as logs:
        applier.fault = fault
        ans = await _create(a, "Through a fault")
        assert ans.result["outcome"] == "pending"
        for _ in range(100):
            if applier.faulted:
                break
            await asyncio.sleep(0.05)
        refused = await a.svc.serve(Call(op="work.list", args={}))
        assert refused.status == "ran_nothing" and refused.reason == "not_serving"
        failing["on"] = False
        assert await applier.wait_applied(ans.result["position"]["seq"], 30)
        served = await a.svc.serve(Call(op="work.list", args={}))
    assert served.status == "ran" and served.result["data"]["count"] == 1
    names = [
        e["event"]
        for e in logs
        if e["event"].startswith("statelog_apply") or e["event"] == "estate_partition_not_served"
    ]
    assert names == [
        "statelog_apply_retrying",
        "statelog_apply_faulted",
        "estate_partition_not_served",
        "statelog_apply_recovered",
    ]
    recovered = next(e for e in logs if e["event"] == "statelog_apply_recovered")
    assert recovered["after"] > 0 and "disk says no" in recovered["last_error"]


async def test_raw_publish_and_estate_write_cost(inproc: Start, nats_server: Any) -> None:
    """Not a timing assertion: prints a write's and a local read's median beside a raw publish."""
    import statistics
    import time

    a = await inproc("a")
    await seed(a, "ENG")
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    await js.add_stream(name="RAW", subjects=["raw.>"])
    raw, writes, reads = [], [], []
    for i in range(100):
        t = time.perf_counter()
        await js.publish(f"raw.{i}", b"x" * 300)
        raw.append(time.perf_counter() - t)
        t = time.perf_counter()
        w = await _create(a, f"bench {i}")
        writes.append(time.perf_counter() - t)
        t = time.perf_counter()
        r = await a.svc.serve(Call(op="work.get", args={"key": w.result["object"]["key"]}))
        reads.append(time.perf_counter() - t)
        assert r.status == "ran"
    await nc.close()
    ms = {
        k: round(statistics.median(v) * 1000, 3)
        for k, v in (("raw_publish", raw), ("write", writes), ("local_read", reads))
    }
    print(f"\nestate cost (median ms, n=100, same run): {ms}")
    assert ms["write"] > 0 and ms["raw_publish"] > 0


async def test_a_fresh_copy_replays_thousands_of_records(inproc: Start) -> None:
    """ES-19: replay drains the log in batches; prints the rate (no timing assertion)."""
    import time

    from shared.estate.log import derived_id

    a = await inproc("a")
    await seed(a, "ENG")
    js = a.nc.jetstream()
    project_id = derived_id("project", "ENG")
    pending = []
    last = 0
    n = 3000
    for i in range(n):
        op = estate.mint_op_id("create-ENG")
        tid = derived_id("task", op)
        rec = estate.Record(
            kind="task_create",
            domain="tracker",
            subject=estate.object_subject("tracker", "task", tid),
            op_id=op,
            writer="a",
            generation=1,
            at=1_700_000_000_000_000 + i,
            payload={
                "id": tid,
                "project_id": project_id,
                "project": "ENG",
                "title": f"bulk {i}",
                "body": "replayed body " * 8,
            },
        )
        pending.append(js.publish(rec.subject, rec.encode(), headers={"Nats-Msg-Id": op}))
        if len(pending) >= 500:
            last = max(ack.seq for ack in await asyncio.gather(*pending))
            pending = []
    last = max([last, *(ack.seq for ack in await asyncio.gather(*pending))])
    t = time.perf_counter()
    b = await inproc("b")
    elapsed = time.perf_counter() - t
    # both copies must have applied the whole log before their digests can be compared: serving
    # means caught up to the level read at start, and `a` applies the raw publishes on its own time
    for node in (a, b):
        assert await node.est.appliers["tracker"].wait_applied(last, 60.0), node.est.appliers[
            "tracker"
        ].applied
    listed = await b.svc.serve(Call(op="work.list", args={"text": "bulk", "limit": 100}))
    assert listed.result["data"]["count"] == 100
    assert await b.est.store.digest() == await a.est.store.digest()
    print(
        f"\nreplayed {b.est.appliers['tracker'].applied} records in {elapsed:.2f} s "
        f"({b.est.appliers['tracker'].applied / elapsed:.0f} records/s, ~7 rows each)"
    )


async def test_rows_keyed_to_a_lost_log_refuse_rather_than_drop_writes(
    inproc: Start, nats_server: Any, tmp_path: Any
) -> None:
    """A restore onto a broker that lost its logs (an embedded node's lost disk): the rows'
    checkpoint is past a recreated log. The copy refuses (``statelog_stream_recreated``), so no
    write is acknowledged and then skipped as "already applied" (ES-90)."""
    a = await inproc("a")
    await seed(a, "ENG")
    for i in range(5):
        await _create(a, f"item {i}")
    await stop_inproc(a)
    nc = await nats.connect(nats_server.url)
    try:
        for stream in ("CREWLET_TRACKER_LOG", "CREWLET_PAGES_LOG"):
            await nc.jetstream().delete_stream(stream)
        with capture_logs() as logs:
            est = await estate.open_estate(nc.jetstream(timeout=5.0), node_id="a", store_dir=tmp_path / "a")
        try:
            stopped = {e["domain"] for e in logs if e["event"] == "statelog_stream_recreated"}
            assert stopped == {"tracker", "pages"}, logs
            assert est.appliers["tracker"].copy_state() == "out_of_service"
            ans = await est.service.serve(Call(op="work.create", args={"project": "ENG", "title": "lost?"}))
            assert ans.status == "ran_nothing" and ans.reason == "not_serving", ans
            info = await nc.jetstream().stream_info("CREWLET_TRACKER_LOG")
            assert info.state.messages == 0  # nothing was appended, so nothing was acknowledged
        finally:
            await est.close()
    finally:
        await nc.close()
