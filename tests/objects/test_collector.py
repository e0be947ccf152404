"""The objects collector duty on a running node (ES-75, ES-74, FL-5) and ``crewlet objects status``.

One node (``crewlet run``: embedded broker, the ``nats`` object store) serves the module, with the
collector's cadence and grace shortened through its environment (``CREWLET_OBJECTS_COLLECT_SECONDS``
1 s, ``CREWLET_OBJECTS_GRACE_SECONDS`` 2.5 s, standing in for hourly and 24 h). The test reaches the
same object-store bucket behind the node's back through the node's broker (its ports file), the way
a stray writer or a disk fault would.

ES-75 Check: an object deleted behind the store's back raises ``objects_missing`` naming that file
after the next pass, and an unnamed object past the grace is removed (a young one is kept).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import nats
import pytest
from typer.testing import CliRunner

from crewlet.cli import app
from services.workers.objects import list_objects, modified_at
from shared import objects
from tests.objects.conftest import Backend
from tests.support.procs import TOKEN, Node, free_port

GRACE = 2.5
"""Seconds an unnamed object is kept (the node's ``CREWLET_OBJECTS_GRACE_SECONDS``)."""


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    d = tmp_path_factory.mktemp("collector")
    port = free_port()
    env = {"CREWLET_OBJECTS_COLLECT_SECONDS": "1", "CREWLET_OBJECTS_GRACE_SECONDS": str(GRACE)}
    n = Node(["run", "--data-dir", str(d / "data"), "--port", str(port)], dir=d, port=port, env=env)
    try:
        n.wait_ready(60)
        yield n
    finally:
        n.stop()


def _broker_url(node: Node) -> str:
    ports = list((node.log_path.parent / "data" / "node-0" / "broker").glob("nats-server_*.ports"))
    assert ports, "the embedded broker wrote no ports file"
    return str(json.loads(ports[0].read_text())["nats"][0])


@pytest.fixture
async def store(node: Node) -> AsyncIterator[objects.NatsObjectStore]:
    """The node's own bucket, opened by the test through the node's broker."""
    nc = await nats.connect(_broker_url(node))
    try:
        yield objects.NatsObjectStore(nc.jetstream(), "crewlet-files")
    finally:
        await nc.close()


async def _findings_after(node: Node, instant: float, timeout: float = 15.0) -> dict[str, Any]:
    """The ``GET /objects`` answer of the first pass that started after ``instant`` (unix s)."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(base_url=node.url, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        while time.monotonic() < deadline:
            r = await api.get("/objects")
            assert r.status_code == 200, r.text
            view: dict[str, Any] = r.json()
            f = view.get("findings") or {}
            if f.get("at_unix", 0) > instant:
                return view
            await asyncio.sleep(0.2)
    raise AssertionError(f"no collector pass after {instant} within {timeout} s")


def _status(node: Node, *args: str) -> Any:
    return CliRunner().invoke(
        app,
        ["objects", "status", *args],
        env={"CREWLET_URL": node.url, "CREWLET_API_TOKEN": TOKEN, "COLUMNS": "200"},
    )


async def test_an_orphan_past_the_grace_is_deleted_and_a_young_one_kept(
    node: Node, store: objects.NatsObjectStore
) -> None:
    old_key, young_key = "orphans/old-upload", "orphans/young-upload"
    await store.put(old_key, b"bytes no row names" * 10)
    old_at = time.time()
    await asyncio.sleep(GRACE + 0.5)
    await store.put(young_key, b"an upload whose row is on its way")
    young_at = time.time()
    view = await _findings_after(node, young_at)
    f = view["findings"]
    assert await store.head(old_key) is None, f
    kept = {k["key"]: k for k in f["kept"]}
    assert young_key in kept and kept[young_key]["reason"] == "young", f
    assert await store.head(young_key) is not None
    deletions = [
        e for e in node.events() if e.get("event") == "objects_orphan_deleted" and e.get("key") == old_key
    ]
    assert len(deletions) == 1 and deletions[0]["age_seconds"] >= GRACE, deletions
    assert time.time() - old_at >= GRACE
    assert f["pinned"]["stream"] == "CREWLET_TRACKER_LOG" and f["deletion"] == "done"
    assert f["holder"] == "node-0" and f["store"] == {"type": "nats", "bucket": "crewlet-files"}


async def test_a_named_object_deleted_behind_the_stores_back_raises_objects_missing(
    node: Node, store: objects.NatsObjectStore
) -> None:
    data = b"release checklist\n" * 50
    async with httpx.AsyncClient(base_url=node.url, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        up = await api.put("/projects/SUP/files/docs/checklist.md", content=data)
        assert up.status_code == 201, up.text
        row = up.json()["file"]
    view = await _findings_after(node, time.time())
    assert view["missing"] == 0 and view["findings"]["named"] >= 1, view
    assert _status(node).exit_code == 0
    assert await store.head(row["object_key"]) is not None  # named: never collected, however old
    assert await store.delete(row["object_key"])
    view = await _findings_after(node, time.time())
    f = view["findings"]
    assert view["missing"] == 1 and f["missing"][0]["file"] == "SUP/docs/checklist.md@1", f
    assert f["missing"][0]["problem"] == "absent" and f["missing"][0]["key"] == row["object_key"]
    alarms = [
        e for e in node.events() if e.get("event") == "alarm_started" and e.get("kind") == "objects_missing"
    ]
    assert alarms and "SUP/docs/checklist.md@1" in alarms[-1]["files"], alarms
    metrics = httpx.get(node.url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
    assert 'crewlet_alarm_active{kind="objects_missing"} 1.0' in metrics
    out = _status(node)
    assert out.exit_code == 1, out.stdout
    assert (
        "SUP/docs/checklist.md@1" in out.stdout and row["object_key"] in out.stdout and "absent" in out.stdout
    )
    assert "remedy" in out.stdout
    as_json = json.loads(_status(node, "--json").stdout)
    assert as_json["missing"] == 1
    # the remedy: upload the same bytes again; the next pass clears the alarm
    await store.put(row["object_key"], data)
    view = await _findings_after(node, time.time())
    assert view["missing"] == 0, view
    assert _status(node).exit_code == 0
    assert any(
        e.get("event") == "alarm_cleared" and e.get("kind") == "objects_missing" for e in node.events()
    )


def test_objects_status_fails_clearly(node: Node) -> None:
    stopped = f"http://127.0.0.1:{free_port()}"
    out = CliRunner().invoke(
        app, ["objects", "status"], env={"CREWLET_URL": stopped, "CREWLET_API_TOKEN": TOKEN}
    )
    assert out.exit_code == 1 and f"cannot reach the node at {stopped}" in out.stderr
    out = CliRunner().invoke(
        app,
        ["objects", "status"],
        env={"CREWLET_URL": node.url, "CREWLET_API_TOKEN": "wrong-token-wrong-token-xx"},
    )
    assert out.exit_code == 2 and "401" in out.stderr


async def test_the_collector_lists_both_backends_with_sizes_and_ages(backend: Backend) -> None:
    """What a pass judges by, on nats and on a real S3 server (SeaweedFS): every live object with its
    size and last write; a deleted one is gone; a re-stored one is younger (the check before a delete)."""
    before = time.time() - 1.0
    await backend.store.put("a/one", b"x" * 300_000)  # three nats chunks
    await backend.store.put("b/two", b"yy")
    await backend.store.put("c/gone", b"zzz")
    assert await backend.store.delete("c/gone")
    listed = {o.key: o for o in await list_objects(backend.store)}
    assert set(listed) == {"a/one", "b/two"}
    assert listed["a/one"].size == 300_000 and listed["b/two"].size == 2
    for o in listed.values():
        assert before <= o.modified <= time.time() + 1.0, o
    first = await modified_at(backend.store, "b/two")
    assert first is not None and abs(first - listed["b/two"].modified) < 1.0
    await asyncio.sleep(1.1)  # S3 keeps whole seconds
    await backend.store.put("b/two", b"yy")
    again = await modified_at(backend.store, "b/two")
    assert again is not None and again > first
    assert await modified_at(backend.store, "c/gone") is None
