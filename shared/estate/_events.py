"""The node-local event log (ES-77): each data node keeps the events it published.

A second SQLite file (``node.db``), apart from the estate, because a snapshot of the estate must not
carry the audit log (spec/estate.md §0). Events are written inline at publish time by the node that
published them — no consumer group, so no two nodes write one row and no rebalance loses one — and
upserted on ``(event_time, event_id)``: publishing the same event twice yields one row. Filterable
columns are ``event_type``, ``source``, ``category``, ``agent_id``, ``agent_role``, ``task_id``,
``channel_id``, ``sender``, ``trace_id``, ``span_id``, ``parent_span_id``; the rest is JSON. Rows
older than 30 days are swept when the log opens. Reads page by keyset, newest first, ``limit`` ≤ 400.
"""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

from sqlalchemy import Connection, Engine, Table, create_engine, delete, event, select, tuple_
from sqlalchemy.dialects.sqlite import insert
from sqlalchemy.orm import registry
from sqlmodel import Field, SQLModel

from shared import logs

from ._errors import InvalidField

__all__ = ["EVENT_LIMIT", "EVENT_RETENTION_DAYS", "TRACE_LIMIT", "EventLog", "EventRow"]

_log = logs.get("events")
EVENT_LIMIT = 400
"""Most events one ``GET /events`` page returns (ES-77)."""
TRACE_LIMIT = 500
"""Most events one trace read returns (ES-77)."""
EVENT_RETENTION_DAYS = 30
"""Days the audit log keeps (ES-77)."""
_FILTERS = (
    "event_type",
    "source",
    "category",
    "agent_id",
    "agent_role",
    "task_id",
    "channel_id",
    "sender",
    "trace_id",
    "span_id",
    "parent_span_id",
)


class _NodeModel(SQLModel, registry=registry()):
    """Base of the node-local tables."""


class EventRow(_NodeModel, table=True):
    """``crewlet_events``: one published event; instants are unix microseconds."""

    __tablename__ = "crewlet_events"
    event_time: int = Field(primary_key=True)
    event_id: str = Field(primary_key=True)
    event_type: str = Field(index=True)
    source: str = ""
    category: str = ""
    agent_id: str | None = None
    agent_role: str | None = None
    task_id: str | None = Field(default=None, index=True)
    channel_id: str | None = None
    sender: str | None = None
    trace_id: str | None = Field(default=None, index=True)
    span_id: str | None = None
    parent_span_id: str | None = None
    node: str = ""
    data: str = "{}"


class EventParty(_NodeModel, table=True):
    """``crewlet_event_parties``: who an event concerns (seat handles, with a role)."""

    __tablename__ = "crewlet_event_parties"
    event_time: int = Field(primary_key=True)
    event_id: str = Field(primary_key=True)
    party: str = Field(primary_key=True)
    role: str = ""


T_EVENTS = cast(Table, EventRow.__table__)  # type: ignore[attr-defined]
T_PARTIES = cast(Table, EventParty.__table__)  # type: ignore[attr-defined]


