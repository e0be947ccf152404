"""The estate file: SQLite through SQLAlchemy/SQLModel, WAL, one writer, ``BEGIN IMMEDIATE`` (ES-3).

One :class:`EstateStore` per data process. Writes run on one dedicated writer thread over one
connection, each transaction opened with ``BEGIN IMMEDIATE`` (SQLAlchemy's deferred begin is
overridden by an engine event), so no commit slips between an applier's read and its write and
writers queue in order. Reads run on a small pool of reader connections, each in a deferred
transaction: a consistent snapshot of committed rows (WAL readers never block the writer).

Bounded storage (issue 11): every connection sets ``journal_size_limit`` (``retention.wal_limit_bytes``,
64 MiB), and :meth:`EstateStore.start_checkpoints` runs ``PRAGMA wal_checkpoint(TRUNCATE)`` on the
writer thread every ``retention.checkpoint_interval`` seconds (30). SQLite's own passive
auto-checkpoint cannot reset the WAL while some reader is always inside it (checkpoint
starvation: the file then only grows); a TRUNCATE checkpoint waits (the busy timeout) for the short
read transactions in flight to end, copies every frame back and cuts the file to zero. Writers queue
behind it on the one writer thread; readers go on. :meth:`EstateStore.sizes` reports the file and
WAL sizes for the metrics and ``crewlet retention status``.

The file is exclusive to its process: an ``flock`` on ``estate.db.lock`` refuses a second opener.
A writer that cannot take the lock within ``busy_timeout`` seconds logs ``store_tx_retry`` naming
the knob and rejoins the queue.

A file written by an earlier build is brought up to this build's tables at open (:func:`upgrade`):
columns added since are added with ``ALTER TABLE ... ADD COLUMN`` and their server default, and
missing indexes are created; both are idempotent, so every open may run them. Nothing is ever
dropped or rewritten.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, select, text
from sqlalchemy.exc import OperationalError

from shared import logs

from .._errors import StoreFailed
from ._conns import FastConn, PlainConn, PlainResult
from ._schema import T_CHECKPOINT, Checkpoint, EstateModel, schema_ddl
from ._sql import SqlConn
from ._upgrade import upgrade

__all__ = ["EstateStore", "FastConn", "PlainConn", "PlainResult", "raw_sql", "upgrade"]

T = TypeVar("T")
_log = logs.get("statelog")
_DIGEST_SKIP = {"statelog_checkpoint", "statelog_ledger_watermark"}  # the watermark is node-local (ES-8)


def _engine(path: Path, *, pool: int, immediate: bool, busy_timeout: float, wal_limit: int) -> Engine:
    engine = create_engine(
        f"sqlite:///{path}",
        connect_args={"check_same_thread": False, "timeout": busy_timeout},
        pool_size=pool,
        max_overflow=0,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # let the begin event below decide (pysqlite would BEGIN DEFERRED)
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(
            "PRAGMA synchronous=NORMAL"
        )  # a lost tail replays from the log: the checkpoint is in the rows
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        cur.execute(f"PRAGMA journal_size_limit={int(wal_limit)}")  # a reset WAL shrinks to this
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


class EstateStore:
    """One data node's estate file (ES-1, ES-3).

    Args:
        path: The SQLite file (``<store.dir>/estate.db``).
        readers: Reader connections (``store.max_open_conns``).
        busy_timeout: Seconds a writer waits for the lock before ``store_tx_retry`` (default 5).

    Use :meth:`open` to build one; it creates the schema, or upgrades an older file's.
    """

    def __init__(
        self, path: Path, *, readers: int = 4, busy_timeout: float = 5.0, wal_limit: int = 64 << 20
    ) -> None:
        self.path = path
        self._busy = busy_timeout
        self._wal_limit = wal_limit
        self._checkpoints: asyncio.Task[None] | None = None
        self.wal_peak = 0
        self._lock_fd: int | None = None
        self._writer_pool = ThreadPoolExecutor(1, thread_name_prefix="estate-writer")
        self._reader_pool = ThreadPoolExecutor(readers, thread_name_prefix="estate-reader")
        self._writer: Engine | None = None
        self._reader: Engine | None = None
        self._readers = readers
        self._checkpoint_every: float | None = None
        self._inline: PlainConn | None = None
        self._inline_lock = threading.Lock()
        self.install_fault: Callable[[], None] | None = None
        """Fault-injection seam (ES-58 tests): called before an install replaces the file; raising fails it."""

    @classmethod
    async def open(
        cls, path: Path, *, readers: int = 4, busy_timeout: float = 5.0, wal_limit: int = 64 << 20
    ) -> EstateStore:
        """Open (creating when absent) the estate file and its schema.

        A file from an earlier build gains this build's columns and indexes (:func:`upgrade`).

        Args:
            wal_limit: ``journal_size_limit`` in bytes (``retention.wal_limit_bytes``).

        Raises:
            StoreFailed: another process holds the file, or SQLite could not open it.
        """
        store = cls(path, readers=readers, busy_timeout=busy_timeout, wal_limit=wal_limit)
        await asyncio.get_running_loop().run_in_executor(store._writer_pool, store._open_sync)
        return store

    def _open_sync(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(str(self.path) + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreFailed(
                f"{self.path} is held by another process; the estate file is exclusive (ES-3)"
            ) from None
        self._lock_fd = fd
        self._engines_sync()

    def _engines_sync(self) -> None:
        writer = reader = None
        try:
            writer = _engine(
                self.path, pool=1, immediate=True, busy_timeout=self._busy, wal_limit=self._wal_limit
            )
            reader = _engine(
                self.path,
                pool=self._readers,
                immediate=False,
                busy_timeout=self._busy,
                wal_limit=self._wal_limit,
            )
            with writer.begin() as conn:
                EstateModel.metadata.create_all(conn)
                upgrade(conn)
                for ddl in schema_ddl():
                    conn.exec_driver_sql(ddl)
        except Exception as e:  # noqa: BLE001 - any failure to open is the file's, named with it
            for engine in (writer, reader):
                if engine is not None:
                    engine.dispose()
            detail = e.orig if isinstance(e, OperationalError) else f"{type(e).__name__}: {e}"
            raise StoreFailed(f"cannot open {self.path}: {detail}") from None
        self._writer, self._reader = writer, reader

    # -- install (ES-57, ES-58): swap the file under the process's lock ----------------------------

    @property
    def attached(self) -> bool:
        """True while the file is open (False between :meth:`detach` and a successful :meth:`reattach`)."""
        return self._writer is not None

    def _close_inline(self) -> None:
        with self._inline_lock:
            if self._inline is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._inline.raw.close()
                self._inline = None

    def _detach_sync(self) -> None:
        self._close_inline()
        for engine in (self._writer, self._reader):
            if engine is not None:
                engine.dispose()
        self._writer = self._reader = None

    async def detach(self) -> None:
        """Close the file's connections, keeping the process's exclusive lock (before an install).

        Runs on the writer thread, so the write in hand finishes first; the WAL checkpoint loop stops
        (:meth:`reattach` restarts it).
        """
        self._close_inline()
        if self._checkpoints is not None:
            self._checkpoints.cancel()
            self._checkpoints = None
        await asyncio.get_running_loop().run_in_executor(self._writer_pool, self._detach_sync)

    def _install_sync(self, src: Path) -> None:
        if self.install_fault is not None:
            self.install_fault()
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(self.path) + suffix)
        os.replace(src, self.path)
        with contextlib.suppress(OSError):
            dfd = os.open(str(self.path.parent), os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    async def install(self, src: Path) -> None:
        """Replace the (detached) estate file with ``src`` wholesale and delete its ``-wal``/``-shm``.

        Raises:
            OSError: the file could not be replaced (``src`` is left where it was).
            RuntimeError: the store is attached (call :meth:`detach` first).
        """
        if self.attached:
            raise RuntimeError("install needs a detached store")
        await asyncio.get_running_loop().run_in_executor(self._writer_pool, self._install_sync, src)

    async def reattach(self) -> None:
        """Open the (replaced) file again, run :func:`upgrade`, restart the WAL checkpoints.

        Raises:
            StoreFailed: SQLite could not open the file (the store stays detached).
        """
        await asyncio.get_running_loop().run_in_executor(self._writer_pool, self._engines_sync)
        if self._checkpoint_every is not None:
            self.start_checkpoints(self._checkpoint_every)

    def _write_sync(self, fn: Callable[[Connection], T], fast: bool = False) -> T:
        if self._writer is None:
            raise StoreFailed(f"{self.path} is not open (being replaced, or lost)")
        while True:
            try:
                with self._writer.begin() as conn:
                    return fn(FastConn(conn) if fast else conn)  # type: ignore[arg-type]
            except (OperationalError, sqlite3.OperationalError) as e:
                orig = e.orig if isinstance(e, OperationalError) else e
                if "locked" in str(orig) or "busy" in str(orig):
                    _log.warning("store_tx_retry", knob="store.busy_timeout_seconds", busy_timeout=self._busy)
                    continue
                raise StoreFailed(f"estate write failed: {orig}") from None

    def _read_sync(self, fn: Callable[[Connection], T]) -> T:
        if self._reader is None:
            raise StoreFailed(f"{self.path} is not open (being replaced, or lost)")
        try:
            with self._reader.begin() as conn:
                return fn(conn)
        except OperationalError as e:
            raise StoreFailed(f"estate read failed: {e.orig}") from None

    def _open_inline(self) -> PlainConn:
        raw = sqlite3.connect(self.path, timeout=0.0, isolation_level=None, check_same_thread=False)
        try:
            raw.execute("PRAGMA query_only=ON")
            raw.execute("PRAGMA busy_timeout=0")  # never block the event loop: busy goes to a reader thread
            raw.execute(f"PRAGMA journal_size_limit={int(self._wal_limit)}")
        except sqlite3.Error:
            raw.close()
            raise
        return PlainConn(raw)

    def _drop_inline(self) -> None:
        """Close the inline connection (its lock held); the next inline read opens a fresh one."""
        if self._inline is not None:
            with contextlib.suppress(sqlite3.Error):
                self._inline.raw.close()
            self._inline = None

    def _read_inline_sync(self, fn: Callable[[PlainConn], T]) -> tuple[bool, T | None]:
        """Run ``fn`` on the inline connection in one read transaction; (False, None) when it cannot."""
        if self._reader is None:
            raise StoreFailed(f"{self.path} is not open (being replaced, or lost)")
        if not self._inline_lock.acquire(blocking=False):
            return False, None  # another thread is using it: take a reader thread
        try:
            if self._inline is None:
                self._inline = self._open_inline()
            raw = self._inline.raw
            try:
                raw.execute("BEGIN")
            except sqlite3.OperationalError:
                self._drop_inline()
                return False, None
            try:
                return True, fn(self._inline)
            finally:
                try:
                    raw.execute("COMMIT")
                except sqlite3.Error:
                    self._drop_inline()  # never leave a read transaction open (it would pin the WAL)
        except sqlite3.OperationalError as e:
            if "locked" in str(e) or "busy" in str(e):
                return False, None
            raise StoreFailed(f"estate read failed: {e}") from None
        finally:
            self._inline_lock.release()

    async def read_inline(self, fn: Callable[[SqlConn], T]) -> T:
        """Run a short read ``fn(conn)`` on the calling (event loop) thread in one read transaction.

        For short reads only: point reads (a handful of indexed statements, well under a
        millisecond) and knowledge searches while this copy's recent ones averaged under
        ``INLINE_SEARCH`` (5 ms; ``_service.py``), where the thread hand-off of :meth:`read` costs
        more than the read itself (issue 16, figures 6d and 7a); a longer read would hold the loop.
        ``fn`` gets a :class:`PlainConn` (literal SQL through ``exec_driver_sql``, rows with
        attribute access and ``_mapping``). The inline connection never waits for a lock: a busy
        file, or the connection in use by another thread, runs ``fn`` through :meth:`read` (a
        reader thread, SQLAlchemy's connection) instead. The snapshot is the same as :meth:`read`'s:
        committed rows as of the transaction's first statement.

        Raises:
            StoreFailed: SQLite failed, or the file is detached.
        """
        done, out = self._read_inline_sync(fn)
        if done:
            return out  # type: ignore[return-value]
        return await self.read(fn)

    async def write(self, fn: Callable[[Connection], T], *, fast: bool = False) -> T:
        """Run ``fn(conn)`` in one ``BEGIN IMMEDIATE`` transaction on the writer thread; commit.

        ``fn`` raising rolls the transaction back and re-raises.

        Args:
            fast: ``conn`` is a :class:`FastConn` (literal SQL straight to ``sqlite3``; the
                applier's path, issue 16). ``sqlite3`` errors then reach ``fn``'s caller unwrapped.

        Raises:
            StoreFailed: SQLite failed for a reason other than a busy lock.
        """
        return await asyncio.get_running_loop().run_in_executor(self._writer_pool, self._write_sync, fn, fast)

    async def read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(conn)`` in a read transaction (a snapshot of committed rows) on a reader thread.

        Raises:
            StoreFailed: SQLite failed.
        """
        return await asyncio.get_running_loop().run_in_executor(self._reader_pool, self._read_sync, fn)

    async def checkpoint(self, domain: str) -> Checkpoint | None:
        """Return ``domain``'s checkpoint row, or None before its first apply."""

        def q(conn: Connection) -> Checkpoint | None:
            row = conn.execute(select(T_CHECKPOINT).where(T_CHECKPOINT.c.domain == domain)).first()
            return Checkpoint(**row._mapping) if row is not None else None

        return await self.read(q)

    async def digest(self, *, ledger_skip: frozenset[str] = frozenset()) -> dict[str, Any]:
        """Return a digest of every replicated row (ES-1 check: identical copies have equal digests).

        Args:
            ledger_skip: Logs whose ledger rows are left out: a compacted log's ledger differs between
                copies by design (a copy that replays after a restart never sees the records later
                ones superseded), while the rows those records made are identical (AG-1, ES-69).

        Returns:
            ``{"sha256": hex, "tables": {name: {"rows": n, "sha256": hex}}}`` over every estate
            table except the checkpoint (positions are compared apart) and the derived FTS index.
        """

        def q(conn: Connection) -> dict[str, Any]:
            tables: dict[str, Any] = {}
            whole = hashlib.sha256()
            for name, table in sorted(EstateModel.metadata.tables.items()):
                if name in _DIGEST_SKIP:
                    continue
                order = [c for c in table.primary_key.columns]
                h = hashlib.sha256()
                n = 0
                for row in conn.execute(select(table).order_by(*order)):
                    if name == "statelog_ledger" and row._mapping["domain"] in ledger_skip:
                        continue
                    h.update(json.dumps(list(row), default=str, ensure_ascii=False).encode() + b"\n")
                    n += 1
                tables[name] = {"rows": n, "sha256": h.hexdigest()}
                whole.update(f"{name}:{tables[name]['sha256']}\n".encode())
            return {"sha256": whole.hexdigest(), "tables": tables}

        return await self.read(q)

    def sizes(self) -> dict[str, int]:
        """Return ``{"store_bytes", "wal_bytes", "wal_peak_bytes"}`` of the estate file (0 when absent)."""

        def size(p: Path) -> int:
            try:
                return p.stat().st_size
            except OSError:
                return 0

        wal = size(Path(str(self.path) + "-wal"))
        self.wal_peak = max(self.wal_peak, wal)
        return {"store_bytes": size(self.path), "wal_bytes": wal, "wal_peak_bytes": self.wal_peak}

    def _checkpoint_sync(self) -> tuple[int, int, int]:
        if self._writer is None:
            raise StoreFailed(f"{self.path} is not open")
        raw = self._writer.raw_connection()  # autocommit: a checkpoint cannot run inside BEGIN
        try:
            cur = raw.cursor()
            row = cur.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            cur.close()
        finally:
            raw.close()
        return (int(row[0]), int(row[1]), int(row[2])) if row is not None else (0, 0, 0)

    async def wal_checkpoint(self) -> dict[str, int]:
        """Checkpoint the WAL into the file and truncate it (``PRAGMA wal_checkpoint(TRUNCATE)``).

        Runs on the writer thread, so no write is in flight; waits up to the busy timeout for
        readers to leave the WAL.

        Returns:
            ``{"busy": 0|1, "wal_frames", "checkpointed_frames", "wal_bytes_before", "wal_bytes_after"}``;
            ``busy`` 1 means a reader kept it from finishing (the next one tries again).

        Raises:
            StoreFailed: SQLite failed.
        """
        before = self.sizes()["wal_bytes"]
        try:
            busy, frames, done = await asyncio.get_running_loop().run_in_executor(
                self._writer_pool, self._checkpoint_sync
            )
        except OperationalError as e:
            raise StoreFailed(f"estate checkpoint failed: {e.orig}") from None
        return {
            "busy": busy,
            "wal_frames": frames,
            "checkpointed_frames": done,
            "wal_bytes_before": before,
            "wal_bytes_after": self.sizes()["wal_bytes"],
        }

    def start_checkpoints(self, interval: float) -> None:
        """Checkpoint the WAL every ``interval`` seconds until :meth:`close` (see the module docstring)."""

        async def loop() -> None:
            while self._writer is not None:
                await asyncio.sleep(interval)
                try:
                    out = await self.wal_checkpoint()
                except StoreFailed as e:
                    _log.warning("store_wal_checkpoint_failed", error=str(e))
                    continue
                if out["busy"]:
                    _log.info("store_wal_checkpoint_busy", **out)

        self._checkpoint_every = interval
        if self._checkpoints is None:
            self._checkpoints = asyncio.create_task(loop(), name="estate-wal-checkpoint")

    def close(self) -> None:
        """Dispose the engines, stop the threads and release the file lock (idempotent)."""
        if self._checkpoints is not None:
            self._checkpoints.cancel()
            self._checkpoints = None
        for engine in (self._writer, self._reader):
            if engine is not None:
                engine.dispose()
        self._writer = self._reader = None
        self._close_inline()
        self._writer_pool.shutdown(wait=True)
        self._reader_pool.shutdown(wait=True)
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)
            self._lock_fd = None


def raw_sql(conn: Connection, sql: str, **params: Any) -> Any:
    """Execute literal SQL (FTS statements SQLAlchemy has no construct for)."""
    return conn.execute(text(sql), params)
