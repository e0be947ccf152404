"""Catch-up by snapshot (ES-56, ES-57, ES-58): a node below its log adopts a peer's artefact at boot
or while running, refuses incompatible ones before transfer, and skips a corrupt donor."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

from nats.aio.msg import Msg
from structlog.testing import capture_logs

from shared import estate
from shared.coordination import MemoryCoordination
from shared.estate.life import FETCH_PREFIX, OFFER_SUBJECT, CatchUp

from .conftest import Inproc, seed, stop_inproc
from .test_snapshot import Start, create, node, wait_for

__all__ = ["node"]  # the fixture, imported for this module

TRACKER = "CREWLET_TRACKER_LOG"
FAST = {"offer_window": 1.0, "catchup_retry": 0.5}


async def artefact_digest(tmp: Path, n: Inproc) -> dict[str, Any]:
    """The digest of node ``n``'s snapshot artefact, opened as an estate file of its own."""
    keeper = n.est.snapshots
    assert keeper is not None and keeper.path() is not None
    dest = tmp / f"digest-{n.node_id}" / "estate.db"
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(keeper.path(), dest)  # type: ignore[arg-type]
    store = await estate.EstateStore.open(dest)
    try:
        return await store.digest()
    finally:
        store.close()


async def below_setup(node: Start) -> tuple[Inproc, Inproc, int]:
    """A and B running, C stopped behind them; returns (a, b, C's tracker checkpoint)."""
    a = await node("a", **FAST)
    b = await node("b", **FAST)
    c = await node("c", **FAST)
    await seed(a, "ENG")
    for i in range(5):
        await create(a, f"before {i}")
    assert await wait_for(lambda: c.est.appliers["tracker"].applied == a.est.appliers["tracker"].applied)
    c_at = c.est.appliers["tracker"].applied
    await stop_inproc(c)
    for i in range(20):
        await create(a, f"while c is away {i}")
    assert await wait_for(lambda: b.est.appliers["tracker"].applied == a.est.appliers["tracker"].applied)
    return a, b, c_at


async def test_a_node_below_its_log_adopts_at_boot_skipping_a_corrupt_donor_then_replays(
    node: Start, tmp_path: Path, monkeypatch: Any
) -> None:
    a, b, c_at = await below_setup(node)
    kb, ka = b.est.snapshots, a.est.snapshots
    assert kb is not None and ka is not None
    good = await kb.take()
    await create(a, "between the snapshots")
    assert await wait_for(lambda: b.est.appliers["tracker"].applied == a.est.appliers["tracker"].applied)
    bad = await ka.take()  # A's is higher: the joiner tries it first
    assert bad["positions"]["tracker"]["seq"] > good["positions"]["tracker"]["seq"]
    path = ka.path()
    assert path is not None
    raw = bytearray(path.read_bytes())
    for i in range(4096, 4096 + 64):
        raw[i] ^= 0xFF  # corrupt the donor's bytes after its manifest was written
    path.write_bytes(bytes(raw))
    want = await artefact_digest(tmp_path, b)

    js = a.nc.jetstream()
    await js.purge_stream(TRACKER, seq=c_at + 10)  # stands in for the trim: C's next record is gone
    info = await js.stream_info(TRACKER)
    assert info.state.first_seq > c_at + 1
    for i in range(5):
        await create(a, f"after the snapshots {i}")

    at_install: dict[str, Any] = {}
    orig = CatchUp._start_appliers

    async def spy(self: CatchUp) -> dict[str, int]:
        if not at_install:
            at_install["digest"] = await self.store.digest()
            at_install["checkpoint"] = await self.store.checkpoint("tracker")
        return await orig(self)

    monkeypatch.setattr(CatchUp, "_start_appliers", spy)
    coord = MemoryCoordination()
    held: list[tuple[str, dict[str, Any]]] = []
    real_put = coord.put

    async def put(slot: Any, key: str, value: bytes) -> int:
        if slot == "trim_holds":
            held.append((key, json.loads(value)))
        return await real_put(slot, key, value)

    coord.put = put  # type: ignore[method-assign]
    with capture_logs() as logs:
        c = await node("c", level=False, coord=coord, **FAST)
        assert await c.est.wait_level(45)
    adopted = [e for e in logs if e["event"] == "statelog_adopted"]
    assert len(adopted) == 1 and adopted[0]["donor"] == "b" and adopted[0]["sha256"] == good["sha256"]
    assert adopted[0]["taken_at"] == good["taken_at"] and adopted[0]["log_level"] == "info"
    rejected = [e for e in logs if e["event"] == "statelog_snapshot_rejected"]
    assert [(e["donor"], e["sha256"]) for e in rejected] == [("a", bad["sha256"])]
    assert "sha256 mismatch" in rejected[0]["reason"]
    assert not list((c.est.snapshots.dir if c.est.snapshots else tmp_path).glob("incoming-*"))
    rebuilt = [
        e for e in logs if e["event"] == "jetstream_domain_consumer_rebuilt" and e["domain"] == "tracker"
    ]
    assert rebuilt and rebuilt[-1]["drift"] == "behind_checkpoint"
    # the join pinned every log with a hold while it ran, and released it
    assert {k for k, _ in held} == {"tracker.join-c", "pages.join-c"}
    assert dict(held)["tracker.join-c"]["seq"] == c_at + 9 and dict(held)["tracker.join-c"]["kind"] == "join"
    assert await coord.entries("trim_holds") == []
    # rows identical to the donor's at that position
    assert at_install["checkpoint"].seq == good["positions"]["tracker"]["seq"]
    assert at_install["digest"] == want
    # then it replays to the head, and every copy agrees
    head = a.est.appliers["tracker"].applied
    assert await wait_for(lambda: c.est.appliers["tracker"].applied == head)
    assert c.est.appliers["tracker"].copy_state() == "serving"
    assert (await c.est.store.digest())["sha256"] == (await a.est.store.digest())["sha256"]
    ans = await c.svc.serve(estate.Call(op="work.list", args={"project": "ENG"}, read_level="stale"))
    assert ans.status == "ran", ans


