"""The router's order, pass-over and repeat rules on a real nats-server (ES-32..ES-38).

Data nodes run in-process, each with its own connection and RPC subscription; presence is written
into an in-memory coordination store (what the router reads to find data nodes). A "silent" node is
a real subscription on its estate subject that records requests and never answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import nats
import pytest
from nats.aio.msg import Msg

from shared import estate
from shared.coordination import MemoryCoordination
from shared.router import NobodyAnswered, decode_call, rpc_subject

from .conftest import Inproc, make_router, presence, seed

Start = Callable[..., Awaitable[Inproc]]


class Silent:
    """A node that hears its estate subject and never answers."""

    def __init__(self) -> None:
        self.calls: list[estate.Call] = []

    async def hear(self, msg: Msg) -> None:
        self.calls.append(decode_call(msg.data))


async def _silent(url: str, node: str) -> tuple[Any, Silent]:
    nc = await nats.connect(url)
    s = Silent()
    await nc.subscribe(rpc_subject(node), cb=s.hear)
    return nc, s


async def test_a_data_node_answers_itself_and_peers_answer_the_rest(inproc: Start, nats_server: Any) -> None:
    a = await inproc("a")
    await inproc("b")
    await seed(a, "ENG")
    coord = MemoryCoordination()
    await presence(coord, "a", "b")
    local = make_router(a.nc, coord, "a", local=a)
    made = await local.create_work_item("ENG", "Local first")
    assert made["outcome"] == "applied"
    assert local.floors == {"CREWLET_TRACKER_LOG": made["position"]["seq"]}
    got = await local.get_work_item(made["object"]["key"])
    assert got["meta"]["served_by"] == "a"
    asker = await nats.connect(nats_server.url)
    try:
        remote = make_router(asker, coord, "seats-only")
        listed = await remote.list_work_items(project="ENG", min_position=made["position_token"])
        assert listed["meta"]["served_by"] in ("a", "b") and listed["data"]["count"] == 1
        # A copy out of service is passed over: its node answers from a peer (ES-32, ES-40).
        a.est.appliers["tracker"].faulted = True
        again = await local.list_work_items(project="ENG")
        assert again["meta"]["served_by"] == "b"
        a.est.appliers["tracker"].faulted = False
    finally:
        await asker.close()


async def test_a_lagging_copy_is_asked_last_with_take_anyway(inproc: Start, nats_server: Any) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    coord = MemoryCoordination()
    await presence(coord, "a")
    a.est.appliers["tracker"].drained = False  # as if still catching up since start (ES-39)
    asker = await nats.connect(nats_server.url)
    try:
        r = make_router(asker, coord, "seats-only")
        listed = await r.list_work_items(project="ENG")
        assert listed["meta"]["served_by"] == "a"  # alone, it serves with take_anyway
    finally:
        await asker.close()


async def test_nobody_answered_lists_each_node_and_silent_nodes_go_last(
    inproc: Start, nats_server: Any
) -> None:
    coord = MemoryCoordination()
    await presence(coord, "ghost", "mute")
    silent_nc, silent = await _silent(nats_server.url, "mute")
    asker = await nats.connect(nats_server.url)
    try:
        r = make_router(asker, coord, "asker", read_wait=0.5)
        with pytest.raises(NobodyAnswered) as e:
            await r.list_work_items()
        said = {x.node: x.said for x in e.value.replies}
        assert said == {"ghost": "no_responders", "mute": "timeout"}
        assert await r.order("tracker") == ["ghost", "mute"]  # silent in the last 30 s: asked last (ES-33)
        failed = await r.search_knowledge("anything")
        assert failed["data"]["failed"] is True and "could not be searched" in failed["data"]["sentence"]
        empty = make_router(asker, MemoryCoordination(), "asker")
        with pytest.raises(NobodyAnswered, match="presence names no live data node"):
            await empty.list_work_items()
    finally:
        await asker.close()
        await silent_nc.close()
    assert silent.calls and silent.calls[0].op == "work.list"


async def test_an_unanswered_knowledge_write_is_unknown_and_never_resent(
    inproc: Start, nats_server: Any
) -> None:
    b = await inproc("b")
    await seed(b, "ENG")
    coord = MemoryCoordination()
    await presence(coord, "a-mute", "b")
    silent_nc, silent = await _silent(nats_server.url, "a-mute")
    asker = await nats.connect(nats_server.url)
    seen_by_b: list[estate.Call] = []
    real = b.svc.serve

    async def spy(call: estate.Call) -> estate.Answer:
        seen_by_b.append(call)
        return await real(call)

    b.server._handler = spy
    try:
        r = make_router(asker, coord, "asker", write_wait=0.5)
        r.last_answered = "a-mute"  # ask the silent node first
        with pytest.raises(estate.OutcomeUnknown):
            await r.write_page("ENG", "Never twice", "body")
        assert len(silent.calls) == 1 and not [c for c in seen_by_b if c.op == "pages.write"]
        # A tracker write moves on to the next node under the same op id (ES-35).
        r2 = make_router(asker, coord, "asker-2", write_wait=0.5)
        r2.last_answered = "a-mute"
        made = await r2.create_work_item("ENG", "Moves on")
        tracker_calls = [c for c in silent.calls if c.op == "work.create"]
        assert len(tracker_calls) == 1 and tracker_calls[0].op_id == made["op_id"]
        assert [c.op_id for c in seen_by_b if c.op == "work.create"] == [made["op_id"]]
        # The silent node "wakes" and runs it late: the ledger collapses it onto the first record.
        late = await b.svc.serve(tracker_calls[0])
        assert late.result["position"] == made["position"]
    finally:
        await asker.close()
        await silent_nc.close()


async def test_a_caller_deadline_caps_every_wait(inproc: Start, nats_server: Any) -> None:
    coord = MemoryCoordination()
    await presence(coord, "m1", "m2")
    nc1, s1 = await _silent(nats_server.url, "m1")
    nc2, s2 = await _silent(nats_server.url, "m2")
    asker = await nats.connect(nats_server.url)
    try:
        r = make_router(asker, coord, "asker")
        with pytest.raises(NobodyAnswered) as e:
            await asyncio.wait_for(r.call("work.list", {}, timeout=0.6), 5)
        said = sorted(x.said for x in e.value.replies)
        assert said == ["not_asked", "timeout"]
    finally:
        for c in (asker, nc1, nc2):
            await c.close()
