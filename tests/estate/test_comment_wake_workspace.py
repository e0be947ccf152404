"""A seat's ``comment_on_work_item`` wakes who the comment concerns (CO-41), through the workspace's
``comment_wake`` callback bound as the dispatcher binds it: a real estate on a real broker, the
wakes published to real inboxes."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client

from services.seats.workspace import CommentWake, RouterWorkspace
from shared import tools
from shared.bus import Bus, inbox_subject
from shared.coordination import MemoryCoordination

from .conftest import Inproc, make_router, seed

AGENTS = {"lead", "dev", "docs", "triage"}


async def _inbox(nc: Client, seat: str) -> list[dict[str, Any]]:
    sub = await nc.jetstream().subscribe(inbox_subject(seat), ordered_consumer=True)
    out: list[dict[str, Any]] = []
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=0.5)
            except TimeoutError:
                return out
            out.append(json.loads(msg.data))
    finally:
        await sub.unsubscribe()


async def test_a_seats_comment_wakes_the_assignee_and_the_mentioned(
    inproc: Callable[..., Awaitable[Inproc]],
) -> None:
    node = await inproc("d1")
    await seed(node, "ENG")
    coord = MemoryCoordination()
    router = make_router(None, coord, "d1", local=node)
    bus = Bus(node.nc, node.nc.jetstream())
    await bus.provision()
    await bus.ensure_mailboxes(sorted(AGENTS))

    triage = RouterWorkspace(router, None, seat="triage", epoch=1, agent_seats=AGENTS, wake=None)
    item = await triage.create_work_item("ENG", "task", "Flaky test", "", "lead")
    key = item["key"]

    # exactly what services/seats/dispatcher.py's _workspace passes for a turn
    comment_wake: CommentWake = functools.partial(
        tools.publish_comment_wakes, bus, coord, agent_seats=AGENTS, parent_turn_id="turn-dev-1"
    )
    dev = RouterWorkspace(
        router, None, seat="dev", epoch=1, agent_seats=AGENTS, wake=None, comment_wake=comment_wake
    )
    comment = await dev.comment_on_work_item(key, "Fixed in my branch, @docs please note it; @dev = me")
    assert comment["author"] == "seat:dev" and comment["work_item"] == key

    [to_lead] = await _inbox(node.nc, "lead")
    [to_docs] = await _inbox(node.nc, "docs")
    assert await _inbox(node.nc, "dev") == [] and await _inbox(node.nc, "triage") == []
    assert to_lead["payload"]["reason"] == "commented" and to_docs["payload"]["reason"] == "mentioned"
    for env in (to_lead, to_docs):
        assert (
            env["work_item"] == key and env["parent_turn_id"] == "turn-dev-1" and env["delegation_depth"] == 0
        )
        assert env["payload"]["sender"] == "dev" and env["payload"]["comment"]["id"] == comment["id"]


async def test_without_the_callback_a_comment_wakes_nobody(inproc: Callable[..., Awaitable[Inproc]]) -> None:
    node = await inproc("d1")
    await seed(node, "ENG")
    coord = MemoryCoordination()
    router = make_router(None, coord, "d1", local=node)
    bus = Bus(node.nc, node.nc.jetstream())
    await bus.provision()
    await bus.ensure_mailboxes(sorted(AGENTS))
    triage = RouterWorkspace(router, None, seat="triage", epoch=1, agent_seats=AGENTS, wake=None)
    key = (await triage.create_work_item("ENG", "task", "Flaky test", "", "lead"))["key"]
    dev = RouterWorkspace(router, None, seat="dev", epoch=1, agent_seats=AGENTS, wake=None)
    await dev.comment_on_work_item(key, "@lead done")
    assert await _inbox(node.nc, "lead") == []