async def test_an_incompatible_artefact_is_refused_before_transfer(node: Start) -> None:
    a, b, c_at = await below_setup(node)
    kb = b.est.snapshots
    assert kb is not None
    good = await kb.take()
    fetched: list[str] = []

    def fake(name: str, change: dict[str, Any]) -> dict[str, Any]:
        m = json.loads(json.dumps(good))
        m["positions"]["tracker"]["seq"] += 1000  # would be preferred if it were compatible
        m.update(change.get("top", {}))
        for domain, p in change.get("positions", {}).items():
            m["positions"][domain].update(p)
        return {"node": name, "manifest": m}

    newer_schema = fake("z1", {"top": {"migrations": {**good["migrations"], "tasks_v9": ["id"]}}})
    newer_records = fake("z2", {"positions": {"tracker": {"max_record_version": 99}}})

    async def offers(msg: Msg) -> None:
        for offer in (newer_schema, newer_records):
            await a.nc.publish(msg.reply, json.dumps(offer).encode())

    async def fetch(msg: Msg) -> None:
        fetched.append(msg.subject)

    subs = [
        await a.nc.subscribe(OFFER_SUBJECT, cb=offers),
        await a.nc.subscribe(FETCH_PREFIX + "z1", cb=fetch),
        await a.nc.subscribe(FETCH_PREFIX + "z2", cb=fetch),
    ]
    try:
        await a.nc.jetstream().purge_stream(TRACKER, seq=c_at + 10)
        with capture_logs() as logs:
            c = await node("c", level=False, **FAST)
            assert await c.est.wait_level(45)
    finally:
        for s in subs:
            await s.unsubscribe()
    refused = {e["donor"]: e["reason"] for e in logs if e["event"] == "statelog_snapshot_refused"}
    assert "tasks_v9" in refused["z1"] and "record version 99" in refused["z2"]
    assert fetched == []
    adopted = [e for e in logs if e["event"] == "statelog_adopted"]
    assert [(e["donor"], e["sha256"]) for e in adopted] == [("b", good["sha256"])]
    assert c.est.appliers["tracker"].applied == a.est.appliers["tracker"].applied


async def test_a_running_node_found_below_its_log_adopts_without_restart(node: Start) -> None:
    a = await node("a", **FAST)
    b = await node("b", **FAST)
    await seed(a, "ENG")
    await create(a, "first")
    assert await wait_for(lambda: b.est.appliers["tracker"].applied == a.est.appliers["tracker"].applied)
    tb = b.est.appliers["tracker"]
    tb.pause()
    for i in range(15):
        await create(a, f"while b is paused {i}")
    ka = a.est.snapshots
    assert ka is not None
    snap = await ka.take()
    await a.nc.jetstream().purge_stream(TRACKER, seq=tb.applied + 8)
    with capture_logs() as logs:
        tb.resume()
        assert await wait_for(lambda: b.est.catchup is not None and b.est.catchup.adopted is not None, 20)
        head = a.est.appliers["tracker"].applied
        assert await wait_for(lambda: b.est.appliers["tracker"].applied == head, 20)
    assert b.est.catchup is not None and b.est.catchup.adopted == {
        "donor": "a",
        "sha256": snap["sha256"],
        "taken_at": snap["taken_at"],
    }
    assert [e["event"] for e in logs if e["event"] == "statelog_adopted"] == ["statelog_adopted"]
    assert (await b.est.store.digest())["sha256"] == (await a.est.store.digest())["sha256"]
    assert b.est.appliers["tracker"].copy_state() == "serving"


