"""Figure 2: mailbox creation per seat at boot, 100 and 1 000 seats, R1 and R3, sequential and concurrent
[floor: raw ``js.add_consumer`` of the same consumers].

What is measured (in-process, the same code a node runs at boot: ``shared.bus.Bus.ensure_mailboxes``
on the ``CREWLET_AGENT`` stream that ``Bus.provision`` creates). A seat's mailbox is two durable
pull consumers (inbox and control, FL-77, FL-78), so one seat costs two consumer creates:

- **sequential**: a ``Bus`` with ``concurrency=1``, one ``ensure_mailboxes([handle])`` per seat, in
  order; each seat is one sample (so growth from the 1st to the 1 000th consumer shows in the p99).
  Floor: the same two ``ConsumerConfig`` created with raw ``js.add_consumer`` on a twin stream of
  the same shape (interest retention, file storage, same replicas), interleaved seat by seat (on
  R3 on every 4th seat only, every 8th at 1 000 seats, to keep the run short).
- **concurrent**: ``ensure_mailboxes(all handles)`` with the bus's default 64 creates in flight, as
  at boot; the sample is the boot's wall time divided by the seats, one sample per boot (3 boots,
  1 in a quick run and at 1 000 seats on R3, where one boot is ~90 s: there the p99 is the median). Floor: the same 2 × seats raw creates with 64 in flight. Each boot
  starts from a new stream (the previous one is deleted with its consumers).

R3 consumers on an interest stream must be R3 (infra-facts S2: each is its own Raft group, about
60 ms to create), which is why the design creates them concurrently at boot.

At 1 000 seats (2 000 consumers) the stream is pre-created with ``max_consumers`` raised: nats-server
2.15.1 caps a stream that sets none at 1 000 consumers, so as the engine stands its boot fails at
seat 500 with 10026 "maximum consumers limit reached" (``bench/_env.py``, ``AGENT_MAX_CONSUMERS``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import nats
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig

from shared.bus import AGENT_STREAM, Bus, control_group, control_subject, inbox_group, inbox_subject

from ._ctx import Ctx
from ._env import AGENT_MAX_CONSUMERS, NatsCluster, handles, nats_server, precreate_agent_stream
from ._result import Row, failed, row_from

__all__ = ["concurrent_boots", "run"]

_FLOOR_STREAM = "BENCH_FLOOR_AGENT"
_FLOOR_NAME = "raw add_consumer ×2 per seat"
_GATE = 64


async def _floor_stream(js: JetStreamContext, replicas: int) -> None:
    with contextlib.suppress(nats.js.errors.NotFoundError):
        await js.delete_stream(_FLOOR_STREAM)
    await js.add_stream(
        StreamConfig(
            name=_FLOOR_STREAM,
            subjects=["benchfloor.>"],
            retention=RetentionPolicy.INTEREST,
            storage=StorageType.FILE,
            num_replicas=replicas,
            max_consumers=AGENT_MAX_CONSUMERS,
        )
    )


async def _fresh_agent(bus: Bus, js: JetStreamContext, replicas: int, seats: int) -> None:
    with contextlib.suppress(nats.js.errors.NotFoundError):
        await js.delete_stream(AGENT_STREAM)
    if seats > 500:  # the server's default 1 000 consumers per stream (see _env.AGENT_MAX_CONSUMERS)
        await precreate_agent_stream(js, replicas=replicas)
    await bus.provision(replicas=replicas)


def _floor_configs(bus: Bus, handle: str) -> list[tuple[str, str]]:
    return [(inbox_group(handle), inbox_subject(handle)), (control_group(handle), control_subject(handle))]


async def _raw_create(bus: Bus, js: JetStreamContext, group: str, topic: str) -> None:
    cfg = bus.consumer_config(group, topic.replace("crewlet.agent.", "benchfloor.", 1))
    await js.add_consumer(_FLOOR_STREAM, cfg)


async def _sequential(
    nc: Client, replicas: int, seats: int, floor_every: int
) -> tuple[list[float], list[float]]:
    js = nc.jetstream(timeout=30.0)
    bus = Bus(nc, js, concurrency=1)
    await _fresh_agent(bus, js, replicas, seats)
    await _floor_stream(js, replicas)
    fig: list[float] = []
    floor: list[float] = []
    for i, h in enumerate(handles(seats)):
        t0 = time.perf_counter()
        await bus.ensure_mailboxes([h])
        fig.append(time.perf_counter() - t0)
        if i % floor_every == 0:
            t0 = time.perf_counter()
            for group, topic in _floor_configs(bus, h):
                await _raw_create(bus, js, group, topic)
            floor.append(time.perf_counter() - t0)
    await js.delete_stream(AGENT_STREAM)
    await js.delete_stream(_FLOOR_STREAM)
    return fig, floor


async def concurrent_boots(
    nc: Client, replicas: int, seats: int, boots: int
) -> tuple[list[float], list[float]]:
    """``boots`` boots of ``seats`` seats' mailboxes, 64 creates in flight, each beside the raw floor.

    Returns:
        (figure, floor): seconds per seat of each boot (the boot's wall time / ``seats``).
    """
    js = nc.jetstream(timeout=30.0)
    bus = Bus(nc, js, concurrency=_GATE)
    hs = handles(seats)
    fig: list[float] = []
    floor: list[float] = []
    for _ in range(boots):
        await _fresh_agent(bus, js, replicas, seats)
        fig.append(await bus.ensure_mailboxes(hs) / seats)
        await js.delete_stream(AGENT_STREAM)
        await _floor_stream(js, replicas)
        gate = asyncio.Semaphore(_GATE)

        async def one(group: str, topic: str, gate: asyncio.Semaphore = gate) -> None:
            async with gate:
                await _raw_create(bus, js, group, topic)

        t0 = time.perf_counter()
        await asyncio.gather(*(one(g, t) for h in hs for g, t in _floor_configs(bus, h)))
        floor.append((time.perf_counter() - t0) / seats)
        await js.delete_stream(_FLOOR_STREAM)
    return fig, floor


async def _on(
    servers: list[str], fn: str, replicas: int, seats: int, k: int
) -> tuple[list[float], list[float]]:
    nc = await nats.connect(servers=servers, connect_timeout=5)
    try:
        if fn == "sequential":
            return await _sequential(nc, replicas, seats, k)
        return await concurrent_boots(nc, replicas, seats, k)
    finally:
        await nc.close()


def run(ctx: Ctx) -> list[Row]:
    """Measure figure 2; return one row per (seats, replicas, mode)."""
    sizes = [100] if ctx.quick else [100, 1000]
    rows: list[Row] = []
    letters = iter("abcdefgh")
    for replicas in (1, 3):
        tag = f"R{replicas}"
        with contextlib.ExitStack() as stack:
            try:
                if replicas == 1:
                    servers = [nats_server(stack, ctx.sub("r1")).url]
                else:
                    cluster = NatsCluster(ctx.sub("r3"))
                    stack.callback(cluster.stop)
                    servers = [m.url for m in cluster.members]
            except Exception as e:  # noqa: BLE001
                for seats in sizes:
                    for mode in ("sequential", "concurrent"):
                        rows.append(
                            failed(
                                f"2{next(letters)} mailboxes {seats} seats {tag} {mode}", "ms/seat", str(e)
                            )
                        )
                continue
            for seats in sizes:
                for mode in ("sequential", "concurrent"):
                    label = f"2{next(letters)} mailboxes, {seats} seats, {tag}, {mode}"
                    if mode == "sequential":
                        k = 8 if (replicas == 3 and seats >= 1000) else (4 if replicas == 3 else 1)
                        params: dict[str, Any] = {"floor_every_nth_seat": k}
                    else:
                        k = 1 if ctx.quick or (replicas == 3 and seats >= 1000) else 3
                        params = {"boots": k, "in_flight": _GATE}
                    if seats > 500:
                        params["workaround"] = (
                            f"CREWLET_AGENT pre-created with max_consumers {AGENT_MAX_CONSUMERS}: the server default "
                            "(1 000 per stream) stops the engine's own boot at 500 seats (10026)"
                        )
                    params.update(
                        {"seats": seats, "replicas": replicas, "consumers_per_seat": 2, "in_process": True}
                    )
                    ctx.say(f"figure 2: {label}")
                    try:
                        fig, floor = asyncio.run(_on(servers, mode, replicas, seats, k))
                    except Exception as e:  # noqa: BLE001
                        rows.append(failed(label, "ms/seat", f"{type(e).__name__}: {e}", params))
                        continue
                    rows.append(
                        row_from(
                            label,
                            "ms/seat",
                            [x * 1000 for x in fig],
                            _FLOOR_NAME,
                            [x * 1000 for x in floor],
                            parameters=params,
                        )
                    )
    return rows