class EventLog:
    """One data node's event log.

    Use :meth:`open`. :meth:`record` is fire-and-forget on a writer thread (it never blocks the loop
    or fails a caller); :meth:`flush` waits for what was recorded.
    """

    def __init__(self, engine: Engine, node_id: str) -> None:
        self._engine = engine
        self.node_id = node_id
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="events-writer")
        self._pending: set[Future[None]] = set()

    @classmethod
    def open(cls, path: Path, *, node_id: str) -> EventLog:
        """Open (creating) ``node.db`` and sweep events older than 30 days."""
        path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            f"sqlite:///{path}", connect_args={"check_same_thread": False}, pool_size=2, max_overflow=2
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
            dbapi_conn.execute("PRAGMA synchronous=NORMAL")

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        with engine.begin() as conn:
            _NodeModel.metadata.create_all(conn)
            cutoff = int((time.time() - EVENT_RETENTION_DAYS * 86400) * 1_000_000)
            conn.execute(delete(T_EVENTS).where(T_EVENTS.c.event_time < cutoff))
            conn.execute(delete(T_PARTIES).where(T_PARTIES.c.event_time < cutoff))
        return cls(engine, node_id)

    def _write(self, ev: dict[str, Any]) -> None:
        row = {k: ev.get(k) for k in _FILTERS}
        row.update(
            event_time=int(ev["event_time"]),
            event_id=str(ev["event_id"]),
            node=self.node_id,
            event_type=str(ev.get("event_type") or ""),
            source=str(ev.get("source") or ""),
            category=str(ev.get("category") or ""),
            data=json.dumps(ev.get("data") or {}, sort_keys=True, ensure_ascii=False, default=str),
        )
        with self._engine.begin() as conn:
            conn.execute(
                insert(T_EVENTS)
                .values(**row)
                .on_conflict_do_update(
                    index_elements=["event_time", "event_id"],
                    set_={k: v for k, v in row.items() if k not in ("event_time", "event_id")},
                )
            )
            for party, role in (ev.get("parties") or {}).items():
                conn.execute(
                    insert(T_PARTIES)
                    .values(event_time=row["event_time"], event_id=row["event_id"], party=party, role=role)
                    .on_conflict_do_nothing()
                )

    def record(self, ev: dict[str, Any]) -> None:
        """Upsert one event on the writer thread (ES-77); a failure is logged, never raised.

        Args:
            ev: ``{event_time (unix µs), event_id, event_type, source?, category?, <filter columns>?,
                data? (JSON object), parties? {handle: role}}``.
        """

        def run() -> None:
            try:
                self._write(ev)
            except Exception as e:  # noqa: BLE001 - the audit log never fails the caller
                _log.warning(
                    "event_record_failed", event_id=ev.get("event_id"), error=f"{type(e).__name__}: {e}"
                )

        fut = self._pool.submit(run)
        self._pending.add(fut)
        fut.add_done_callback(self._pending.discard)

    async def flush(self) -> None:
        """Wait until every recorded event is written."""
        if self._pending:
            await asyncio.gather(*(asyncio.wrap_future(f) for f in list(self._pending)))

    async def query(
        self,
        *,
        limit: int = 100,
        before: str | None = None,
        filters: dict[str, str] | None = None,
        event_id: str | None = None,
        max_limit: int = EVENT_LIMIT,
    ) -> dict[str, Any]:
        """Return one page of events, newest first (ES-77).

        Args:
            limit: 1..400.
            before: The ``next`` cursor of the previous page (``<event_time>:<event_id>``), or None.
            filters: Column → exact value, for the filterable columns.
            event_id: Only the event with this id.
            max_limit: The largest ``limit`` allowed (400; a trace read allows 500).

        Returns:
            ``{"events": [...], "next": cursor or None}``.

        Raises:
            InvalidField: a bad ``limit``, ``before`` or filter name.
        """
        if not 1 <= limit <= max_limit:
            raise InvalidField("limit", f"must be 1..{max_limit}")
        q = select(T_EVENTS)
        if event_id is not None:
            q = q.where(T_EVENTS.c.event_id == event_id)
        for name, value in (filters or {}).items():
            if name not in _FILTERS:
                raise InvalidField(name, f"is not a filter; use one of {', '.join(_FILTERS)}")
            q = q.where(T_EVENTS.c[name] == value)
        if before:
            t, sep, eid = before.partition(":")
            if not sep or not t.isdigit():
                raise InvalidField("before", "is not a cursor from a previous page")
            q = q.where(tuple_(T_EVENTS.c.event_time, T_EVENTS.c.event_id) < tuple_(int(t), eid))
        q = q.order_by(T_EVENTS.c.event_time.desc(), T_EVENTS.c.event_id.desc()).limit(limit + 1)

        def run() -> list[Any]:
            with self._engine.connect() as conn:
                return list(conn.execute(q).all())

        rows = await asyncio.get_running_loop().run_in_executor(None, run)
        more = len(rows) > limit
        rows = rows[:limit]
        events = [
            {
                **{
                    k: r._mapping[k]
                    for k in (
                        "event_time",
                        "event_id",
                        "event_type",
                        "source",
                        "category",
                        *_FILTERS[3:],
                        "node",
                    )
                },
                "data": json.loads(r.data),
            }
            for r in rows
        ]
        last = rows[-1] if rows else None
        return {"events": events, "next": f"{last.event_time}:{last.event_id}" if more and last else None}

    async def get(self, event_id: str) -> dict[str, Any] | None:
        """Return the event ``event_id`` (the newest row with that id), or None."""
        page = await self.query(limit=1, filters={}, event_id=event_id)
        return page["events"][0] if page["events"] else None

    def close(self) -> None:
        """Finish pending writes and close."""
        self._pool.shutdown(wait=True)
        self._engine.dispose()
