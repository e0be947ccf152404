"""Backups of one data node (ES-81, ES-82, ES-83, ES-84 restore-objects, ES-92 ``backup_age``).

A real node process on a real nats-server takes a backup through ``crewlet backup`` while work items
are being written; the manifest's positions are the copy's checkpoint rows, the files verify, the
holds are released and the announcement lands in the ``backups`` slot. A non-empty destination is
refused by name, and so is bad input (``?dir=`` twice, a NUL byte, a component too long, an
unwritable place: 422, never 500); ``verify --restore`` passes on a fresh backup and fails past a 1 s
cadence, on a corrupt or forged manifest (naming the file and the field) and on an object the restored
estate names that the manifest leaves out; a backup whose objects lost one file is refused by
``restore-objects`` before anything is written, a corrupt manifest or a missing node file without a
traceback. In process: a copy the log was trimmed past gets no manifest, and a disk filling up midway
answers ``backup_no_space`` leaving nothing behind. ``retention status``'s backup sentence tells a
trim blocked at its last tick from a missing backup.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import shutil
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import httpx
import nats
import pytest

from crewlet.backup_cli import verify_restore
from crewlet.retention_cli import _backup_sentence
from shared import estate
from shared.estate.life import _backup
from shared.objects import open_object_store
from tests.support.procs import REPO, TOKEN, VENV_BIN, NatsServer, Node, free_port, node_file

H = {"Authorization": f"Bearer {TOKEN}"}
BUCKET = "crewlet-files"


def _cli(*args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CREWLET_API_TOKEN": TOKEN}
    if url:
        env["CREWLET_URL"] = url
    return subprocess.run(
        [str(VENV_BIN / "crewlet"), *args], capture_output=True, text=True, env=env, timeout=300, cwd=REPO
    )


def _checkpoints(db: Path) -> dict[str, dict[str, Any]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {
            d: {"stream": s, "generation": g, "seq": q}
            for d, s, g, q in con.execute("SELECT domain, stream, generation, seq FROM statelog_checkpoint")
        }
    finally:
        con.close()


def _alarm(node: Node) -> float | None:
    text = node.get("/metrics").text
    for line in text.splitlines():
        if line.startswith('crewlet_alarm_active{kind="backup_age"}'):
            return float(line.split()[-1])
    return None


def _wait(what: str, probe: Callable[[], Any], timeout: float = 40.0) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout} s (last {last!r})")


async def _store_keys(url: str) -> set[str]:
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info(f"OBJ_{BUCKET}", subjects_filter=f"$O.{BUCKET}.M.>")
        return set((info.state.subjects or {}).keys())
    finally:
        await nc.close()


async def _purge_objects(url: str) -> None:
    nc = await nats.connect(url)
    try:
        await nc.jetstream().purge_stream(f"OBJ_{BUCKET}")
    finally:
        await nc.close()


def test_backup_during_writes_verify_and_restore_objects(
    tmp_path: Path,
    nats_server: NatsServer,
    start_node: Callable[..., Node],
    capsys: pytest.CaptureFixture[str],
) -> None:
    port = free_port()
    cfg = node_file(
        tmp_path / "n1",
        node_id="n1",
        port=port,
        stream={"type": "nats", "url": nats_server.url},
        coordination={"type": "embedded-kv"},
        retention={"backup_owner": "ops@lantern"},
    )
    node = start_node(
        "node", "--node", str(cfg), "--company", str(REPO / "examples" / "company.yaml"), name="n1", port=port
    )
    node.wait_ready(60)
    api = httpx.Client(base_url=node.url, headers=H, timeout=30.0)
    # ES-82: never taken -> backup_age is on
    assert _wait("backup_age raised with no backup", lambda: _alarm(node) == 1.0)
    files = {"docs/a.bin": os.urandom(300_000), "docs/b.txt": b"lantern runbook\n" * 100}
    for path, data in files.items():
        up = api.put(f"/projects/ENG/files/{path}", content=data)
        assert up.status_code == 201, up.text
    api.post(
        "/knowledge/pages", json={"space": "ENG", "title": "Before", "body": "written before the backup"}
    )

    stop = threading.Event()
    written: list[str] = []

    def writer() -> None:
        with httpx.Client(base_url=node.url, headers=H, timeout=30.0) as w:
            i = 0
            while not stop.is_set():
                r = w.post("/work", json={"project": "ENG", "title": f"during backup {i}"})
                if r.status_code == 201:
                    written.append(r.json()["item"]["key"])
                i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        _wait("writes flowing", lambda: len(written) >= 5)
        dest = tmp_path / "backups" / "b1"
        out = _cli("backup", "--dir", str(dest), "--url", node.url)
        _wait("writes after the backup", lambda: len(written) >= 5 + 10)
    finally:
        stop.set()
        t.join(30)
    assert out.returncode == 0, out.stderr + out.stdout
    assert "backup of n1 written to" in out.stdout
    manifest = json.loads((dest / "manifest.json").read_text())
    # ES-81: positions equal the copy's checkpoint rows; files verify; no -wal beside either copy
    # (a log this copy never applied a record of, such as an unwritten usage log, has no row: seq 0)
    rows = _checkpoints(dest / "store-replicated.db")
    assert {d: p for d, p in manifest["positions"].items() if d in rows} == rows
    assert all(p["seq"] == 0 for d, p in manifest["positions"].items() if d not in rows)
    assert manifest["positions"]["tracker"]["seq"] > 0
    assert manifest["node"] == "n1" and manifest["owner"] == "ops@lantern"
    for name in ("store.db", "store-replicated.db"):
        f = manifest["files"][name]
        assert _backup.sha256_file(dest / name) == f["sha256"] and f["tables"] > 0
        assert not (dest / f"{name}-wal").exists() and not (dest / f"{name}-shm").exists()
    assert manifest["objects"]["count"] == 2
    for o in manifest["objects"]["items"]:
        assert (dest / o["file"]).read_bytes() in files.values()
    assert manifest["streams"]["type"] == "nats" and "nats account backup" in manifest["streams"]["note"]
    # ES-82: announced in the backups slot; holds released
    listed = api.get("/backups").json()["backups"]
    assert [b["node"] for b in listed] == ["n1"] and listed[0]["positions"] == manifest["positions"]
    assert listed[0]["verified"] is True and listed[0]["dir"] == str(dest.resolve())
    holds = asyncio.run(_hold_keys(nats_server.url))
    assert holds == set(), holds
    assert _wait("backup_age cleared after the backup", lambda: _alarm(node) == 0.0)

    # A non-empty destination is refused by name (409; the CLI exits 2 naming it).
    again = _cli("backup", "--dir", str(dest), "--url", node.url)
    assert (
        again.returncode == 2 and "backup_destination_not_empty" in again.stderr and str(dest) in again.stderr
    )
    rel = api.post("/backup", params={"dir": "relative/dir"})
    assert rel.status_code == 422 and rel.json()["detail"]["field"] == "dir"
    assert api.post("/backup").status_code == 422
    # Bad input is a 422 naming dir, never a 500; nothing is left behind.
    for bad in (
        [("dir", str(tmp_path / "x")), ("dir", str(tmp_path / "y"))],  # ambiguous
        [("dir", str(tmp_path / "nul\x00byte"))],
        [("dir", str(tmp_path / ("n" * 300)))],  # ENAMETOOLONG
        [("dir", "/sys/crewlet-backup-test")],  # not writable (sysfs)
    ):
        r = api.post("/backup", params=cast(Any, bad))
        assert r.status_code == 422 and r.json()["detail"]["field"] == "dir", (bad, r.text)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    assert httpx.post(node.url + "/backup", params={"dir": str(tmp_path / "x")}).status_code == 401

    # ES-83: verify --restore passes on the fresh backup, fails past a 1 s cadence after 2 s.
    assert verify_restore(tmp_path / "backups", 30 * 86400.0) == 0
    # ES-83: a corrupt or forged manifest fails by name (never a traceback, never "no manifest").
    forged = tmp_path / "forged"
    shutil.copytree(dest, forged)
    dropped = manifest["objects"]["items"][0]
    kept = [o for o in manifest["objects"]["items"] if o["key"] != dropped["key"]]
    future = int((time.time() + 86400) * 1_000_000)
    for text, said in (
        (json.dumps({**manifest, "objects": None}), "field objects"),
        ("", "empty"),
        ("{not json", "not valid JSON"),
        ("[]", "JSON object"),
        (json.dumps({**manifest, "taken_at": "yesterday"}), "field taken_at"),
        (json.dumps({**manifest, "format": 2}), "field format"),
        (json.dumps({**manifest, "node": ""}), "field node"),
        (json.dumps({**manifest, "taken_at": future}), "taken in the future"),
        (json.dumps({**manifest, "objects": {"count": 1, "bytes": 1, "items": kept}}), dropped["key"]),
    ):
        (forged / "manifest.json").write_text(text)
        capsys.readouterr()
        assert verify_restore(forged, 30 * 86400.0) == 1, said
        err = capsys.readouterr().err
        assert said in err and "manifest.json" in err and "no manifest.json found" not in err, (said, err)
    time.sleep(2.0)
    assert verify_restore(tmp_path / "backups", 1.0) == 1
    (tmp_path / "empty").mkdir()
    assert verify_restore(tmp_path / "empty", 30 * 86400.0) == 1  # no manifest: debris / nothing

    # ES-82: delete the only manifest: backup_age fires although a backup was taken.
    saved = (dest / "manifest.json").read_text()
    (dest / "manifest.json").unlink()
    assert _wait("backup_age raised once the manifest is gone", lambda: _alarm(node) == 1.0)
    (dest / "manifest.json").write_text(saved)

    # ES-84: restore-objects refuses before anything is written when an object is missing.
    asyncio.run(_purge_objects(nats_server.url))
    assert asyncio.run(_store_keys(nats_server.url)) == set()
    broken = tmp_path / "broken"
    subprocess.run(["cp", "-a", str(dest), str(broken)], check=True)
    gone = manifest["objects"]["items"][0]
    (broken / gone["file"]).unlink()
    refused = _cli("backup", "restore-objects", "--dir", str(broken), "--node", str(cfg))
    assert refused.returncode == 1 and gone["key"] in refused.stderr and "before anything" in refused.stderr
    (forged / "manifest.json").write_text(json.dumps({**manifest, "objects": None}))
    corrupt = _cli("backup", "restore-objects", "--dir", str(forged), "--node", str(cfg))
    assert corrupt.returncode == 1 and "Traceback" not in corrupt.stderr, corrupt.stderr
    assert (
        "manifest.json is corrupt: field objects" in corrupt.stderr and len(corrupt.stderr.splitlines()) == 1
    )
    no_node = _cli("backup", "restore-objects", "--dir", str(dest), "--node", str(tmp_path / "absent.yaml"))
    assert no_node.returncode == 2 and "Traceback" not in no_node.stderr, no_node.stderr
    assert "absent.yaml" in no_node.stderr and "no such file" in no_node.stderr
    assert asyncio.run(_store_keys(nats_server.url)) == set()
    # ... and the intact backup restores every object; the node serves the bytes again.
    ok = _cli("backup", "restore-objects", "--dir", str(dest), "--node", str(cfg))
    assert ok.returncode == 0 and "2 uploaded" in ok.stdout, ok.stderr + ok.stdout
    assert len(ok.stdout.splitlines()) == 1 and not ok.stderr.strip(), ok.stdout + ok.stderr  # no log chatter
    for path, data in files.items():
        assert api.get(f"/projects/ENG/files/{path}").content == data
    api.close()


async def _hold_keys(url: str) -> set[str]:
    nc = await nats.connect(url)
    try:
        kv = await nc.jetstream().key_value("crewlet_trim_holds")
        try:
            return set(await kv.keys())
        except nats.js.errors.NoKeysError:
            return set()
    finally:
        await nc.close()


async def test_a_copy_the_log_was_trimmed_past_gets_no_manifest(
    tmp_path: Path, inproc: Callable[..., Any], nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = await inproc("t1")
    from tests.estate.conftest import seed

    await seed(node, "ENG")
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        store = await open_object_store(_objects_cfg(), cast(Any, _Link(js)))
        estate.EventLog.open(tmp_path / "t1" / "node.db", node_id="t1").close()
        # A disk filling up midway: 507 backup_no_space; the (empty) destination is left empty.
        full = tmp_path / "full"
        full.mkdir()

        def disk_full(_path: Path) -> Any:
            raise sqlite3.OperationalError("database or disk is full")

        monkeypatch.setattr(_backup, "named_objects", disk_full)
        with pytest.raises(estate.BackupFailed) as nospace:
            await estate.take_backup(
                node.est, node_id="t1", dest=full, store_dir=tmp_path / "t1", objects=store, coord=None
            )
        assert nospace.value.code == "backup_no_space" and nospace.value.status == 507
        assert full.is_dir() and list(full.iterdir()) == []
        monkeypatch.undo()
        nospc = _backup._io_failure("x", OSError(errno.ENOSPC, "No space left on device"))
        assert nospc.code == "backup_no_space"
        node.est.appliers["tracker"].pause()
        await asyncio.sleep(1.2)  # the applier finishes the fetch in hand and holds
        for i in range(3):
            await js.publish(f"crewlet.statelog.tracker.obj.raw.x{i}", b"not a record")
        _first, last = await node.est.log.head("tracker")
        await js.purge_stream("CREWLET_TRACKER_LOG", seq=last)  # the log now starts past the copy
        dest = tmp_path / "trimmed"
        with pytest.raises(estate.BackupFailed) as info:
            await estate.take_backup(
                node.est, node_id="t1", dest=dest, store_dir=tmp_path / "t1", objects=store, coord=None
            )
        assert info.value.code == "backup_below_log" and "tracker" in info.value.message
        assert not dest.exists()  # created by the backup, removed with what it wrote
        # an out-of-service copy is refused before anything is written
        node.est.appliers["pages"].faulted = True
        with pytest.raises(estate.BackupFailed) as oos:
            await estate.take_backup(
                node.est,
                node_id="t1",
                dest=tmp_path / "oos",
                store_dir=tmp_path / "t1",
                objects=store,
                coord=None,
            )
        assert oos.value.code == "estate_partition_not_served" and not (tmp_path / "oos").exists()
        node.est.appliers["pages"].faulted = False
        await store.close()
    finally:
        await nc.close()


class _Link:
    def __init__(self, js: Any) -> None:
        self.js = js


def _objects_cfg() -> Any:
    from shared.config import node_config_from_data

    cfg, issues = node_config_from_data(
        {"node": {"id": "t1"}, "store": {"dir": "/tmp/unused"}, "api": {"port": 0}}, file="(test)"
    )
    assert cfg is not None, issues
    return cfg


def test_backup_sentence_after_a_backup_taken_since_the_last_tick() -> None:
    """The floor record predates a fresh backup: say the next tick uses it, not "no backup"."""
    now = time.time() * 1e6
    view: dict[str, Any] = {
        "floors": {"tracker": {"floor": 3, "blocked_by": ["backup_floor"], "terms": {"backup_floor": 0}}},
        "backups": [{"node": "n1", "verified": True, "taken_at": int(now - 14e6)}],
        "retention": {"backup_max_age": 86400.0, "trim_tick": 300.0, "backup_owner": "ops"},
    }
    fresh = _backup_sentence(view) or ""
    assert "blocked by backup_floor at its last tick" in fresh and "s old now exists" in fresh, fresh
    assert "every 5m" in fresh and "No backup recent enough" not in fresh
    view["backups"][0]["taken_at"] = int(now - 2 * 86400e6)
    assert (_backup_sentence(view) or "").startswith("No backup recent enough")
