"""Figure 4: takeover after ``kill -9`` with a given lease TTL, the time until every seat is owned again,
30 and 300 seats over 3 nodes [floor: the TTL itself + one sweep, the design's bound (FL-131)].

It stands on the fleet's fair-share placement (FL-56): three nodes split the seats between them.
The claim limiter counts only seats that start MCP children (at most 4 per node per 5 s sweep);
these seats start none, so a survivor absorbs its 50 of 300 seats on the first sweep after the TTL
(before issue 13 every claim counted and 50 seats took ~13 sweeps).

What it measures: a 3-member nats-server cluster (``tests/support/cluster.py``) and three
real node processes (all roles, ``stream.type: nats``, ``replicas: 3``, ``embedded-kv``
coordination with ``lease_ttl_seconds`` = the TTL; the offline provider, so the seats are idle):

1. start-up (:func:`_start_fleet`): the nodes boot together and the benchmark waits until every
   seat is owned and every node holds some (the leases bucket read through
   ``shared.coordination``, every 0.2 s);
2. the node holding the most seats is killed with SIGKILL; at that instant a sentinel key is
   written to the ``leases`` bucket (whose age is the TTL);
3. **the figure**: the time from the kill until every seat's lease names a surviving node;
4. **the floor**: the time from the kill until the sentinel key has aged out of the bucket (the
   TTL as the broker applies it, measured in the same run) + one placement sweep (5 s, FL-56).

A size is one trial (a fleet has to be placed again before the next kill), so median and p99 are
the same number unless ``trials`` is raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import nats

from shared import coordination, leases

from ._ctx import Ctx
from ._env import NatsCluster, Node, free_port, node_file, write_company
from ._result import Row, failed, row_from

__all__ = ["run"]

"""Why the figure is not measured by default."""

_SWEEP = 5.0  # FL-56: the placement sweep interval
_TTL = 10.0  # seconds; the watchdog threshold equals the TTL, so a loaded 2-core machine needs room


async def _owners(urls: str, ttl: float) -> dict[str, str]:
    """Seat handle → node id of its current lease (seats without a lease are absent)."""
    nc = await nats.connect(servers=urls.split(","), connect_timeout=5)
    try:
        coord = await coordination.provision(
            nc.jetstream(timeout=5.0), replicas=3, lease_ttl=timedelta(seconds=ttl)
        )
        out = {}
        for e in await coord.entries("leases", "seat."):
            rec = leases.LeaseRecord.decode(e.key, e.value)
            if rec.epoch > 0:
                out[e.key[len("seat.") :]] = rec.node
        return out
    finally:
        await nc.close()


async def _put_sentinel(urls: str, ttl: float) -> None:
    nc = await nats.connect(servers=urls.split(","), connect_timeout=5)
    try:
        kv = await nc.jetstream(timeout=5.0).key_value("crewlet_leases")
        await kv.put("bench.sentinel", b"1")
    finally:
        await nc.close()


async def _sentinel_gone(urls: str) -> bool:
    nc = await nats.connect(servers=urls.split(","), connect_timeout=5)
    try:
        kv = await nc.jetstream(timeout=5.0).key_value("crewlet_leases")
        try:
            entry = await kv.get("bench.sentinel")
        except Exception:  # noqa: BLE001 - KeyNotFoundError and its kin: aged out
            return True
        return entry.value is None
    finally:
        await nc.close()


def _start_fleet(
    stack: contextlib.ExitStack, root: Path, cluster: NatsCluster, seats: int, ttl: float
) -> dict[str, Node]:
    """Start three nodes on the cluster and wait until the seats are spread over all three.

    Raises:
        RuntimeError: the seats were not all owned and spread within the time the fair share needs
            (ceil(seats / 3) claims at 4 per 5 s sweep, FL-56) plus a minute.
    """
    company = write_company(root / "company" / "company.yaml", seats=seats)
    nodes: dict[str, Node] = {}
    for name in ("f1", "f2", "f3"):
        d = root / name
        port = free_port()
        cfg = node_file(
            d,
            node_id=name,
            port=port,
            stream={"type": "nats", "url": cluster.urls, "replicas": 3},
            coordination={"type": "embedded-kv", "lease_ttl_seconds": ttl},
        )
        node = Node(["node", "--node", str(cfg), "--company", str(company)], dir=d, port=port)
        stack.callback(node.stop)
        nodes[name] = node
    for node in nodes.values():
        node.wait_ready(180)
    deadline = time.monotonic() + 60 + _SWEEP * (seats / 3 / 4 + 2)
    while time.monotonic() < deadline:
        owners = asyncio.run(_owners(cluster.urls, ttl))
        spread = Counter(owners.values())
        if len(owners) == seats and all(spread.get(n, 0) > 0 for n in nodes):
            return nodes
        time.sleep(0.5)
    raise RuntimeError(
        f"seats not spread over the fleet in time: {dict(Counter(asyncio.run(_owners(cluster.urls, ttl)).values()))}"
    )


def _trial(ctx: Ctx, root: Path, seats: int, ttl: float) -> tuple[float, float, dict[str, Any]]:
    with contextlib.ExitStack() as stack:
        cluster = NatsCluster(root / "cluster")
        stack.callback(cluster.stop)
        ctx.say(f"figure 4: placing {seats} seats over 3 nodes")
        nodes = _start_fleet(stack, root, cluster, seats, ttl)
        before = Counter(asyncio.run(_owners(cluster.urls, ttl)).values())
        victim = max(nodes, key=lambda n: before.get(n, 0))
        survivors = {n for n in nodes if n != victim}
        ctx.say(f"figure 4: kill -9 {victim} holding {before[victim]} seats")
        t_kill = time.monotonic()
        nodes[victim].signal(signal.SIGKILL)
        asyncio.run(_put_sentinel(cluster.urls, ttl))
        expired: float | None = None
        deadline = t_kill + ttl + 120 + _SWEEP * (seats / 2 / 4 + 2)
        while time.monotonic() < deadline:
            if expired is None and asyncio.run(_sentinel_gone(cluster.urls)):
                expired = time.monotonic() - t_kill
            owners = asyncio.run(_owners(cluster.urls, ttl))
            if len(owners) == seats and set(owners.values()) <= survivors:
                took = time.monotonic() - t_kill
                if expired is None:
                    expired = took
                return (
                    took,
                    expired + _SWEEP,
                    {"victim_held": before[victim], "placement_before": dict(before)},
                )
            time.sleep(0.1)
        raise RuntimeError(f"seats not all owned by survivors {ttl + 120:.0f} s after the kill")


def run(ctx: Ctx) -> list[Row]:
    """Rows 4a (30 seats) and 4b (300 seats; the quick run measures 30 only)."""
    sizes = [30] if ctx.quick else [30, 300]
    rows: list[Row] = []
    for letter, seats in zip("ab", sizes, strict=False):
        label = f"4{letter} takeover after kill -9, {seats} seats over 3 nodes, TTL {_TTL:g} s"
        params: dict[str, Any] = {
            "seats": seats,
            "nodes": 3,
            "lease_ttl_s": _TTL,
            "sweep_s": _SWEEP,
            "replicas": 3,
        }
        try:
            took, floor, info = _trial(ctx, ctx.sub(f"s{seats}"), seats, _TTL)
        except Exception as e:  # noqa: BLE001
            rows.append(failed(label, "s", f"{type(e).__name__}: {e}", params))
            continue
        params.update(info)
        rows.append(
            row_from(label, "s", [took], "measured TTL expiry + one sweep", [floor], parameters=params)
        )
    return rows
