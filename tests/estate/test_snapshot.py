"""Snapshots of the estate (ES-53, ES-54, ES-55, ES-59): taken while writes flow, checked, one kept,
declined with a reason, and said once."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from structlog.testing import capture_logs

from shared import estate
from shared.estate.life import MANIFEST, load_manifest
from shared.router import RpcServer

from .conftest import Inproc, seed, stop_inproc

Start = Callable[..., Awaitable[Inproc]]

pytestmark = pytest.mark.timeout(300)  # several in-process nodes start and stop per test on 2 loaded cores


@pytest.fixture
async def node(tmp_path: Path, nats_server: Any) -> AsyncIterator[Start]:
    """In-process data nodes with their connection passed in (snapshots, donating, catch-up)."""
    started: list[Inproc] = []

    async def start(node_id: str, *, level: bool = True, **kw: Any) -> Inproc:
        nc = await nats.connect(nats_server.url, name=node_id)
        kw.setdefault("snapshot_dir", tmp_path / node_id / "snapshots")
        kw.setdefault("snapshot_interval", 3600.0)
        kw.setdefault("heartbeat", 0.5)
        try:
            est = await estate.open_estate(
                nc.jetstream(timeout=5.0), node_id=node_id, store_dir=tmp_path / node_id, nc=nc, **kw
            )
        except BaseException:
            await nc.close()
            raise
        server = RpcServer(nc, node_id=node_id, handler=est.service.serve)
        await server.start()
        n = Inproc(node_id, nc, est, server)
        started.append(n)
        if level:
            assert await est.wait_level(45)
        return n

    try:
        yield start
    finally:
        for n in started:
            await stop_inproc(n)


async def create(n: Inproc, title: str) -> estate.Answer:
    ans = await n.svc.serve(estate.Call(op="work.create", args={"project": "ENG", "title": title}))
    assert ans.status == "ran" and ans.error is None, ans
    return ans


async def registered(n: Inproc, peer: str, timeout: float = 30.0) -> None:
    """Wait until ``peer``'s positions are in the register ``n`` reads (its first heartbeat):
    until then ``n``'s keeper counts itself the sole node (ES-54)."""
    kv = await n.nc.jetstream().key_value("crewlet_positions")
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        try:
            keys = await kv.keys()
        except Exception:  # noqa: BLE001 - nats-py raises NoKeysError while the bucket is empty
            keys = []
        if any(k.endswith(f".{peer}") for k in keys):
            return
        assert loop.time() < end, f"{peer} never published its positions"
        await asyncio.sleep(0.1)


async def wait_for(pred: Callable[[], bool], timeout: float = 15.0) -> bool:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        if loop.time() > end:
            return False
        await asyncio.sleep(0.05)
    return True


async def test_a_snapshot_taken_while_writes_flow_names_the_positions_inside_the_copy(node: Start) -> None:
    a = await node("a")
    await seed(a, "ENG")
    stop = False

    async def writes() -> int:
        n = 0
        while not stop:
            await create(a, f"flowing {n}")
            n += 1
        return n

    flow = asyncio.create_task(writes())
    await asyncio.sleep(0.3)
    keeper = a.est.snapshots
    assert keeper is not None
    first = await keeper.take()
    stop = True
    assert await flow > 0
    snap_dir = keeper.dir
    copy = snap_dir / first["file"]
    db = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = {
            r[0]: (r[1], r[2], r[3], r[4])
            for r in db.execute(
                "SELECT domain, stream, generation, seq, applied_through FROM statelog_checkpoint"
            )
        }
        tasks = db.execute("SELECT count(*) FROM tasks").fetchone()[0]
    finally:
        db.close()
    for domain, (stream, generation, seq, through) in rows.items():
        pos = first["positions"][domain]
        assert (pos["stream"], pos["generation"], pos["seq"], pos["applied_through"]) == (
            stream,
            generation,
            seq,
            through,
        )
    assert tasks >= 1 and first["positions"]["tracker"]["seq"] > 0
    assert first["sha256"] and first["bytes"] == copy.stat().st_size
    assert "statelog_ledger" in first["migrations"] and "tasks" in first["migrations"]
    assert json.loads((snap_dir / MANIFEST).read_text())["sha256"] == first["sha256"]

    await create(a, "after the first snapshot")
    second = await keeper.take()
    assert second["sha256"] != first["sha256"]
    assert second["positions"]["tracker"]["seq"] > first["positions"]["tracker"]["seq"]
    artefacts = sorted(p.name for p in snap_dir.iterdir())
    assert artefacts == sorted([MANIFEST, second["file"]])  # one artefact kept: the old one is gone
    assert load_manifest(snap_dir) == second == keeper.latest()


