"""The estate WAL stays bounded under writes with readers always inside it (issue 11; ES-59, ES-92).

A real node process (one data node on a real nats-server) with ``retention.wal_limit_bytes`` 2 MiB
and ``retention.checkpoint_interval`` 1 s takes 2 000 work-item writes (``POST /work``, 24 at a time)
while reader loops keep hitting ``GET /work`` (listing and text filter) and ``GET /knowledge/search``,
so some read transaction is nearly always open: SQLite's own passive auto-checkpoint is starved and
without the engine's periodic ``wal_checkpoint(TRUNCATE)`` the WAL only grows. Each write carries
its own op id and a 503 (a loaded node refusing, or not knowing the outcome) is repeated with it,
as a client would; every write must land once.

The WAL (``<store.dir>/estate.db-wal``) is sampled every 20 ms: before the writes, its peak, and
after the writes once a checkpoint ran. The bound asserted is :data:`WAL_BOUND` = :data:`WAL_LIMIT`
+ :data:`INTERVAL_ALLOWANCE` (2 MiB + 4 MiB): the ``journal_size_limit`` plus what the writes can
add before the next checkpoint resets the file (at 50-70 writes/s one 1 s interval adds about
1 MiB; the allowance is four times that, for a checkpoint that waited out a reader and the
transaction in flight on a loaded machine — a CI run peaked at 4.65 MB). After the writes the WAL
must be back under ``wal_limit``.

Measured on a 2-core machine (``CREWLET_TEST_WAL_INTERVAL=1h`` runs the same test with the
checkpoint loop effectively off), 2 000 writes in ~66 s beside ~10 000 reads:

- checkpoints every 1 s: before 0.37 MB, peak 1.7–1.8 MB, after 0.8–1.0 MB (passes);
- checkpoints off: before 0.37 MB, peak 9.3 MB (fails the peak bound): SQLite's passive
  auto-checkpoint cannot reset a WAL some reader is always inside.

(Issue 11 calibrated it at 4 MiB + 4 MiB and 5 000 writes, ~95 s; cut for the suite's time, to
3 000 and, in issue 17, to 2 000 — the checkpoint-off run still fails by 3 MB.)

Also here: ``wal_large`` (ES-92) raised and cleared by :func:`observe_storage` with a lowered
threshold, on a real estate file.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared import estate
from shared.estate import EstateStore
from shared.estate._alarms import Alarms, active_alarms
from shared.estate.store import observe_storage
from tests.support.procs import REPO, TOKEN, NatsServer, Node, free_port, node_file

H = {"Authorization": f"Bearer {TOKEN}"}
WRITES = 2_000
CONCURRENCY = 24
READERS = 8
"""Reader loops: enough that some read transaction is nearly always open."""
WAL_LIMIT = 2 << 20
"""``retention.wal_limit_bytes`` of the test node (2 MiB)."""
INTERVAL_ALLOWANCE = 4 << 20
"""What the writes may add to the WAL between checkpoints (see the module docstring)."""
WAL_BOUND = WAL_LIMIT + INTERVAL_ALLOWANCE


def _checkpoint_interval() -> str:
    """``1s``; ``CREWLET_TEST_WAL_INTERVAL`` overrides it to check by hand that the bound bites."""
    return os.environ.get("CREWLET_TEST_WAL_INTERVAL", "1s")


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    broker = NatsServer(tmp_path / "nats")
    d = tmp_path / "w1"
    port = free_port()
    cfg = node_file(
        d,
        node_id="w1",
        port=port,
        stream={"type": "nats", "url": broker.url},
        coordination={"type": "embedded-kv"},
        retention={"wal_limit_bytes": WAL_LIMIT, "checkpoint_interval": _checkpoint_interval()},
    )
    n = Node(
        ["node", "--node", str(cfg), "--company", str(REPO / "examples" / "company.yaml")], dir=d, port=port
    )
    try:
        n.wait_ready(60)
        yield n
    finally:
        n.stop()
        broker.stop()


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


async def _load(url: str, wal: Path) -> dict[str, Any]:
    """Write :data:`WRITES` items with readers running; sample the WAL throughout."""
    samples: list[int] = []
    done = asyncio.Event()
    reads = {"work": 0, "search": 0, "failed": 0, "repeated": 0}
    failures: list[str] = []  # what a failed read answered, for the assertion message
    statuses: dict[int, int] = {}
    retried: list[str] = []  # what a write answered before it was repeated

    async def sampler() -> None:
        while not done.is_set():
            samples.append(_size(wal))
            await asyncio.sleep(0.02)

    async def get(client: httpx.AsyncClient, path: str, params: dict[str, Any]) -> httpx.Response:
        # a GET is safe to repeat: a kept-alive connection the server closed as it was reused
        # (ReadError / RemoteProtocolError, seen once in ~5 000 reads on a loaded CI machine) is
        # tried once more on a fresh one, as any HTTP client would
        try:
            return await client.get(path, params=params)
        except (httpx.ReadError, httpx.RemoteProtocolError) as e:
            reads["repeated"] += 1
            failures.append(f"repeated after {type(e).__name__}: {e}")
            return await client.get(path, params=params)

    async def reader(client: httpx.AsyncClient, n: int) -> None:
        i = 0
        while not done.is_set():
            i += 1
            try:
                if i % 3 == 0:
                    r = await get(client, "/knowledge/search", {"q": "onboarding guide", "limit": 5})
                    reads["search"] += 1
                elif i % 3 == 1:
                    r = await get(client, "/work", {"project": "ENG", "limit": 100, "offset": (i * 7) % 400})
                    reads["work"] += 1
                else:
                    r = await get(client, "/work", {"text": f"item {(i + n) % 50}", "limit": 20})
                    reads["work"] += 1
                if r.status_code != 200:
                    reads["failed"] += 1
                    failures.append(f"{r.request.url.path} {r.status_code}: {r.text[:200]}")
            except httpx.HTTPError as e:
                reads["failed"] += 1
                failures.append(f"{type(e).__name__}: {e}")

    async with httpx.AsyncClient(base_url=url, headers=H, timeout=60.0) as client:
        sem = asyncio.Semaphore(CONCURRENCY)

        async def write(i: int) -> None:
            # a client's write: its own op id, and a 503 (refused, unknown outcome, nobody
            # answered: the node is loaded) repeated with the same op id, as the answer says
            op_id = estate.mint_op_id(f"wal-{i}")
            body = {"project": "ENG", "title": f"item {i % 50} number {i}", "body": "x" * 400, "op_id": op_id}
            for _ in range(5):
                async with sem:
                    r = await client.post("/work", json=body)
                if r.status_code != 503:
                    break
                retried.append(r.text[:200])
                await asyncio.sleep(float(r.headers.get("Retry-After", "0.5")))
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1

        tasks = [asyncio.create_task(sampler())]
        tasks += [asyncio.create_task(reader(client, n)) for n in range(READERS)]
        started = time.monotonic()
        await asyncio.gather(*(write(i) for i in range(WRITES)))
        elapsed = time.monotonic() - started
        done.set()
        await asyncio.gather(*tasks)
    return {
        "samples": samples,
        "reads": reads,
        "statuses": statuses,
        "elapsed": elapsed,
        "failures": failures,
        "retried": retried,
    }


@pytest.mark.timeout(420)
def test_wal_stays_bounded_under_writes_and_readers(node: Node) -> None:
    wal = node.log_path.parent / "store" / "estate.db-wal"  # node_file's store.dir is <dir>/store
    assert wal.parent.is_dir(), wal
    before = _size(wal)
    out = asyncio.run(_load(node.url, wal))
    peak = max([before, *out["samples"]])
    deadline = time.monotonic() + 30
    after = _size(wal)
    while after > WAL_LIMIT and time.monotonic() < deadline:  # the next checkpoint cuts it
        time.sleep(0.2)
        after = _size(wal)
    print(
        f"\nWAL bytes: before={before} peak={peak} after={after} bound={WAL_BOUND} "
        f"(wal_limit={WAL_LIMIT}, checkpoint_interval={_checkpoint_interval()}); "
        f"{WRITES} writes in {out['elapsed']:.1f} s ({WRITES / out['elapsed']:.0f}/s), "
        f"statuses {out['statuses']}, repeated after a 503: {len(out['retried'])}, reads {out['reads']}, "
        f"samples {len(out['samples'])}"
    )
    assert out["statuses"].get(201) == WRITES, (out["statuses"], out["retried"][:5])
    assert out["reads"]["work"] > 0 and out["reads"]["search"] > 0
    assert out["reads"]["failed"] == 0, (out["reads"], out["failures"][:5])
    assert out["reads"]["repeated"] <= 3, (out["reads"], out["failures"][:5])  # a rare race, not a habit
    assert peak < WAL_BOUND, f"WAL peaked at {peak} bytes, over the bound {WAL_BOUND}"
    assert after <= WAL_LIMIT
    metrics = httpx.get(node.url + "/metrics", timeout=10).text
    assert "crewlet_estate_wal_bytes" in metrics and "crewlet_estate_store_bytes" in metrics
    assert "crewlet_estate_wal_peak_bytes" in metrics


def test_wal_large_raises_and_clears(tmp_path: Path) -> None:
    """ES-92 ``wal_large``: raised while the WAL is over the threshold, cleared once a checkpoint cut it."""

    async def run() -> None:
        store = await EstateStore.open(tmp_path / "estate.db", wal_limit=1 << 20)
        try:
            await store.wal_checkpoint()  # the schema's own pages leave the WAL
            alarms = Alarms()
            sizes = observe_storage(store, alarms, wal_large_bytes=64 << 10)
            assert sizes["store_bytes"] > 0
            assert "wal_large" not in alarms.active

            def fill(conn: Any) -> None:
                conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS t_fill (b BLOB)")
                for _ in range(64):
                    conn.exec_driver_sql("INSERT INTO t_fill VALUES (randomblob(4096))")

            await store.write(fill)
            sizes = observe_storage(store, alarms, wal_large_bytes=64 << 10)
            assert sizes["wal_bytes"] > 64 << 10, sizes
            assert "wal_large" in alarms.active
            assert active_alarms()["wal_large"]["measurement"]["wal_bytes"] == sizes["wal_bytes"]
            res = await store.wal_checkpoint()
            assert res["busy"] == 0 and res["wal_bytes_after"] == 0, res
            sizes = observe_storage(store, alarms, wal_large_bytes=64 << 10)
            assert sizes["wal_bytes"] == 0
            assert "wal_large" not in alarms.active
            assert "wal_large" not in active_alarms()
        finally:
            store.close()

    asyncio.run(run())
