"""Figure 10: a config activation until every node applied it, nudge path, 3 nodes on R3
[floor: a raw KV put → watch delivery on the same cluster].

What it measures: a 3-member nats-server cluster and three real node processes (all roles,
``stream.type: nats``, ``replicas: 3``, ``embedded-kv`` coordination at the default 45 s lease TTL,
so the reconcile poll is 15 s and only the ``crewlet.config.revision_activated`` nudge makes an
activation land fast; the offline provider, 9 idle seats).

1. **the figure**: from just before ``PUT /config`` (a new mission each sample) on node ``f1``
   until the ``crewlet_status`` bucket, watched from the benchmark through another member, shows
   all three nodes reporting the new epoch applied ``ok``. It covers validation, the revision
   stored in history, the pointer's compare-and-set, the broadcast, each node's apply (secret
   store read, validation, provider clients, mailboxes, the swap) and its status write;
2. **the floor**: a raw ``kv.put`` on an R3 bucket through member 1 until a watcher connected
   through member 2 receives it, interleaved with the figure's samples.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any

import httpx
import nats
import yaml
from nats.js.api import KeyValueConfig

from ._ctx import Ctx
from ._env import AUTH, NatsCluster, start_node, write_company
from ._result import Row, failed, row_from

__all__ = ["run"]

_SEATS = 9


async def _status_watch(url: str) -> tuple[Any, Any]:
    nc = await nats.connect(url, connect_timeout=5)
    kv = await nc.jetstream(timeout=5.0).key_value("crewlet_status")
    return nc, await kv.watchall()


async def _applied_everywhere(watcher: Any, epoch: int, nodes: set[str], seen: dict[str, int]) -> None:
    while not all(seen.get(n, 0) >= epoch for n in nodes):
        entry = await watcher.updates(timeout=30)
        if entry is None or entry.value is None:
            continue
        data = json.loads(entry.value)
        if data.get("status") == "ok":
            seen[entry.key] = int(data.get("applied_epoch", 0))


async def _floor_sample(put_url: str, watch_url: str, i: int) -> float:
    a = await nats.connect(put_url, connect_timeout=5)
    b = await nats.connect(watch_url, connect_timeout=5)
    try:
        kv_a = await a.jetstream(timeout=5.0).key_value("bench_floor")
        kv_b = await b.jetstream(timeout=5.0).key_value("bench_floor")
        watcher = await kv_b.watch(f"k{i}")
        await watcher.updates(timeout=1)  # type: ignore[no-untyped-call]  # the initial "no value" marker
        t0 = time.perf_counter()
        await kv_a.put(f"k{i}", b"x")
        while True:
            entry = await watcher.updates(timeout=10)  # type: ignore[no-untyped-call]
            if entry is not None and entry.value == b"x":
                return time.perf_counter() - t0
    finally:
        await a.close()
        await b.close()


async def _measure(
    ctx: Ctx, cluster: NatsCluster, nodes: dict[str, Any], company: Path
) -> tuple[list[float], list[float]]:
    members = [m.url for m in cluster.members]
    setup = await nats.connect(members[0], connect_timeout=5)
    await setup.jetstream(timeout=5.0).create_key_value(KeyValueConfig(bucket="bench_floor", replicas=3))
    await setup.close()
    nc, watcher = await _status_watch(members[1])
    doc = yaml.safe_load(company.read_text())
    seen: dict[str, int] = {}
    figure: list[float] = []
    floor: list[float] = []
    try:
        async with httpx.AsyncClient(base_url=nodes["f1"].url, headers=AUTH, timeout=60) as client:
            for i in range(ctx.n(3, 15)):
                doc["mission"] = f"bench mission {i}"
                t0 = time.perf_counter()
                r = await client.put("/config", json=doc, headers={"X-Summary": f"bench {i}"})
                if r.status_code != 201:
                    raise RuntimeError(f"PUT /config answered {r.status_code}: {r.text}")
                await _applied_everywhere(watcher, int(r.json()["epoch"]), set(nodes), seen)
                figure.append((time.perf_counter() - t0) * 1000)
                floor.append(await _floor_sample(members[0], members[1], i) * 1000)
    finally:
        with contextlib.suppress(Exception):
            await watcher.stop()
        await nc.close()
    return figure, floor


def run(ctx: Ctx) -> list[Row]:
    """Row 10: activation → applied on all three nodes (nudge path), beside raw KV put → watch."""
    label = "10 config activation -> applied on 3 nodes (nudge), R3"
    params: dict[str, Any] = {"nodes": 3, "replicas": 3, "seats": _SEATS, "lease_ttl_s": 45, "poll_s": 15}
    try:
        with contextlib.ExitStack() as stack:
            cluster = NatsCluster(ctx.sub("cluster"))
            stack.callback(cluster.stop)
            company = write_company(ctx.sub("company") / "company.yaml", seats=_SEATS)
            nodes = {}
            for name in ("f1", "f2", "f3"):
                ctx.say(f"figure 10: starting {name}")
                nodes[name] = start_node(
                    stack,
                    ctx.root,
                    node_id=name,
                    company=company,
                    nats_url=cluster.urls,
                    replicas=3,
                    ready_timeout=180,
                )
            figure, floor = asyncio.run(_measure(ctx, cluster, nodes, company))
    except Exception as e:  # noqa: BLE001
        return [failed(label, "ms", f"{type(e).__name__}: {e}", params)]
    return [
        row_from(
            label, "ms", figure, "raw KV put -> watch delivery, R3, another member", floor, parameters=params
        )
    ]