async def test_with_no_donor_the_copy_refuses_below_floor_and_keeps_asking(node: Start) -> None:
    a, b, c_at = await below_setup(node)
    await a.nc.jetstream().purge_stream(TRACKER, seq=c_at + 10)  # nobody holds an artefact
    with capture_logs() as logs:
        c = await node("c", level=False, **FAST)
        await asyncio.sleep(2.5)
        ans = await c.svc.serve(estate.Call(op="work.list", args={"project": "ENG"}, read_level="stale"))
        assert ans.status == "ran_nothing" and ans.reason == "not_serving"
        assert c.est.appliers["tracker"].refusing == "below_floor"
        kb = b.est.snapshots
        assert kb is not None
        await kb.take()  # a donor appears: the next ask adopts
        assert await wait_for(lambda: c.est.catchup is not None and c.est.catchup.adopted is not None, 20)
    assert len([e for e in logs if e["event"] == "statelog_no_donor"]) >= 2
    assert await wait_for(lambda: c.est.appliers["tracker"].copy_state() == "serving", 20)


async def test_a_failed_install_that_cannot_reopen_loses_the_file_then_recovers(node: Start) -> None:
    a = await node("a", **FAST)
    b = await node("b", **FAST)
    await seed(a, "ENG")
    await create(a, "first")
    assert await wait_for(lambda: b.est.appliers["tracker"].applied == a.est.appliers["tracker"].applied)
    tb = b.est.appliers["tracker"]
    tb.pause()
    for i in range(10):
        await create(a, f"while b is paused {i}")
    ka = a.est.snapshots
    assert ka is not None
    await ka.take()
    await a.nc.jetstream().purge_stream(TRACKER, seq=tb.applied + 5)
    store = b.est.store
    real_open = store._engines_sync
    broken = {"on": True}

    def fail_install() -> None:
        raise OSError("injected: the disk refused the rename")

    def fail_open() -> None:
        if broken["on"]:
            raise estate.StoreFailed(f"cannot open {store.path}: injected")
        real_open()

    store.install_fault = fail_install
    store._engines_sync = fail_open  # type: ignore[method-assign]
    with capture_logs() as logs:
        tb.resume()
        assert await wait_for(lambda: b.est.catchup is not None and b.est.catchup.lost, 20)
        ans = await b.svc.serve(estate.Call(op="work.list", args={"project": "ENG"}, read_level="stale"))
        assert ans.status == "ran_nothing" and ans.reason == "not_serving"
        assert not list(b.est.snapshots.dir.glob("incoming-*")) if b.est.snapshots else True
        store.install_fault = None
        broken["on"] = False  # the fault clears: the next heartbeat reopens, then the join completes
        assert await wait_for(lambda: b.est.catchup is not None and b.est.catchup.adopted is not None, 20)
        head = a.est.appliers["tracker"].applied
        assert await wait_for(lambda: b.est.appliers["tracker"].applied == head, 20)
    lost = [e for e in logs if e["event"] == "statelog_estate_lost"]
    assert len(lost) == 1 and lost[0]["log_level"] == "error" and lost[0]["file"] == str(store.path)
    events = [e["event"] for e in logs]
    assert events.index("statelog_estate_lost") < events.index("statelog_estate_recovered")
    assert events.index("statelog_estate_recovered") < events.index("statelog_adopted")
    assert (await b.est.store.digest())["sha256"] == (await a.est.store.digest())["sha256"]


async def test_an_artefact_without_a_ledger_makes_the_join_instant_the_watermark(tmp_path: Path) -> None:
    store = await estate.EstateStore.open(tmp_path / "estate.db")
    try:
        cu = CatchUp(
            nc=None,
            node_id="j",
            store=store,
            log=None,  # type: ignore[arg-type]
            appliers={"tracker": None, "pages": None},  # type: ignore[dict-item]
            snapshot_dir=tmp_path / "snapshots",
        )
        await cu._watermark({"migrations": {"statelog_ledger": ["op_id"]}})  # it carried one: nothing
        assert (
            await store.read(lambda c: c.exec_driver_sql("SELECT * FROM statelog_ledger_watermark").all())
            == []
        )
        await cu._watermark({"migrations": {"tasks": ["id"]}})
        rows = await store.read(
            lambda c: c.exec_driver_sql(
                "SELECT domain, reason, cutoff_instant FROM statelog_ledger_watermark"
            ).all()
        )
        assert sorted((r[0], r[1]) for r in rows) == [("pages", "join"), ("tracker", "join")]
        assert all(r[2] > 0 for r in rows)
    finally:
        store.close()
