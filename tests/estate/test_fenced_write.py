"""A data node refuses a seat's estate write made under an epoch older than the seat's current one
(FL-74), before anything lands; the current epoch writes. Real node process, real broker, the
write sent over the router's own wire (``crewlet.estate.rpc.<node>``) as a zombie would send it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats

from shared.estate import Call, mint_op_id
from shared.router import decode_answer, encode_call, rpc_subject
from tests.main_job.support import Broker
from tests.support.procs import Node


def _send(url: str, node_id: str, call: Call) -> Any:
    async def go() -> Any:
        nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=0)
        try:
            msg = await nc.request(rpc_subject(node_id), encode_call(call), timeout=10)
            return decode_answer(msg.data)
        finally:
            await nc.close()

    return asyncio.run(go())


def _create(seat: str, epoch: int, title: str) -> Call:
    return Call(
        op="work.create",
        args={
            "project": "SUP",
            "title": title,
            "type": "task",
            "author": f"seat:{seat}",
            "author_kind": "agent",
            "fence": {"seat": seat, "epoch": epoch},
        },
        op_id=mint_op_id("work.create"),
        asker="a-test",
    )


def test_a_stale_epoch_write_is_refused_and_the_current_one_lands(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    node = start_node("run", "--data-dir", str(tmp_path / "d"))
    node.wait_ready()
    broker = Broker(tmp_path / "d" / "node-0")
    deadline = time.monotonic() + 20
    epoch = 0
    while time.monotonic() < deadline and not epoch:
        seats = {s["seat"]: s["epoch"] for s in node.get("/fleet").json()["seats"]}
        epoch = int(seats.get("triage", 0))
        time.sleep(0.1)
    assert epoch >= 1, "triage was never claimed"

    stale = _send(broker.url, "node-0", _create("triage", epoch - 1, "from a zombie"))
    assert stale.status == "ran" and stale.error is not None, stale
    assert stale.error["code"] == "fenced" and stale.error["epoch"] == epoch - 1
    assert node.get("/work?project=SUP").json()["count"] == 0, "a fenced write landed"
    assert any(e.get("event") == "estate_write_fenced" and e.get("seat") == "triage" for e in node.events())

    ok = _send(broker.url, "node-0", _create("triage", epoch, "from the holder"))
    assert ok.status == "ran" and ok.error is None, ok
    items = node.get("/work?project=SUP").json()["items"]
    assert [i["title"] for i in items] == ["from the holder"]
