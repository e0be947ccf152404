"""Figure 3: clean handover, from the releasing node's NAK to the successor's first delivery of the
unacked message [floor: a raw NAK → redelivery on one durable].

What is measured (in-process, two "nodes" in one process, each with its own NATS connection,
coordination store, bus, the seats role's real ``Dispatcher`` and a ``SeatHost`` wired exactly as
``services/seats/app.py`` wires them; R1). One seat moves back and forth between the two:

1. the holder is draining (``ctx.draining``): it fetches the seat's next inbox message, its
   dispatcher screens it and raises ``Deferred``, and the mailbox NAKs it — **t0** is that NAK;
2. the holder drains its seat host (``SeatHost.stop(reason="drain")``: the loop ends, the mailbox
   detaches, the lease is deleted at its revision);
3. the successor claims the seat, attaches the mailbox and fetches — **t1** is the moment its fetch
   returns the NAKed message (the stream sequence is checked). Its dispatcher then finds the
   message in the completion ledger (written before t0, outside the interval) and acks it, so no
   turn runs.

Two rows:

- **3a**: the successor's placement sweep runs on its own 5 s timer (FL-56) only — a fleet without
  the release announcement: the figure includes waiting for that sweep. Each trial starts at a
  random phase of the successor's timer (uniform over 0-5 s, seeded), as a drain would.
- **3b**: the successor sweeps the moment the holder's release is done — what a node does since a
  voluntary release is announced on ``crewlet.seats.released`` (``services/seats``): the
  handover's own mechanics (loop end, detach, lease delete, claim of 3 writes + 2 reads, attach,
  fetch).

The floor: a message fetched on one connection and NAKed while a second connection bound to the same
durable has a fetch waiting (infra-facts §2: 0.14-0.18 ms), interleaved trial by trial.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import nats
import nats.errors
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StreamConfig

from services.seats.dispatcher import Dispatcher
from shared import coordination, records
from shared.bus import Bus, Delivery, Envelope, Mailbox
from shared.config import NodeConfig, OrgModel, load_company_file, resolve_secrets
from shared.leases import Ledger, SeatHost
from shared.runtime import PROTOCOL_VERSION, NodeContext
from shared.turns import TurnEngine

from ._ctx import Ctx
from ._env import handles, nats_server, write_company
from ._result import Row, failed, row_from

__all__ = ["run"]

_TTL = timedelta(seconds=45)
_FLOOR = "raw NAK → redelivery, one durable"


class _Node:
    """One in-process node: connection, coordination, bus, dispatcher, seat host."""

    def __init__(self, nc: Client, ctx: NodeContext, bus: Bus, disp: Dispatcher, host: SeatHost) -> None:
        self.nc = nc
        self.ctx = ctx
        self.bus = bus
        self.disp = disp
        self.host = host


def _no_engine() -> TurnEngine:
    # The dispatcher asks for the engine before its drain check; no turn runs in this figure.
    return cast(TurnEngine, None)


async def _node(name: str, url: str, company: Any, seat: str, store: Path, marks: dict[str, Any]) -> _Node:
    nc = await nats.connect(url, name=name)
    js = nc.jetstream(timeout=10.0)
    ctx = NodeContext(NodeConfig.model_validate({"node": {"id": name}}))
    ctx.coord = await coordination.provision(js, replicas=1, lease_ttl=_TTL)
    ctx.company = company  # the dispatcher reads the org; no control plane runs in this figure
    ctx.resolved, _ = resolve_secrets(company, {})
    ctx.org = OrgModel.from_company(ctx.resolved)
    fence: dict[str, Any] = {"f": None}
    bus = Bus(nc, js, fence=lambda h, e: bool(fence["f"] and fence["f"](h, e)))
    await bus.provision(replicas=1)
    await bus.ensure_mailboxes([seat])
    attach = bus.attach

    async def attach_timed(handle: str, epoch: int, **kw: Any) -> Mailbox:
        if "t0" in marks and "claimed" not in marks:
            marks["claimed"] = time.perf_counter()  # on_acquire: the lease is ours
        box = await attach(handle, epoch, **kw)
        if "t0" in marks and "attached" not in marks:
            marks["attached"] = time.perf_counter()
        fetch_one, nak = box._fetch_one, box.nak

        async def fetch_timed(wait: float) -> Delivery | None:
            d = await fetch_one(wait)
            if d is not None and d.stream_seq == marks.get("seq") and "t0" in marks and "t1" not in marks:
                marks["t1"] = time.perf_counter()
            return d

        async def nak_timed(d: Delivery, delay: float | None = None) -> None:
            if d.stream_seq == marks.get("seq") and "t0" not in marks:
                await marks["ledger"].record(seat, d.envelope.id if d.envelope else "", {"bench": True})
                marks["t0"] = time.perf_counter()
            await nak(d, delay)

        box._fetch_one = fetch_timed  # type: ignore[method-assign]  # instrumentation only
        box.nak = nak_timed  # type: ignore[method-assign]
        return box

    bus.attach = attach_timed  # type: ignore[method-assign]
    turns = records.TurnStore(store / f"{name}.db", node=name)
    disp = Dispatcher(ctx, bus, _no_engine, turns)
    host = SeatHost(
        ctx.coord,
        node_id=name,
        owner=ctx.owner,
        protocol=PROTOCOL_VERSION,
        ttl=_TTL,
        on_acquire=disp.on_acquire,
        on_release=disp.on_release,
        on_quiesce=disp.on_quiesce,
        on_resume=disp.on_resume,
    )
    disp.host = host
    fence["f"] = host.holds
    host.assign([seat])
    marks.setdefault("ledger", Ledger(ctx.coord))
    return _Node(nc, ctx, bus, disp, host)


async def _wait(marks: dict[str, Any], key: str, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while key not in marks:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {key} within {timeout:.0f} s")
        await asyncio.sleep(0.0005)
    return float(marks[key])


async def _floor_setup(url: str) -> tuple[Client, Client, Any, Any]:
    a = await nats.connect(url)
    b = await nats.connect(url)
    js = a.jetstream()
    await js.add_stream(
        StreamConfig(name="BENCH_NAK", subjects=["benchnak.>"], retention=RetentionPolicy.INTEREST)
    )
    await js.add_consumer(
        "BENCH_NAK",
        ConsumerConfig(
            durable_name="nak", ack_policy=AckPolicy.EXPLICIT, ack_wait=60, filter_subject="benchnak.x"
        ),
    )
    pa = await js.pull_subscribe_bind(durable="nak", stream="BENCH_NAK")
    pb = await b.jetstream().pull_subscribe_bind(durable="nak", stream="BENCH_NAK")
    return a, b, pa, pb


async def _floor_once(a: Client, pa: Any, pb: Any) -> float:
    await a.jetstream().publish("benchnak.x", b"x")
    (msg,) = await pa.fetch(1, timeout=5)
    waiting = asyncio.create_task(pb.fetch(1, timeout=5))
    await asyncio.sleep(0.005)  # the second fetch's pull request is at the server
    t0 = time.perf_counter()
    await msg.nak()
    (again,) = await waiting
    t1 = time.perf_counter()
    await again.ack_sync()
    return t1 - t0


_PHASES = ("nak_to_released", "released_to_claimed", "claimed_to_attached", "attached_to_delivery")


async def _measure(
    url: str, company_path: Path, store: Path, trials: int, timer: bool, phases: dict[str, list[float]]
) -> tuple[list[float], list[float]]:
    company = load_company_file(company_path)
    seat = handles(1)[0]
    marks: dict[str, Any] = {}
    a = await _node("bench-a", url, company, seat, store, marks)
    b = await _node("bench-b", url, company, seat, store, marks)
    fa, fb, pa, pb = await _floor_setup(url)
    pub = a.bus
    holder, successor = a, b
    fig: list[float] = []
    floor: list[float] = []
    phases.update({k: [] for k in _PHASES})
    try:
        await holder.host.sweep()
        if seat not in holder.disp.boxes:
            raise RuntimeError("the first holder did not claim the seat")
        if timer:
            successor.host.start()
        rng = random.Random(3)
        for _ in range(trials):
            if timer:  # a drain comes at any phase of the successor's sweep timer
                await asyncio.sleep(rng.uniform(0.0, 5.0))
            floor.append(await _floor_once(fa, pa, pb))
            for k in ("t0", "t1", "seq", "claimed", "attached"):
                marks.pop(k, None)
            holder.ctx.draining = True
            env = Envelope.new(
                "external_notification", source="api", payload={"text": "handover", "source": "api"}
            )
            published = await pub.publish_to_seat(seat, env)
            marks["seq"] = published.seq
            t0 = await _wait(marks, "t0", 10)
            await holder.host.stop(reason="drain")
            released = time.perf_counter()
            holder.ctx.draining = False
            if not timer:
                await successor.host.sweep()
            t1 = await _wait(marks, "t1", 20)
            fig.append(t1 - t0)
            phases["nak_to_released"].append(released - t0)
            phases["released_to_claimed"].append(marks["claimed"] - released)
            phases["claimed_to_attached"].append(marks["attached"] - marks["claimed"])
            phases["attached_to_delivery"].append(t1 - marks["attached"])
            for _ in range(2000):  # the successor acks it (ledger: already worked)
                if (await successor.bus.state(seat)).ack_pending == 0:
                    break
                await asyncio.sleep(0.005)
            holder, successor = successor, holder
            if timer:
                successor.host.start()
    finally:
        for n in (a, b):
            with contextlib.suppress(Exception):
                await n.host.stop(reason="drain")
            await n.nc.close()
        await fa.close()
        await fb.close()
    return fig, floor


def run(ctx: Ctx) -> list[Row]:
    """Measure rows 3a (sweep on its timer) and 3b (sweep at once)."""
    rows: list[Row] = []
    company = write_company(ctx.sub("company") / "company.yaml", seats=1)
    for label, timer, trials in (
        ("3a clean handover, successor's sweep on its 5 s timer only", True, ctx.n(3, 12)),
        ("3b clean handover, release announced: successor sweeps at once (nodes)", False, ctx.n(12, 60)),
    ):
        params: dict[str, Any] = {
            "trials": trials,
            "replicas": 1,
            "in_process": True,
            "sweep_interval_s": 5.0 if timer else None,
        }
        ctx.say(f"figure 3: {label} ({trials} trials)")
        try:
            with contextlib.ExitStack() as stack:
                srv = nats_server(stack, ctx.sub(f"nats-{int(timer)}"))
                phases: dict[str, list[float]] = {}
                fig, floor = asyncio.run(
                    _measure(srv.url, company, ctx.sub(f"store-{int(timer)}"), trials, timer, phases)
                )
        except Exception as e:  # noqa: BLE001
            rows.append(failed(label, "ms", f"{type(e).__name__}: {e}", params))
            continue
        params["phase_medians_ms"] = {
            k: round(statistics.median(v) * 1000, 3) for k, v in phases.items() if v
        }
        rows.append(
            row_from(
                label, "ms", [x * 1000 for x in fig], _FLOOR, [x * 1000 for x in floor], parameters=params
            )
        )
    return rows
