"""The estate's inline read path (issue 16, figure 6d): a point read on the event loop thread over a
plain ``sqlite3`` connection that never waits — busy or in use, it falls back to a reader thread,
with the same answer — and that is closed when the file is detached."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from shared.estate.store import EstateStore


def _count(conn: Any) -> int:
    return int(conn.exec_driver_sql("SELECT count(*) FROM probe").scalar())


async def _store(path: Path) -> EstateStore:
    store = await EstateStore.open(path)
    await store.write(lambda c: c.exec_driver_sql("CREATE TABLE probe (k TEXT, v TEXT)"))
    return store


async def test_inline_answers_like_a_reader_and_falls_back_while_held(tmp_path: Path) -> None:
    store = await _store(tmp_path / "estate.db")
    try:
        await store.write(lambda c: c.exec_driver_sql("INSERT INTO probe VALUES ('T-1', 'one')"))
        assert await store.read_inline(_count) == await store.read(_count) == 1
        assert store._inline is not None  # the inline connection answered
        with store._inline_lock:  # another thread is using it: a reader thread answers instead
            assert await store.read_inline(_count) == 1
        rows = await store.read_inline(lambda c: c.exec_driver_sql("SELECT k, v FROM probe").all())
        assert [(r.k, r._mapping["v"]) for r in rows] == [("T-1", "one")]
        await store.detach()
        assert store._inline is None  # detach closes it: no read transaction pins the file
    finally:
        store.close()


async def test_a_busy_file_falls_back_to_a_reader_thread(tmp_path: Path) -> None:
    store = await _store(tmp_path / "estate.db")
    try:
        assert await store.read_inline(_count) == 0
        inline = store._inline
        assert inline is not None
        real = inline.raw

        class Busy:
            """The inline connection, whose BEGIN meets a locked file."""

            def execute(self, sql: str, *args: Any) -> Any:
                if sql == "BEGIN":
                    raise sqlite3.OperationalError("database is locked")
                return real.execute(sql, *args)

            def close(self) -> None:
                real.close()

        inline.raw = Busy()  # type: ignore[assignment]
        assert await store.read_inline(_count) == 0  # answered by a reader thread
        assert store._inline is None  # the refused connection was dropped; the next read opens anew
        assert await store.read_inline(_count) == 0 and store._inline is not None
    finally:
        store.close()
