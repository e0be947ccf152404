"""Figure 14: a seat's memory hydrated where the seat lands (AG-7) [floor: the raw replay of the same subjects].

What is measured (in-process, one nats-server, the code a satellite holder runs):

- Setup: ``StateLog.provision`` makes the five log streams; for each size N, N ``agent_diary`` rows
  of one seat (``bench-N``, ~300 B of content each, the records :class:`~shared.memory.MemoryWriter`
  publishes) are published straight onto ``CREWLET_MEMORY`` (pipelined, 500 in flight).
- **14a/b/c hydration of N rows**: ``shared.memory.hydrate_scratch``: an ephemeral ordered push
  consumer on ``crewlet.memory.<handle>.>`` (one record per subject: the log is compacted), its
  pending count read, every record decoded and applied to the seat's scratch cache, the consumer
  deleted. Floor: the same ordered consumer made with the raw library, the same N messages counted,
  not decoded. (A pull consumer fetching the same messages measured 2-3x slower than either.)
  Interleaved, same run. A data node hydrates by waiting for its applier to pass the log's last
  sequence (it applies the memory log with everything else), which costs one ``stream_info``; it is
  not a figure.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import nats
from nats.js import api as jsapi

from shared.estate.domains.memory import diary_id, memory_record, memory_subject
from shared.estate.log import StateLog
from shared.memory import hydrate_scratch

from ._ctx import Ctx
from ._env import nats_server
from ._result import Row, failed, row_from

__all__ = ["run"]

_TEXT = "The lead prefers releases on Tuesdays; Bo signs off production deploys after the smoke run. "


async def _publish(js: Any, handle: str, n: int) -> None:
    for start in range(0, n, 500):
        recs = []
        for i in range(start, min(n, start + 500)):
            content = f"{i}: {_TEXT}{_TEXT}{_TEXT}"
            rid = diary_id(f"agent-{handle}", content)
            row = {"id": rid, "kind": "diary_long", "content": content, "retrieval_count": 0}
            subject = memory_subject(handle, "agent_diary", rid)
            recs.append(
                memory_record(
                    subject=subject, row=row, writer="bench", at=int(time.time() * 1e6), immutable=True
                )
            )
        await asyncio.gather(
            *(
                js.publish(r.subject, r.encode(), headers={"Nats-Msg-Id": r.op_id}, stream="CREWLET_MEMORY")
                for r in recs
            )
        )


async def _raw(js: Any, handle: str, n: int) -> None:
    done = asyncio.Event()
    got = 0

    async def cb(_m: Any) -> None:
        nonlocal got
        got += 1
        if got >= n:
            done.set()

    sub = await js.subscribe(
        f"crewlet.memory.{handle}.>",
        stream="CREWLET_MEMORY",
        cb=cb,
        ordered_consumer=True,
        config=jsapi.ConsumerConfig(deliver_policy=jsapi.DeliverPolicy.ALL),
        pending_msgs_limit=-1,
        pending_bytes_limit=-1,
    )
    await asyncio.wait_for(done.wait(), 60.0)
    await sub.unsubscribe()


async def _measure(url: str, sizes: list[int], samples: int) -> dict[int, tuple[list[float], list[float]]]:
    nc = await nats.connect(url, name="bench-memory")
    out: dict[int, tuple[list[float], list[float]]] = {}
    try:
        js = nc.jetstream(timeout=10.0)
        await StateLog(js).provision()
        for n in sizes:
            handle = f"bench-{n}"
            await _publish(js, handle, n)
            hyd: list[float] = []
            raw: list[float] = []
            for _ in range(samples):
                t0 = time.perf_counter()
                cache = await hydrate_scratch(js, handle)
                hyd.append((time.perf_counter() - t0) * 1000)
                if len(cache) != n:
                    raise RuntimeError(f"hydrated {len(cache)} rows of {n}")
                t0 = time.perf_counter()
                await _raw(js, handle, n)
                raw.append((time.perf_counter() - t0) * 1000)
            out[n] = (hyd, raw)
    finally:
        with contextlib.suppress(Exception):
            await nc.close()
    return out


def run(ctx: Ctx) -> list[Row]:
    """Measure rows 14a.. (one per size)."""
    sizes = [10, 1_000] if ctx.quick else [10, 1_000, 10_000]
    samples = ctx.n(5, 20)
    labels = {n: f"14{'abc'[i]} memory hydration, {n} rows" for i, n in enumerate(sizes)}
    params: dict[str, Any] = {"in_process": True, "replicas": 1, "row_bytes": 300, "samples": samples}
    ctx.say(f"figure 14: memory hydration at {sizes} rows x{samples}")
    try:
        with contextlib.ExitStack() as stack:
            srv = nats_server(stack, ctx.sub("nats"))
            got = asyncio.run(_measure(srv.url, sizes, samples))
    except Exception as e:  # noqa: BLE001
        return [failed(labels[n], "ms", f"{type(e).__name__}: {e}", params) for n in sizes]
    return [
        row_from(
            labels[n],
            "ms",
            got[n][0],
            "raw replay of the same subjects (no decode)",
            got[n][1],
            parameters={**params, "rows": n},
        )
        for n in sizes
    ]
