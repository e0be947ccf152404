"""Figure 11: the estate over time — catching up a node N records behind by adopting a peer's snapshot
[floor: replaying the same N records], and taking a snapshot [floor: a raw ``VACUUM INTO``].

What is measured (in-process data nodes, the code a data node runs: ``shared.estate.open_estate``
with its snapshot keeper, donor and catch-up, on one nats-server):

- Setup: data node ``a`` seeds project ``BEN``; node ``c`` opens, reaches the logs' end and stops
  (its estate file is kept). Then N ``task_create`` records (the shape ``create_work_item``
  appends, each its own op id and derived task id) are published straight onto the tracker log
  (pipelined, 500 in flight) and ``a`` applies them: ``c`` is now N records behind.
- **11a catch-up by adoption**: ``a`` takes its snapshot (not timed: a donor holds one already);
  the tracker log is purged up to its head (standing in for the trim), so ``c``'s next record is
  gone; a copy of ``c``'s stopped file is opened as node ``c``: boot finds it below its log, asks
  for offers (the **5-second offer window** of ES-56 is inside the figure), fetches ``a``'s artefact
  in 1 MiB chunks, verifies its sha256 and positions, installs it, rebuilds the consumer and is level.
  Timed: ``open_estate`` until ``wait_level``. Floor: **replay**: before the purge, another copy of
  ``c``'s file opened as node ``r`` (its own consumer from its checkpoint) until it has applied the
  same N records. Both in the same run; ratio = adoption / replay (below 1: adopting is faster).
- **11b snapshot time**: ``SnapshotKeeper.take()`` on ``a`` holding N items (VACUUM INTO a temp file,
  reopen, ``integrity_check``, positions read out of the copy, sha256, fsync, manifest, atomic
  switch, old artefact deleted). Floor: a raw ``VACUUM INTO`` of the same live file through a plain
  ``sqlite3`` connection, interleaved.
- **11c snapshot size**: the artefact's bytes beside the raw ``VACUUM INTO`` output's (×1.0 means the
  artefact carries nothing but the estate).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client

from shared import estate
from shared.estate.log import derived_id

from ._ctx import Ctx
from ._env import PROJECT, nats_server
from ._result import Row, failed, row_from

__all__ = ["run"]

TRACKER = estate.STREAMS["tracker"]


async def _open(nc: Client, node_id: str, store: Path, **kw: Any) -> estate.Estate:
    return await estate.open_estate(
        nc.jetstream(timeout=10.0),
        node_id=node_id,
        store_dir=store,
        nc=nc,
        snapshot_dir=store / "snapshots",
        snapshot_interval=86_400.0,
        **kw,
    )


async def _seed(est: estate.Estate) -> str:
    for op in ("project.upsert", "space.upsert"):
        ans = await est.service.serve(
            estate.Call(
                op=op,
                args={"key": PROJECT, "name": PROJECT},
                op_id=estate.derive_op_id(f"seed-{op}-{PROJECT}", PROJECT),
            )
        )
        if ans.status != "ran" or ans.error is not None:
            raise RuntimeError(f"seeding {op}: {ans}")
    rows = await est.store.read(
        lambda c: c.exec_driver_sql("SELECT id FROM projects WHERE key = ?", (PROJECT,)).all()
    )
    return str(rows[0][0])


def _record(project_id: str, i: int) -> estate.Record:
    op = estate.mint_op_id(f"create-bench-{i}")
    tid = derived_id("task", op)
    return estate.Record(
        kind="task_create",
        domain="tracker",
        subject=estate.object_subject("tracker", "task", tid),
        op_id=op,
        writer="bench",
        generation=1,
        at=int(time.time() * 1_000_000),
        payload={
            "id": tid,
            "project_id": project_id,
            "project": PROJECT,
            "title": f"Catch-up item {i}",
            "body": "Written straight onto the log by the benchmark. " * 3,
            "type": "task",
            "status": "todo",
            "priority": "normal",
            "assignee": None,
            "parent_id": None,
            "due": None,
            "external": None,
            "url": None,
            "labels": [],
            "author": "bench",
            "author_kind": "operator",
        },
        scope=(f"task:{tid}", f"project:{PROJECT}"),
    )


async def _publish(nc: Client, project_id: str, n: int) -> int:
    js = nc.jetstream(timeout=30.0)
    last = 0
    step = 500
    for start in range(0, n, step):
        recs = [_record(project_id, i) for i in range(start, min(n, start + step))]
        acks = await asyncio.gather(
            *(
                js.publish(r.subject, r.encode(), headers={"Nats-Msg-Id": r.op_id}, stream=TRACKER)
                for r in recs
            )
        )
        last = max(last, *(int(a.seq) for a in acks))
    return last


def _vacuum(live: Path, dest: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        dest.unlink()
    db = sqlite3.connect(str(live), isolation_level=None, timeout=30.0)
    try:
        db.execute("VACUUM INTO ?", (str(dest),))
    finally:
        db.close()


async def _measure(url: str, root: Path, n: int, samples: int) -> dict[str, Any]:
    out: dict[str, Any] = {"snap": [], "vacuum": [], "snap_mb": [], "vacuum_mb": []}
    conns: list[Client] = []
    ests: list[estate.Estate] = []

    async def connect(name: str) -> Client:
        nc = await nats.connect(url, name=name)
        conns.append(nc)
        return nc

    try:
        a = await _open(await connect("a"), "a", root / "a")
        ests.append(a)
        if not await a.wait_level(30):
            raise RuntimeError("a: not level")
        project_id = await _seed(a)
        c = await _open(await connect("c"), "c", root / "c")
        if not await c.wait_level(30):
            raise RuntimeError("c: not level")
        await c.close()
        behind_at = c.appliers["tracker"].applied
        head = await _publish(conns[0], project_id, n)
        ta = a.appliers["tracker"]
        if not await ta.wait_applied(head, 600):
            raise RuntimeError(f"a applied {ta.applied} of {head} within 600 s")
        out["records_behind"] = head - behind_at
        # 11b/11c: the snapshot beside a raw VACUUM INTO of the same file, interleaved
        keeper = a.snapshots
        assert keeper is not None
        raw = root / "raw-vacuum.db"
        for _ in range(samples):
            t0 = time.perf_counter()
            await asyncio.to_thread(_vacuum, a.store.path, raw)
            t1 = time.perf_counter()
            m = await keeper.take()
            t2 = time.perf_counter()
            out["vacuum"].append((t1 - t0) * 1000)
            out["snap"].append((t2 - t1) * 1000)
            out["vacuum_mb"].append(raw.stat().st_size / 1e6)
            out["snap_mb"].append(int(m["bytes"]) / 1e6)
        # 11a floor: replay the same records from c's stopped file
        shutil.copytree(root / "c", root / "r", ignore=shutil.ignore_patterns("snapshots"))
        t0 = time.perf_counter()
        r = await _open(await connect("r"), "r", root / "r")
        ests.append(r)
        if not await r.wait_level(600):
            raise RuntimeError("r: the replay did not reach the log's end in 600 s")
        out["replay"] = [time.perf_counter() - t0]
        await r.close()
        ests.remove(r)
        # 11a: the log is trimmed past c; c adopts a's snapshot
        await conns[0].jetstream().purge_stream(TRACKER, seq=head)
        nc = await connect("c2")
        t0 = time.perf_counter()
        c2 = await _open(nc, "c", root / "c")
        ests.append(c2)
        if not await c2.wait_level(600):
            raise RuntimeError("c: not level after adopting")
        out["adopt"] = [time.perf_counter() - t0]
        if c2.catchup is None or c2.catchup.adopted is None:
            raise RuntimeError("c did not adopt a snapshot")
        if c2.appliers["tracker"].applied != head:
            raise RuntimeError(f"c is at {c2.appliers['tracker'].applied}, the head at {head}")
        latest = keeper.latest()
        out["snapshot_bytes"] = int(latest["bytes"]) if latest else 0
    finally:
        for e in ests:
            with contextlib.suppress(Exception):
                await e.close()
        for nc in conns:
            with contextlib.suppress(Exception):
                await nc.close()
    return out


def run(ctx: Ctx) -> list[Row]:
    """Measure rows 11a..11c."""
    n, samples = ctx.n(2_000, 100_000), ctx.n(2, 5)
    labels = (
        "11a catch-up by adopting a snapshot",
        "11b snapshot time",
        "11c snapshot size",
    )
    params: dict[str, Any] = {"in_process": True, "work_items": n, "offer_window_seconds": 5.0}
    ctx.say(f"figure 11: {n} records behind; snapshot x{samples}")
    try:
        with contextlib.ExitStack() as stack:
            srv = nats_server(stack, ctx.sub("nats"))
            got = asyncio.run(_measure(srv.url, ctx.sub("nodes"), n, samples))
    except Exception as e:  # noqa: BLE001
        return [
            failed(label, unit, f"{type(e).__name__}: {e}", params)
            for label, unit in zip(labels, ("s", "ms", "MB"), strict=True)
        ]
    pa = {**params, "records_behind": got["records_behind"], "snapshot_bytes": got["snapshot_bytes"]}
    return [
        row_from(
            labels[0],
            "s",
            got["adopt"],
            "replaying the same records",
            got["replay"],
            parameters=pa,
            note="includes the 5 s offer window; below ×1 adopting beats replaying",
        ),
        row_from(labels[1], "ms", got["snap"], "raw VACUUM INTO", got["vacuum"], parameters=params),
        row_from(
            labels[2], "MB", got["snap_mb"], "raw VACUUM INTO output", got["vacuum_mb"], parameters=params
        ),
    ]
