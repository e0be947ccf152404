"""Reads under a write burst on one real node (ES-29, issue 17).

Four writers create work items back to back while two readers read an item and a listing (stale
reads, the default) for a few seconds. A busy local copy serves every read: no read answers 503.
Every 503 the API sends on the way carries ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.support.procs import TOKEN, Node

LOAD_SECONDS = 4.0
"""How long the writers and readers run (the test stays well under 30 s)."""


async def _hammer(url: str) -> tuple[list[httpx.Response], list[httpx.Response]]:
    """Run 4 writers and 2 readers for :data:`LOAD_SECONDS`; return (writes, reads) answered."""
    writes: list[httpx.Response] = []
    reads: list[httpx.Response] = []
    headers = {"Authorization": f"Bearer {TOKEN}"}
    limits = httpx.Limits(max_connections=6)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30, limits=limits) as client:
        first = await client.post("/work", json={"project": "SUP", "title": "the item read"})
        assert first.status_code == 201, first.text
        key = first.json()["item"]["key"]
        end = time.monotonic() + LOAD_SECONDS

        async def writer(i: int) -> None:
            n = 0
            while time.monotonic() < end:
                n += 1
                writes.append(await client.post("/work", json={"project": "SUP", "title": f"w{i}-{n}"}))

        async def reader(i: int) -> None:
            while time.monotonic() < end:
                path = f"/work/{key}" if i == 0 else "/work?project=SUP&limit=5"
                reads.append(await client.get(path))

        await asyncio.gather(*(writer(i) for i in range(4)), *(reader(i) for i in range(2)))
    return writes, reads


def test_a_busy_copy_serves_every_read(start_node: Callable[..., Node], tmp_path: Path) -> None:
    node = start_node("run", "--data-dir", str(tmp_path / "d"))
    node.wait_ready()
    writes, reads = asyncio.run(_hammer(node.url))
    assert reads and writes
    refused = [(r.status_code, r.text[:300]) for r in reads if r.status_code != 200]
    assert refused == [], f"{len(refused)} of {len(reads)} reads refused"
    assert {w.status_code for w in writes} <= {201, 503}, {w.status_code for w in writes}
    for r in [*writes, *reads]:
        if r.status_code == 503:
            assert r.headers.get("retry-after"), r.text
