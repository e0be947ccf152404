"""Per-node sweeps (ES-85) and the ledger watermark (ES-8), on an in-process data node."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import select
from structlog.testing import capture_logs

from shared import estate
from shared.estate.store import T_LEDGER, T_LEDGER_WATERMARK

from .conftest import Inproc, seed

Start = Callable[..., Awaitable[Inproc]]
DAY_US = 86_400 * 1_000_000


async def _ledger(node: Inproc, op_id: str) -> Any:
    return await node.est.store.read(
        lambda c: c.execute(select(T_LEDGER).where(T_LEDGER.c.op_id == op_id)).first()
    )


async def _watermark(node: Inproc, domain: str) -> Any:
    return await node.est.store.read(
        lambda c: c.execute(select(T_LEDGER_WATERMARK).where(T_LEDGER_WATERMARK.c.domain == domain)).first()
    )


async def _create(node: Inproc, title: str, op_id: str | None = None) -> estate.Answer:
    return await node.svc.serve(
        estate.Call(op="work.create", args={"project": "ENG", "title": title}, op_id=op_id or "")
    )


async def test_a_ledger_row_past_the_horizon_is_swept_and_the_watermark_recorded(inproc: Start) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    old = (await _create(a, "old")).result
    young = (await _create(a, "young")).result
    now = int(time.time() * 1_000_000)
    await a.est.store.write(
        lambda c: c.execute(
            T_LEDGER.update().where(T_LEDGER.c.op_id == old["op_id"]).values(applied_at=now - 31 * DAY_US)
        )
    )
    with capture_logs() as logs:
        swept = await estate.sweep_ledger(a.est.store, ledger_days=30, now_us=now)
    assert swept == {**{d: 0 for d in estate.DOMAINS}, "tracker": 1}  # every registered log's ledger
    assert await _ledger(a, old["op_id"]) is None
    assert await _ledger(a, young["op_id"]) is not None  # a young row stays
    wm = await _watermark(a, "tracker")
    assert (wm.cutoff_instant, wm.reason) == (now - 30 * DAY_US, "sweep")
    assert [e["domain"] for e in logs if e["event"] == "statelog_ledger_swept"] == ["tracker"]
    # the watermark never goes down
    await estate.sweep_ledger(a.est.store, ledger_days=30, now_us=now - DAY_US)
    assert (await _watermark(a, "tracker")).cutoff_instant == now - 30 * DAY_US


async def test_an_op_minted_before_the_watermark_without_a_row_is_unknown_and_appends_nothing(
    inproc: Start,
) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    task = (await _create(a, "target")).result["object"]
    now = int(time.time() * 1_000_000)
    await estate.sweep_ledger(a.est.store, ledger_days=30, now_us=now)
    minted_ms = (now - 31 * DAY_US) // 1000
    op = estate.mint_op_id(f"update-{task['key']}", at_ms=minted_ms)
    _f, before = await a.est.log.head("tracker")
    with capture_logs() as logs:
        ans = await a.svc.serve(
            estate.Call(op="work.update", args={"key": task["key"], "status": "done"}, op_id=op)
        )
    assert ans.status == "unvouched" and ans.error is not None and ans.error["code"] == "unknown"
    lines = [e for e in logs if e["event"] == "statelog_write_unvouched"]
    assert len(lines) == 1 and lines[0]["minted_at"] == minted_ms * 1000 and lines[0]["refusal"] == "unknown"
    assert lines[0]["op_id"] == op
    assert (await a.est.log.head("tracker"))[1] == before  # no record appended

    # a create is answered from its item's row when present (its id derives from the op) ...
    made_op = estate.mint_op_id("create-ENG", at_ms=minted_ms)
    await a.est.store.write(lambda c: c.execute(T_LEDGER.delete()))  # as if every row were swept
    first = await _create(a, "filed long ago", op_id=made_op)
    assert first.status == "unvouched"  # no row, no item: unknown, no number minted
    # file it for real: drop the watermark, land it, then take its ledger row away as a sweep would
    await a.est.store.write(lambda c: c.execute(T_LEDGER_WATERMARK.delete()))
    landed = await _create(a, "filed long ago", op_id=made_op)
    assert landed.status == "ran" and landed.result["outcome"] == "applied"
    await a.est.store.write(lambda c: c.execute(T_LEDGER.delete().where(T_LEDGER.c.op_id == made_op)))
    await estate.sweep_ledger(a.est.store, ledger_days=30, now_us=now)
    _f, before = await a.est.log.head("tracker")
    again = await _create(a, "filed long ago", op_id=made_op)
    assert again.status == "ran" and again.result["outcome"] == "applied"
    assert again.result["object"]["key"] == landed.result["object"]["key"]
    assert (await a.est.log.head("tracker"))[1] == before

    # a young op is not touched by the watermark
    fresh = await _create(a, "new today")
    assert fresh.status == "ran" and fresh.result["outcome"] == "applied"


async def test_the_sweeper_runs_at_start_and_stops_by_its_flag(inproc: Start) -> None:
    a = await inproc("a")
    sweeper = estate.LedgerSweeper(a.est.store, ledger_days=30, interval=3600.0)
    sweeper.start()
    for _ in range(200):
        if await _watermark(a, "tracker") is not None:
            break
        await asyncio.sleep(0.05)
    await sweeper.stop()
    assert (await _watermark(a, "tracker")).reason == "sweep"
