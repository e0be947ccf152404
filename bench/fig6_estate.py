"""Figure 6: an estate write through the router until applied, on 1 and on 3 data nodes [floor: a raw R1 /
R3 ``js.publish``]; a local read and a read with a floor [floor: a raw SQLite point query].

What is measured (in-process, the same code a data node runs: ``shared.estate.open_estate`` — state
logs, appliers, the SQLite copy — and ``shared.router.EstateRouter`` answering from the local copy,
as a node with the ``data`` role does for its own calls):

- **6a write, 1 data node (R1)**: ``router.create_work_item("BEN", title)`` until it returns: the call
  is decided, appended to the tracker log (JetStream, op id as message id) and answered once this
  node's copy has applied it (ES-10). Floor: a raw ``js.publish`` of 256 bytes to a file stream on
  the same server, interleaved.
- **6b write, 3 data nodes (R3), answered**: the same on three data nodes, each on its own connection
  to its own member of the 3-member cluster, the logs at R3: until the asking node's copy applied it.
- **6c write, 3 data nodes (R3), applied everywhere**: the same write until all three copies have
  applied it (each applier's checkpoint ≥ the write's sequence, watched every 0.2 ms). The three
  copies share this process (and its interpreter lock), so this is an upper bound of three
  separate nodes on a 2-core machine. Floor for 6b and 6c: a raw R3 ``js.publish`` on the same
  cluster.
- **6d local read**: ``router.get_work_item(key)`` (``stale``) of a random item from 6a. Floor: the
  raw point query ``SELECT * FROM tasks WHERE key = ?`` on the same ``estate.db`` through a plain
  ``sqlite3`` connection, interleaved.
- **6e read with a floor**: the same read with ``min_position`` = the last write's position token
  (ES-27: the copy must have applied it), same floor.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.js.api import StorageType, StreamConfig

from shared import estate
from shared.router import EstateRouter

from ._ctx import Ctx
from ._env import PROJECT, NatsCluster, nats_server
from ._result import Row, failed, row_from

__all__ = ["open_copy", "raw_stream", "run", "seed"]


async def open_copy(nc: Client, node_id: str, store: Path, replicas: int) -> estate.Estate:
    """Open one data node's estate copy (logs at ``replicas``) in ``store``; wait until it reached its logs' end.

    Raises:
        RuntimeError: the copy did not reach its logs' end within 30 s.
    """
    est = await estate.open_estate(
        nc.jetstream(timeout=10.0), node_id=node_id, store_dir=store, replicas=replicas
    )
    if not await est.wait_level(30):
        raise RuntimeError(f"{node_id}: the copy did not reach its logs' end")
    return est


async def seed(est: estate.Estate) -> None:
    """Create the project and space ``BEN`` the figures write into (raises RuntimeError if refused)."""
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


async def raw_stream(nc: Client, replicas: int) -> None:
    """Create the floor's stream and wait until it answers a publish.

    A fresh R3 stream has no leader for a moment (infra-facts: a create returns before the
    election), and a publish meanwhile gets "no response from stream": on a loaded 2-core machine
    that moment was long enough to fail the figure, so the first publish is retried for 30 s.
    """
    js = nc.jetstream()
    await js.add_stream(
        StreamConfig(
            name="BENCH_RAW", subjects=["benchraw.>"], storage=StorageType.FILE, num_replicas=replicas
        )
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            await js.publish("benchraw.ready", b"", timeout=2.0)
            return
        except (nats.js.errors.NoStreamResponseError, nats.errors.TimeoutError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


def _seq(result: dict[str, Any]) -> int:
    return int(result["position"]["seq"])


async def _single(url: str, store: Path, n: int, reads: int, warmup: int) -> dict[str, list[float]]:
    nc = await nats.connect(url)
    est = await open_copy(nc, "d1", store / "d1", 1)
    out: dict[str, list[float]] = {k: [] for k in ("write", "pub", "read", "read_floor", "sql")}
    try:
        await seed(est)
        router = EstateRouter(nc, None, node_id="d1", local=lambda: est.service)
        await raw_stream(nc, 1)
        js = nc.jetstream()
        payload = b"x" * 256
        keys: list[str] = []
        token = ""
        for i in range(warmup + n):
            t0 = time.perf_counter()
            await js.publish("benchraw.w", payload)
            t1 = time.perf_counter()
            res = await router.create_work_item(PROJECT, f"Bench item {i}", body="Written by the bench")
            t2 = time.perf_counter()
            keys.append(str(res["object"]["key"]))
            token = str(res["position_token"])
            if i >= warmup:
                out["pub"].append(t1 - t0)
                out["write"].append(t2 - t1)
        db = sqlite3.connect(f"file:{store / 'd1' / 'estate.db'}?mode=ro", uri=True, check_same_thread=False)
        rng = random.Random(6)
        try:
            for i in range(warmup + reads):
                key = rng.choice(keys)
                t0 = time.perf_counter()
                row = db.execute("SELECT * FROM tasks WHERE key = ?", (key,)).fetchone()
                t1 = time.perf_counter()
                got = await router.get_work_item(key)
                t2 = time.perf_counter()
                got_floor = await router.get_work_item(key, min_position=token)
                t3 = time.perf_counter()
                if row is None or got["data"]["key"] != key or got_floor["data"]["key"] != key:
                    raise RuntimeError(f"read of {key} came back wrong")
                if i >= warmup:
                    out["sql"].append(t1 - t0)
                    out["read"].append(t2 - t1)
                    out["read_floor"].append(t3 - t2)
        finally:
            db.close()
    finally:
        await est.close()
        await nc.close()
    return out


async def _triple(urls: list[str], store: Path, n: int, warmup: int) -> dict[str, list[float]]:
    conns = [await nats.connect(u) for u in urls]
    ests: list[estate.Estate] = []
    out: dict[str, list[float]] = {"answered": [], "everywhere": [], "pub": []}
    try:
        for i, nc in enumerate(conns):
            ests.append(await open_copy(nc, f"d{i + 1}", store / f"d{i + 1}", 3))
        await seed(ests[0])
        router = EstateRouter(conns[0], None, node_id="d1", local=lambda: ests[0].service)
        await raw_stream(conns[0], 3)
        js = conns[0].jetstream()
        payload = b"x" * 256
        for i in range(warmup + n):
            t0 = time.perf_counter()
            await js.publish("benchraw.w", payload)
            t1 = time.perf_counter()
            res = await router.create_work_item(PROJECT, f"Fleet item {i}", body="Written by the bench")
            t2 = time.perf_counter()
            seq = _seq(res)
            deadline = time.monotonic() + 30
            while any(e.appliers["tracker"].applied < seq for e in ests):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"write {seq} not applied on every copy within 30 s")
                await asyncio.sleep(0.0002)
            t3 = time.perf_counter()
            if i >= warmup:
                out["pub"].append(t1 - t0)
                out["answered"].append(t2 - t1)
                out["everywhere"].append(t3 - t1)
    finally:
        for e in ests:
            await e.close()
        for nc in conns:
            await nc.close()
    return out


def _ms(xs: list[float]) -> list[float]:
    return [x * 1000 for x in xs]


def run(ctx: Ctx) -> list[Row]:
    """Measure rows 6a..6e."""
    rows: list[Row] = []
    n, reads, warmup = ctx.n(60, 600), ctx.n(200, 2000), ctx.n(5, 20)
    base = {"in_process": True, "writes": n}
    ctx.say(f"figure 6: {n} writes and {reads} reads on 1 data node (R1)")
    try:
        with contextlib.ExitStack() as stack:
            srv = nats_server(stack, ctx.sub("nats"))
            one = asyncio.run(_single(srv.url, ctx.sub("r1"), n, reads, warmup))
        rows.append(
            row_from(
                "6a estate write until applied, 1 data node (R1)",
                "ms",
                _ms(one["write"]),
                "raw R1 publish",
                _ms(one["pub"]),
                parameters={**base, "replicas": 1},
            )
        )
        rparams = {"in_process": True, "reads": reads, "items": n + warmup}
        rows.append(
            row_from(
                "6d local read (stale)",
                "ms",
                _ms(one["read"]),
                "raw SQLite point query",
                _ms(one["sql"]),
                parameters=rparams,
            )
        )
        rows.append(
            row_from(
                "6e read with a floor (min_position)",
                "ms",
                _ms(one["read_floor"]),
                "raw SQLite point query",
                _ms(one["sql"]),
                parameters=rparams,
            )
        )
    except Exception as e:  # noqa: BLE001
        for label in (
            "6a estate write until applied, 1 data node (R1)",
            "6d local read (stale)",
            "6e read with a floor (min_position)",
        ):
            rows.append(failed(label, "ms", f"{type(e).__name__}: {e}", base))
    ctx.say(f"figure 6: {n} writes on 3 data nodes (R3)")
    labels = (
        "6b estate write answered, 3 data nodes (R3)",
        "6c estate write applied on all 3 data nodes (R3)",
    )
    try:
        with contextlib.ExitStack() as stack:
            cluster = NatsCluster(ctx.sub("cluster"))
            stack.callback(cluster.stop)
            three = asyncio.run(_triple([m.url for m in cluster.members], ctx.sub("r3"), n, warmup))
        p3 = {**base, "replicas": 3, "data_nodes": 3, "same_process": True}
        rows.append(
            row_from(
                labels[0], "ms", _ms(three["answered"]), "raw R3 publish", _ms(three["pub"]), parameters=p3
            )
        )
        rows.append(
            row_from(
                labels[1], "ms", _ms(three["everywhere"]), "raw R3 publish", _ms(three["pub"]), parameters=p3
            )
        )
    except Exception as e:  # noqa: BLE001
        rows += [failed(label, "ms", f"{type(e).__name__}: {e}", base) for label in labels]
    rows.sort(key=lambda r: r.figure)
    return rows
