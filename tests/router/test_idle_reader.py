"""An idle copy on a real nats-server: an empty fetch is not a reader error (issue 14, issue 17).

The applier's fetch waits 1 s and nats-py says "nothing came" with a timeout (its own kind, or a
bare ``TimeoutError``). A copy with nothing to apply logs no ``statelog_reader_error`` for those,
stays level (never ``stalled``), and serves a stale read.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import nats
import structlog

from shared import estate

IDLE_SECONDS = 3.5
"""Long enough for three empty fetches per log (the fetch waits 1 s)."""


async def test_an_idle_copy_logs_no_reader_error_and_serves_reads(tmp_path: Path, nats_server: Any) -> None:
    nc = await nats.connect(nats_server.url, name="idle-1")
    try:
        est = await estate.open_estate(
            nc.jetstream(timeout=5.0), node_id="idle-1", store_dir=tmp_path / "idle-1"
        )
        try:
            assert await est.wait_level(45)
            with structlog.testing.capture_logs() as logs:
                await asyncio.sleep(IDLE_SECONDS)
                ans = await est.service.serve(estate.Call(op="work.list", args={}))
            assert ans.status == "ran" and ans.error is None, ans
            assert all(a.lag == 0 and not a.stalled() for a in est.appliers.values())
        finally:
            await est.close()
    finally:
        await nc.close()
    assert [e for e in logs if e["event"] == "statelog_reader_error"] == []