async def test_a_sole_node_declines_says_so_once_and_publishes_the_reason(node: Start) -> None:
    with capture_logs() as logs:
        a = await node("solo", snapshot_retry=0.2)
        keeper = a.est.snapshots
        assert keeper is not None
        assert await wait_for(lambda: keeper.skip_reason == "sole_node")
        await asyncio.sleep(1.0)  # several retries
    sole = [e for e in logs if e["event"] == "statelog_snapshot_sole_node"]
    assert len(sole) == 1 and sole[0]["log_level"] == "info"
    assert not [e for e in logs if e["event"] == "statelog_no_snapshot_yet"]
    assert keeper.latest() is None
    await a.est.beat.beat()
    kv = await a.nc.jetstream().key_value("crewlet_positions")
    row = json.loads((await kv.get("tracker.solo")).value or b"{}")
    assert row["snapshot_skip"] == "sole_node" and row["snapshot"] is None and "log_first" in row


async def test_insufficient_space_declines_warns_once_and_raises_volume_low(node: Start) -> None:
    a = await node("a", snapshot_interval=3600.0)
    await seed(a, "ENG")
    await node("b")  # a second counted node: not sole
    await registered(a, "b")
    keeper = a.est.snapshots
    assert keeper is not None
    await keeper.stop()
    keeper.free_space = lambda _p: 10  # the probe seam: a nearly full volume
    with capture_logs() as logs:
        assert await keeper.attempt() == "insufficient_space"
        assert await keeper.attempt() == "insufficient_space"
    assert "volume_low" in a.est.beat.alarms.active
    assert [e["kind"] for e in logs if e["event"] == "alarm_started"] == ["volume_low"]
    warned = [e for e in logs if e["event"] == "statelog_no_snapshot_yet"]
    assert (
        len(warned) == 1
        and warned[0]["reason"] == "insufficient_space"
        and warned[0]["log_level"] == "warning"
    )
    assert keeper.latest() is None

    keeper.free_space = lambda _p: 1 << 40
    with capture_logs() as logs:
        assert await keeper.attempt() == ""
    assert "volume_low" not in a.est.beat.alarms.active
    assert keeper.latest() is not None and keeper.skip_reason == ""
    kv = await a.nc.jetstream().key_value("crewlet_positions")
    row = json.loads((await kv.get("tracker.a")).value or b"{}")  # published at once after taking it
    latest = keeper.latest()
    assert latest is not None
    assert row["snapshot"]["sha256"] == latest["sha256"] and row["snapshot_skip"] == ""


async def test_a_restart_with_a_recent_artefact_logs_nothing(node: Start) -> None:
    a = await node("a")
    await seed(a, "ENG")
    await node("b")
    await registered(a, "b")
    keeper = a.est.snapshots
    assert keeper is not None
    await keeper.take()
    await stop_inproc(a)
    with capture_logs() as logs:
        again = await node("a", snapshot_retry=0.2)
        await asyncio.sleep(1.0)
    assert again.est.snapshots is not None and again.est.snapshots.latest() is not None
    assert not [e for e in logs if e["event"] in ("statelog_no_snapshot_yet", "statelog_snapshot_taken")]
