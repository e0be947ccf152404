"""The node's own turn records (CO-20, CO-22; DESIGN.md "Stores": ``node.db``).

One SQLite file per node under ``store.dir`` (``node.db``), separate from the replicated estate:
turn history is node-local and outlives the node only through OTLP export (FL-6, ES-80). The
:class:`TurnStore` implements the turn engine's recorder protocol (``shared.turns.TurnRecorder``)
and answers this node's share of ``GET /turns``, ``GET /turns/{id}`` and ``GET /tokens/breakdown``,
which an ingress gathers from every live node (``shared.history``, ES-79).

Rows: one ``turns`` row per execution (filterable columns plus the whole record as JSON: its
phase, rounds with token counts, tool executions and prompts). Token rollups per work item,
seat-day and org-day are SQL over those rows (CO-22). Writes run in a worker thread so the event
loop never waits on the disk; SQLite is in WAL mode with one writer.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["TurnStore", "prune_turns"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS turns (
    turn_id TEXT PRIMARY KEY,
    work_key TEXT NOT NULL,
    seat TEXT NOT NULL,
    trigger_id TEXT NOT NULL DEFAULT '',
    trigger_source TEXT NOT NULL DEFAULT '',
    message_id TEXT,
    outcome TEXT NOT NULL,
    error_kind TEXT,
    error TEXT,
    work_item TEXT,
    provider_key TEXT,
    model TEXT,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    rounds INTEGER NOT NULL DEFAULT 0,
    tool_calls INTEGER NOT NULL DEFAULT 0,
    started_at REAL NOT NULL,
    ended_at REAL,
    day TEXT NOT NULL,
    trace_id TEXT NOT NULL DEFAULT '',
    node TEXT NOT NULL DEFAULT '',
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS turns_seat ON turns(seat, started_at);
CREATE INDEX IF NOT EXISTS turns_work_item ON turns(work_item);
CREATE INDEX IF NOT EXISTS turns_work_key ON turns(work_key);
CREATE INDEX IF NOT EXISTS turns_started ON turns(started_at);
"""

_FILTERS = ("seat", "work_item", "work_key", "outcome")


def abandoned_note(turn_id: str) -> str:
    """The ``error`` an API message shows while its turn is abandoned and its delivery waits to come
    back (the node running it was killed; its restart marked the turn ``abandoned``; CO-8).

    Args:
        turn_id: The abandoned turn's id. Returns one sentence naming it; raises nothing."""
    return (
        f"its turn {turn_id} was abandoned: the node stopped during it; it runs again when its "
        "delivery comes back (after stream.ack_wait_seconds)"
    )


