"""Restoring a 3-node fleet from one node's backup, by the README's runbook (ES-81, ES-84).

Three data nodes on the 3-member NATS cluster (tests/fleet/harness.py). Work items, pages and a file
are written; ``crewlet backup`` runs against node ``a`` while items keep being written through ``b``;
more are written after it. Then the whole fleet is stopped, each node's store directory wiped and the
object bucket emptied (the cluster and its logs survive), and the README's "Restore from a backup"
steps are followed: ``store-replicated.db`` becomes ``estate.db`` on all three nodes, ``store.db``
becomes ``node.db`` on ``a`` only (the node that took it: its own events), ``crewlet backup
restore-objects`` puts the objects back, and all three start at once. Checked: every work item written
before, during and after the backup is on every node (the log replays the tail past the restored
checkpoint), the pages and the file's bytes are served by every node, the copies reach one position
with equal digests, and ``a``'s restored event log holds what it published before the backup.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import nats

from shared.estate import Call
from shared.router import decode_answer, encode_call, rpc_subject
from tests.fleet.harness import Fleet, wait_for
from tests.support.procs import REPO, TOKEN, VENV_BIN


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CREWLET_API_TOKEN": TOKEN}
    return subprocess.run(
        [str(VENV_BIN / "crewlet"), *args], capture_output=True, text=True, env=env, timeout=300, cwd=REPO
    )


async def _ask(urls: str, node: str, op: str) -> Any:
    nc = await nats.connect(servers=urls.split(","))
    try:
        msg = await nc.request(rpc_subject(node), encode_call(Call(op=op, args={})), timeout=10)
        return decode_answer(msg.data)
    finally:
        await nc.close()


async def _purge_objects(urls: str) -> int:
    nc = await nats.connect(servers=urls.split(","))
    try:
        js = nc.jetstream()
        await js.purge_stream("OBJ_crewlet-files")
        return int((await js.stream_info("OBJ_crewlet-files")).state.messages)
    finally:
        await nc.close()


def _level_digests(fleet: Fleet, names: tuple[str, ...], timeout: float = 90.0) -> tuple[dict[str, int], str]:
    assert fleet.cluster is not None
    urls = fleet.cluster.urls
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            status = {n: asyncio.run(_ask(urls, n, "estate.status")).result for n in names}
            positions = {
                n: tuple(s["domains"][d]["applied"] for d in ("tracker", "pages")) for n, s in status.items()
            }
            lags = [s["domains"][d]["lag"] for s in status.values() for d in ("tracker", "pages")]
            last = positions
            if len(set(positions.values())) == 1 and not any(lags):
                digests = {
                    n: asyncio.run(_ask(urls, n, "estate.digest")).result["digest"]["sha256"] for n in names
                }
                assert len(set(digests.values())) == 1, digests
                tracker, pages = next(iter(positions.values()))
                return {"tracker": tracker, "pages": pages}, next(iter(digests.values()))
        except (nats.errors.Error, TimeoutError, AttributeError, TypeError) as e:
            last = repr(e)
        time.sleep(0.3)
    raise AssertionError(f"copies never reached one position: {last}")


def test_a_fleet_restored_from_one_backup_serves_everything(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path / "fleet")
    names = fleet.names
    try:
        fleet.boot()  # all three at once, as an orchestrator starts them
        keys: list[str] = []
        with fleet.api("a") as a, fleet.api("c") as c:
            for i in range(5):
                r = (a if i % 2 == 0 else c).post("/work", json={"project": "ENG", "title": f"before {i}"})
                assert r.status_code == 201, r.text
                keys.append(r.json()["item"]["key"])
            page = c.post(
                "/knowledge/pages",
                json={"space": "ENG", "title": "Restore drill", "body": "stop, copy, start"},
            )
            assert page.status_code in (200, 201), page.text
            blob = os.urandom(400_000)
            up = a.put("/projects/ENG/files/drill/blob.bin", content=blob)
            assert up.status_code == 201, up.text

        stop = threading.Event()
        during: list[str] = []

        def writer() -> None:
            with fleet.api("b") as b:
                i = 0
                while not stop.is_set():
                    r = b.post("/work", json={"project": "ENG", "title": f"during {i}"})
                    if r.status_code == 201:
                        during.append(r.json()["item"]["key"])
                    i += 1

        t = threading.Thread(target=writer)
        t.start()
        try:
            wait_for("writes flowing", lambda: len(during) >= 3, timeout=30)
            backup_dir = tmp_path / "backup"
            out = _cli("backup", "--dir", str(backup_dir), "--url", fleet.nodes["a"].url)
            n_at_backup = len(during)
            wait_for("writes after the backup", lambda: len(during) >= n_at_backup + 5, timeout=30)
        finally:
            stop.set()
            t.join(30)
        assert out.returncode == 0, out.stderr + out.stdout
        manifest = json.loads((backup_dir / "manifest.json").read_text())
        assert manifest["node"] == "a" and manifest["objects"]["count"] == 1
        with fleet.api("a") as a:
            after = a.post("/work", json={"project": "ENG", "title": "after the backup"})
            assert after.status_code == 201
            keys += during + [after.json()["item"]["key"]]
            before_positions, _ = _level_digests(fleet, names)

        # Step 1: stop every node (the cluster keeps running). Then the disaster: every store
        # directory and every object gone.
        for node in fleet.nodes.values():
            node.stop(grace=15)
        for n in names:
            shutil.rmtree(tmp_path / "fleet" / n / "store")
        assert fleet.cluster is not None
        assert asyncio.run(_purge_objects(fleet.cluster.urls)) == 0

        # Step 2: the files, from the one backup set, keeping node ids.
        for n in names:
            store = tmp_path / "fleet" / n / "store"
            store.mkdir(parents=True)
            shutil.copyfile(backup_dir / "store-replicated.db", store / "estate.db")
            if n == manifest["node"]:
                shutil.copyfile(backup_dir / "store.db", store / "node.db")
            assert not list(store.glob("*-wal")) and not list(store.glob("*-shm"))
        # Step 3: the objects back into the store the node files name.
        restored = _cli(
            "backup", "restore-objects", "--dir", str(backup_dir), "--node", str(fleet.files["a"])
        )
        assert restored.returncode == 0 and "1 uploaded" in restored.stdout, restored.stderr + restored.stdout
        # Step 4: start every node, all at once.
        for n in names:
            fleet.start(n)
        for n in names:
            fleet.nodes[n].wait_ready(120)

        # Step 5: check.
        positions, _digest = _level_digests(fleet, names)  # one position, equal digests on all three
        assert all(positions[d] >= before_positions[d] for d in positions), (positions, before_positions)
        assert positions["tracker"] >= manifest["positions"]["tracker"]["seq"]
        for n in names:
            with fleet.api(n) as api:
                missing = [k for k in keys if api.get(f"/work/{k}").status_code != 200]
                assert not missing, (n, missing)
                pages = api.get("/knowledge/pages", params={"space": "ENG"}).json()["pages"]
                assert "Restore drill" in [p["title"] for p in pages]
                got = api.get("/projects/ENG/files/drill/blob.bin")
                assert got.status_code == 200 and got.content == blob
        with fleet.api("a") as a:
            events = a.get("/events", params={"limit": 400})
            assert events.status_code == 200 and keys[0] in events.text  # a's own history came back
    finally:
        fleet.stop()
