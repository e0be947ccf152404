"""Figure 1: seat lease claim and renew, R1 and R3 [floor: a raw nats-py KV compare-and-set on the same bucket].

What is measured (in-process, the same code a node runs: ``shared.leases.SeatLeases`` over
``shared.coordination.NatsCoordination`` built by ``coordination.provision``):

- **claim**: ``SeatLeases.acquire(handle)`` of a seat nobody holds, until it returns the grant. By
  design (FL-50) a claim is three writes (create the ownership key in a CLAIMING state, advance the
  epoch counter by CAS, commit the epoch by CAS) plus the counter's read (the CAS needs its
  revision); a free seat's ownership key is created without reading it first.
- **renew**: ``SeatLeases.renew(grant)``, one CAS at the held revision (FL-53): a ratio near 1.

The claim's floor is the protocol's three writes raw, on the buckets it writes, over the same
connection: ``kv.create`` of a record of the same size on ``<prefix>_leases``, ``kv.update(last=)``
of an existing counter on ``<prefix>_epochs``, ``kv.update(last=)`` of the created key (the single
CAS is in the parameters as ``single_cas_ms``). The renew's floor is ``kv.update(key, value,
last=revision)`` on ``<prefix>_leases``. Floors are interleaved one-for-one with the figure's
operations. R1 is one nats-server; R3 the 3-member cluster of ``tests/support/cluster.py``, the
client connected to one member (which one, and which member leads the bucket, is in the
parameters: a follower adds a hop).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from datetime import timedelta
from typing import Any

import nats
from nats.aio.client import Client

from shared import coordination, leases
from shared.runtime import PROTOCOL_VERSION

from ._ctx import Ctx
from ._env import NatsCluster, nats_server
from ._result import Row, failed, row_from

__all__ = ["run"]

_TTL = timedelta(seconds=45)
_FLOOR = "raw KV CAS, same bucket"
_FLOOR3 = "raw create + CAS + CAS (FL-50's three writes), same buckets"


async def _measure(
    nc: Client, replicas: int, n: int, warmup: int
) -> tuple[list[float], list[float], list[float], list[float], dict[str, str]]:
    js = nc.jetstream(timeout=5.0)
    prefix = f"bench{replicas}"
    coord = await coordination.provision(js, prefix=prefix, replicas=replicas, lease_ttl=_TTL)
    owner = "bench-a:0a0b0c0d"
    sl = leases.SeatLeases(coord, node_id="bench-a", owner=owner, protocol=PROTOCOL_VERSION, ttl=_TTL)
    kv = await js.key_value(f"{prefix}_leases")
    value = leases.LeaseRecord("seat:floor", owner, "bench-a", 7, PROTOCOL_VERSION, {}, 45.0).encode()
    rev = await kv.put("seat.floor", value)
    epochs = await js.key_value(f"{prefix}_epochs")
    counter = leases.EpochRecord(7, "bench-a", owner, "0a0b0c0d0e0f").encode()
    claims: list[float] = []
    renews: list[float] = []
    floor: list[float] = []
    floor3: list[float] = []
    for i in range(warmup + n):
        keep = i >= warmup
        # the claim's floor: its three writes raw (FL-50), each on the bucket the protocol writes
        # (create, counter CAS, commit CAS); the counter exists beforehand, as a re-claimed seat's does
        erev = await epochs.create(f"floor.f{i:05d}", counter)
        f0 = time.perf_counter()
        crev = await kv.create(f"floor.f{i:05d}", value)
        await epochs.update(f"floor.f{i:05d}", counter, last=erev)
        await kv.update(f"floor.f{i:05d}", value, last=crev)
        f1 = time.perf_counter()
        t0 = time.perf_counter()
        rev = await kv.update("seat.floor", value, last=rev)
        t1 = time.perf_counter()
        grant = await sl.acquire(f"b{i:05d}")
        t2 = time.perf_counter()
        if grant is None:
            raise RuntimeError(f"claim of free seat b{i:05d} was refused")
        rev = await kv.update("seat.floor", value, last=rev)
        t3 = time.perf_counter()
        renewed = await sl.renew(grant)
        t4 = time.perf_counter()
        if renewed is None:
            raise RuntimeError(f"renew of b{i:05d} lost the seat")
        if keep:
            floor += [t1 - t0, t3 - t2]
            floor3.append(f1 - f0)
            claims.append(t2 - t1)
            renews.append(t4 - t3)
    info = await js.stream_info(f"KV_{prefix}_leases")
    where = {
        "connected_to": str(nc._server_info.get("server_name", "")),
        "bucket_leader": str(info.cluster.leader if info.cluster else ""),
    }
    return claims, renews, floor, floor3, where


async def _run_on(
    servers: list[str], replicas: int, n: int, warmup: int
) -> tuple[list[float], list[float], list[float], list[float], dict[str, str]]:
    nc = await nats.connect(servers=servers, connect_timeout=5)
    try:
        return await _measure(nc, replicas, n, warmup)
    finally:
        await nc.close()


def run(ctx: Ctx) -> list[Row]:
    """Measure figure 1 at R1 and R3; return rows 1a..1d."""
    n = ctx.n(60, 600)
    warmup = ctx.n(10, 50)
    rows: list[Row] = []
    for replicas in (1, 3):
        tag = f"R{replicas}"
        params: dict[str, Any] = {
            "replicas": replicas,
            "samples_per_op": n,
            "warmup": warmup,
            "lease_ttl_s": 45,
            "in_process": True,
        }
        try:
            with contextlib.ExitStack() as stack:
                if replicas == 1:
                    servers = [nats_server(stack, ctx.sub("r1")).url]
                else:
                    cluster = NatsCluster(ctx.sub("r3"))
                    stack.callback(cluster.stop)
                    servers = [m.url for m in cluster.members]
                ctx.say(f"figure 1 {tag}: {n} claims and renews")
                claims, renews, floor, floor3, where = asyncio.run(_run_on(servers, replicas, n, warmup))
        except Exception as e:  # noqa: BLE001 - a figure that cannot be measured is a failed row
            rows += [
                failed(f"1{'ac'[replicas == 3]} lease claim, {tag}", "ms", f"{type(e).__name__}: {e}", params)
            ]
            continue
        params.update(where)
        ms = [x * 1000 for x in claims]
        rows.append(
            row_from(
                f"1{'ac'[replicas == 3]} lease claim, {tag}",
                "ms",
                ms,
                _FLOOR3,
                [x * 1000 for x in floor3],
                parameters={
                    **params,
                    "design": "3 writes (FL-50) + the counter's read per claim of a free seat",
                    "single_cas_ms": round(statistics.median(floor) * 1000, 3),
                },
            )
        )
        rows.append(
            row_from(
                f"1{'bd'[replicas == 3]} lease renew, {tag}",
                "ms",
                [x * 1000 for x in renews],
                _FLOOR,
                [x * 1000 for x in floor],
                parameters={**params, "design": "1 CAS per renew (FL-53): ~1 floor"},
            )
        )
    return rows