class TurnStore:
    """Turn records in ``node.db`` (CO-20).

    Args:
        path: The SQLite file; its directory is created.
        node: This node's id, stored on every row.

    Attributes:
        on_finished: Called with each finished turn's result after its row is written (the node
            runner emits the ``turn.finished`` event there, ES-77/ES-78); a failure is swallowed.
        abandoned_at_open: ``(turn_id, message_id)`` of every API message's turn this open found
            still running and marked ``abandoned`` (a previous incarnation died mid-turn): the
            seats role sets those messages back to ``queued`` (:func:`services.seats.messages.requeue_abandoned`),
            and ``GET /messages/{id}`` reads such a turn's message as ``queued`` until then.
    """

    def __init__(self, path: Path, *, node: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._node = node
        self.on_finished: Callable[[Any], None] | None = None
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA busy_timeout=5000")
            self._db.executescript(_SCHEMA)
            # a turn still "running" in the file belongs to a previous incarnation of this node that
            # died mid-turn; its delivery is redelivered (and worked again) elsewhere
            self.abandoned_at_open = [
                (str(r["turn_id"]), str(r["message_id"]))
                for r in self._db.execute(
                    "SELECT turn_id, message_id FROM turns WHERE outcome = 'running' AND message_id IS NOT NULL"
                )
            ]
            self._db.execute(
                "UPDATE turns SET outcome = 'abandoned', error = 'the node stopped during the turn' "
                "WHERE outcome = 'running'"
            )

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._db.close()

    def _write(self, sql: str, args: tuple[Any, ...]) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(sql, args)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    # -- the recorder protocol (shared.turns.TurnRecorder) ------------------------------------------

    async def turn_started(self, start: Any) -> None:
        """Insert the row as ``running`` so ``GET /turns`` shows a turn in flight."""
        trig = start.trigger
        payload = getattr(trig, "payload", {}) or {}
        row = (
            start.turn_id,
            start.work_key,
            start.seat,
            getattr(trig, "event_id", "") or "",
            getattr(trig, "source", "") or "",
            payload.get("message_id") if isinstance(payload, dict) else None,
            "running",
            None,
            None,
            None,
            None,
            None,
            0,
            0,
            0,
            0,
            start.started_at,
            None,
            datetime.fromtimestamp(start.started_at, UTC).date().isoformat(),
            start.trace_id or "",
            self._node,
            json.dumps({"turn_id": start.turn_id, "seat": start.seat, "outcome": "running"}),
        )
        await asyncio.to_thread(
            self._write, "INSERT OR REPLACE INTO turns VALUES (" + ",".join("?" * 22) + ")", row
        )

    async def phase_started(self, start: Any, phase: Any) -> None:
        """Nothing stored until the phase ends."""

    async def round_finished(self, start: Any, record: Any) -> None:
        """Rounds are stored with the finished turn."""

    async def tool_finished(self, start: Any, execution: Any) -> None:
        """Tool executions are stored with the finished turn."""

    async def phase_finished(self, start: Any, phase: Any) -> None:
        """Phases are stored with the finished turn."""

    async def turn_finished(self, result: Any) -> None:
        """Write the final row: outcome, tokens, charge, and the whole record as JSON."""
        record = result.to_dict()
        record["node"] = self._node  # one JSON pass below; dataclass leftovers become strings
        charge = result.work_item.key if result.work_item is not None else None
        await asyncio.to_thread(
            self._write,
            "UPDATE turns SET outcome=?, error_kind=?, error=?, work_item=?, provider_key=?, model=?, "
            "input_tokens=?, output_tokens=?, rounds=?, tool_calls=?, ended_at=?, record=? WHERE turn_id=?",
            (
                result.outcome,
                result.error_kind,
                result.error,
                charge,
                result.provider_keys[-1] if result.provider_keys else None,
                result.models[-1] if result.models else None,
                result.input_tokens,
                result.output_tokens,
                len(result.rounds),
                len(result.tool_calls),
                result.ended_at or time.time(),
                json.dumps(record, default=str),
                result.turn_id,
            ),
        )
        if self.on_finished is not None:
            with contextlib.suppress(Exception):  # an event never fails the turn's record
                self.on_finished(result)

    # -- reads -----------------------------------------------------------------------------------

    def _summary(self, row: sqlite3.Row) -> dict[str, Any]:
        out = {k: row[k] for k in row.keys() if k not in ("record",)}
        out["tokens"] = {
            "input": row["input_tokens"],
            "output": row["output_tokens"],
            "total": row["input_tokens"] + row["output_tokens"],
        }
        return out

    async def list(
        self, *, filters: dict[str, str | None] | None = None, limit: int = 50, sort: str = "-started"
    ) -> list[dict[str, Any]]:
        """Return turn summaries, newest first (or by most tokens with ``sort="-tokens"``).

        Args:
            filters: Any of ``seat``, ``work_item``, ``work_key``, ``outcome`` (exact match).
            limit: At most this many rows (1..500).
            sort: ``-started`` or ``-tokens``.
        """
        where: list[str] = []
        args: list[Any] = []
        for key, value in (filters or {}).items():
            if key in _FILTERS and value:
                where.append(f"{key} = ?")
                args.append(value)
        order = "input_tokens + output_tokens DESC" if sort == "-tokens" else "started_at DESC"
        sql = "SELECT * FROM turns" + (" WHERE " + " AND ".join(where) if where else "")
        sql += f" ORDER BY {order} LIMIT ?"
        args.append(max(1, min(500, limit)))

        def run() -> list[dict[str, Any]]:
            with self._lock:
                return [self._summary(r) for r in self._db.execute(sql, args).fetchall()]

        return await asyncio.to_thread(run)

    async def get(self, turn_id: str) -> dict[str, Any] | None:
        """Return one turn with its whole record (phase, rounds, tool executions), or None."""

        def run() -> dict[str, Any] | None:
            with self._lock:
                row = self._db.execute("SELECT * FROM turns WHERE turn_id = ?", (turn_id,)).fetchone()
            if row is None:
                return None
            out = self._summary(row)
            out["record"] = json.loads(row["record"])
            return out

        return await asyncio.to_thread(run)

    async def finished_between(
        self, start: float, end: float, known: Mapping[str, float] | None = None
    ) -> builtins.list[dict[str, Any]]:
        """Return the finished turns started in ``[start, end)`` (unix seconds), for usage days (ES-69).

        Args:
            start: Inclusive, unix seconds.
            end: Exclusive, unix seconds.
            known: Turn id → ``ended_at`` the caller already read: such a row comes back with
                ``record`` None instead of its parsed record (a tick re-reads only what changed).

        Returns:
            One dict per turn: ``turn_id``, ``seat``, ``outcome``, ``started_at``, ``ended_at``,
            ``input_tokens``, ``output_tokens``, ``provider_key``, ``model``, ``record`` (a dict,
            {} when unparsable, or None as above). Running turns are left out.

        Raises:
            sqlite3.Error: the file could not be read.
        """
        seen = dict(known or {})
        cols = (
            "turn_id, seat, outcome, started_at, ended_at, input_tokens, output_tokens, provider_key, model"
        )

        def run() -> list[dict[str, Any]]:
            with self._lock:
                rows = self._db.execute(
                    f"SELECT {cols} FROM turns WHERE started_at >= ? AND started_at < ? AND outcome != 'running'",
                    (start, end),
                ).fetchall()
                out = [dict(r) for r in rows]
                for row in out:
                    if row["turn_id"] in seen and seen[row["turn_id"]] == float(row["ended_at"] or 0.0):
                        row["record"] = None
                        continue
                    raw = self._db.execute("SELECT record FROM turns WHERE turn_id = ?", (row["turn_id"],))
                    try:
                        record = json.loads(raw.fetchone()[0])
                    except (TypeError, ValueError):
                        record = {}
                    row["record"] = record if isinstance(record, dict) else {}
            return out

        return await asyncio.to_thread(run)

    async def token_breakdown(self, *, days: int = 30) -> dict[str, Any]:
        """Token rollups (CO-22): per seat-day, per org-day and per work item, over ``days`` days."""
        since = time.time() - days * 86400

        def run() -> dict[str, Any]:
            with self._lock:
                seat_day = self._db.execute(
                    "SELECT seat, day, SUM(input_tokens) i, SUM(output_tokens) o, COUNT(*) n FROM turns "
                    "WHERE started_at >= ? GROUP BY seat, day ORDER BY day, seat",
                    (since,),
                ).fetchall()
                org_day = self._db.execute(
                    "SELECT day, SUM(input_tokens) i, SUM(output_tokens) o, COUNT(*) n FROM turns "
                    "WHERE started_at >= ? GROUP BY day ORDER BY day",
                    (since,),
                ).fetchall()
                items = self._db.execute(
                    "SELECT work_item, SUM(input_tokens) i, SUM(output_tokens) o, COUNT(*) n FROM turns "
                    "WHERE work_item IS NOT NULL AND started_at >= ? GROUP BY work_item ORDER BY work_item",
                    (since,),
                ).fetchall()

            def tok(r: sqlite3.Row) -> dict[str, int]:
                return {
                    "input": int(r["i"] or 0),
                    "output": int(r["o"] or 0),
                    "total": int((r["i"] or 0) + (r["o"] or 0)),
                    "turns": int(r["n"]),
                }

            return {
                "node": self._node,
                "seat_day": [{"seat": r["seat"], "day": r["day"], **tok(r)} for r in seat_day],
                "org_day": [{"day": r["day"], **tok(r)} for r in org_day],
                "work_items": [{"work_item": r["work_item"], **tok(r)} for r in items],
            }

        return await asyncio.to_thread(run)


def _prune(store: TurnStore, older_than: float) -> int:
    with store._lock:
        store._db.execute("BEGIN IMMEDIATE")
        cur = store._db.execute(
            "DELETE FROM turns WHERE started_at < ? AND outcome != 'running'", (older_than,)
        )
        store._db.execute("COMMIT")
        return int(cur.rowcount)


async def prune_turns(store: TurnStore, *, keep: float) -> int:
    """Delete finished turn rows older than ``keep`` seconds from ``store`` (the maintenance duty).

    Returns:
        How many rows were deleted.
    """
    return await asyncio.to_thread(_prune, store, time.time() - keep)
