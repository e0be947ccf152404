"""The history scatter protocol and its merge (ES-79): what a node answers, and how answers combine.

A request is ``{"v": 1, "what": <kind>, "args": {...}}``; ``what`` is one of :data:`WHATS`:

- ``turns`` (``filters``, ``limit``, ``sort``): turn summaries, as ``TurnStore.list``;
- ``turn`` (``turn_id``): the one turn with its record, or no rows;
- ``events`` (``limit``, ``before``, ``filters``): one page of this node's event log, newest first;
- ``event`` (``event_id``): the one event, or no rows;
- ``trace`` (``trace_id``): the newest :data:`~shared.estate.TRACE_LIMIT` events of a trace, newest first;
- ``tokens`` (``days``): the token rollups of ``TurnStore.token_breakdown``.

A node that speaks the asked version answers ``{"v": 1, "node": id, "rows": [...], "more": bool}``
(``tokens``: ``"breakdown"`` instead of rows), or ``{"v": 1, "node": id, "error": {"code", "message"}}``
when it could not run the read. A node that does not speak the asked version answers ``{"v": <its
version>}`` and nothing else; the asker names it in ``coverage.other_version`` and merges none of it.
A node that holds no event log (no ``data`` role) answers event reads with no rows.

Rows merge by their time and id (``(started_at, turn_id)`` for turns, ``(event_time, event_id)`` for
events), newest first; a node that had more rows than it sent (``more``) bounds what the merge may
show: nothing older than the last row it sent, so a keyset cursor built from the merged page never
skips one of its rows.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from shared import logs
from shared.estate import TRACE_LIMIT, EstateError, EventLog
from shared.records import TurnStore

__all__ = [
    "EVENT_WHATS",
    "READ_BUDGET",
    "SUBJECT_PREFIX",
    "VERSION",
    "WHATS",
    "Coverage",
    "answer_request",
    "decode",
    "encode",
    "gather",
    "merge_rows",
    "merge_tokens",
    "request",
    "row_key",
    "scatter_subject",
]

_log = logs.get("history")

VERSION = 1
"""The history-protocol version this build speaks (ES-79)."""
READ_BUDGET = 5.0
"""Seconds an ingress waits for the fleet's answers (ES-79 proposes 5 s; a constant of this build)."""
SUBJECT_PREFIX = "crewlet.history.scatter."
"""Each node answers on ``crewlet.history.scatter.<node_id>``."""
WHATS = ("turns", "turn", "events", "event", "trace", "tokens")
"""The reads of version 1."""
EVENT_WHATS = frozenset({"events", "event", "trace"})
"""The reads only nodes holding an event log (data nodes) answer with rows."""


def scatter_subject(node_id: str) -> str:
    """The subject node ``node_id`` answers history reads on."""
    return SUBJECT_PREFIX + node_id


def request(what: str, args: dict[str, Any], *, version: int = VERSION) -> dict[str, Any]:
    """Build one scatter request."""
    return {"v": version, "what": what, "args": args}


def encode(doc: dict[str, Any]) -> bytes:
    """JSON bytes of a request or an answer."""
    return json.dumps(doc, separators=(",", ":"), default=str).encode()


def decode(data: bytes) -> dict[str, Any]:
    """Parse a request or an answer.

    Raises:
        ValueError: not a JSON object.
    """
    doc = json.loads(data)
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    return doc


def row_key(what: str, row: dict[str, Any], *, sort: str = "-started") -> tuple[Any, ...]:
    """The merge key of one row (larger is newer, or more tokens)."""
    if what in ("turns", "turn"):
        if sort == "-tokens":
            tok = row.get("tokens") or {}
            return (int(tok.get("total") or 0), float(row.get("started_at") or 0), str(row.get("turn_id")))
        return (float(row.get("started_at") or 0), str(row.get("turn_id")))
    return (int(row.get("event_time") or 0), str(row.get("event_id")))


def _error(node_id: str, code: str, message: str) -> dict[str, Any]:
    return {"v": VERSION, "node": node_id, "error": {"code": code, "message": message}}


async def answer_request(
    req: dict[str, Any], *, node_id: str, turns: TurnStore | None, events: EventLog | None
) -> dict[str, Any]:
    """Answer one scatter request from this node's records (the responder and the asker's own share).

    Args:
        req: The decoded request.
        node_id: This node's id.
        turns: This node's turn records, or None while they are not open.
        events: This node's event log, or None (no data role, or booting).

    Returns:
        The answer (see the module docstring); never raises for a bad request.
    """
    if req.get("v") != VERSION:
        return {"v": VERSION}
    what = req.get("what")
    args = req.get("args") if isinstance(req.get("args"), dict) else {}
    assert isinstance(args, dict)
    out: dict[str, Any] = {"v": VERSION, "node": node_id, "rows": [], "more": False}
    try:
        if what in EVENT_WHATS:
            if events is None:
                return out
            if what == "events":
                page = await events.query(
                    limit=int(args.get("limit", 100)),
                    before=args.get("before") or None,
                    filters=dict(args.get("filters") or {}),
                )
                out["rows"], out["more"] = page["events"], page["next"] is not None
            elif what == "trace":
                page = await events.query(
                    limit=TRACE_LIMIT, max_limit=TRACE_LIMIT, filters={"trace_id": str(args.get("trace_id"))}
                )
                out["rows"], out["more"] = page["events"], page["next"] is not None
            else:
                ev = await events.get(str(args.get("event_id")))
                out["rows"] = [ev] if ev is not None else []
            return out
        if what not in WHATS:
            return _error(node_id, "unknown_read", f"what: {what!r} is not one of {', '.join(WHATS)}")
        if turns is None:
            return _error(node_id, "not_ready", "the node's records are not open yet")
        if what == "turns":
            limit = int(args.get("limit", 50))
            rows = await turns.list(
                filters=dict(args.get("filters") or {}), limit=limit, sort=str(args.get("sort") or "-started")
            )
            out["rows"] = rows
        elif what == "turn":
            row = await turns.get(str(args.get("turn_id")))
            out["rows"] = [row] if row is not None else []
        else:
            del out["rows"], out["more"]
            out["breakdown"] = await turns.token_breakdown(days=int(args.get("days", 30)))
        return out
    except EstateError as e:
        return _error(node_id, e.code, str(e))
    except (ValueError, TypeError) as e:
        return _error(node_id, "bad_request", f"{type(e).__name__}: {e}")


@dataclass
class Coverage:
    """Which nodes a scatter read heard from (ES-79).

    Attributes:
        answered: Nodes whose rows are merged.
        missing: Live nodes that did not answer within the budget (or answered an error).
        other_version: Nodes answering another history-protocol version (listed, not merged).
        reasons: Node → why it is missing (``timeout``, ``no_responders``, ``error: …``).
    """

    answered: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    other_version: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def partial(self) -> bool:
        """True when some live node's rows are not in the answer."""
        return bool(self.missing)

    def to_dict(self) -> dict[str, Any]:
        """The ``coverage`` object of an answer."""
        return {
            "answered": sorted(self.answered),
            "missing": sorted(self.missing),
            "other_version": sorted(self.other_version),
            "reasons": dict(sorted(self.reasons.items())),
        }


Ask = Callable[[str, bytes, float], Awaitable[bytes]]
"""Send one request to a node's subject within a timeout; return the reply bytes."""
Local = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
"""Answer one request in-process (this node's share)."""


async def gather(
    req: dict[str, Any],
    *,
    self_id: str,
    nodes: Sequence[str],
    local: Local | None,
    ask: Ask | None,
    budget: float = READ_BUDGET,
) -> tuple[dict[str, dict[str, Any]], Coverage]:
    """Ask every node in ``nodes`` at once (this node in-process) and wait at most ``budget`` seconds.

    Args:
        req: The request (see :func:`request`).
        self_id: This node's id; answered by ``local``, never over the wire.
        nodes: The live nodes holding this kind of history (this node included when it holds some).
        local: This node's in-process answer, or None when this node holds none of it.
        ask: The wire (``nc.request``), or None without a broker: every other node is then missing.
        budget: The read budget in seconds.

    Returns:
        ``(node → answer, coverage)``; answers hold only the nodes in ``coverage.answered``.
    """
    body = encode(req)
    cov = Coverage()
    answers: dict[str, dict[str, Any]] = {}

    async def one(node: str) -> None:
        try:
            if node == self_id and local is not None:
                ans = await asyncio.wait_for(local(req), budget)
            elif ask is None:
                cov.missing.append(node)
                cov.reasons[node] = "no_broker"
                return
            else:
                # the wire's own timeout is the budget too; this bounds an asker that overruns it
                ans = decode(await asyncio.wait_for(ask(scatter_subject(node), body, budget), budget + 0.05))
        except TimeoutError:
            cov.missing.append(node)
            cov.reasons[node] = "timeout"
            return
        except Exception as e:  # noqa: BLE001 - a node that fails is missing, never a 500
            cov.missing.append(node)
            name = type(e).__name__
            cov.reasons[node] = "no_responders" if "NoResponders" in name else f"{name}: {e}"
            return
        if ans.get("v") != req.get("v"):
            cov.other_version.append(node)
            return
        err = ans.get("error")
        if isinstance(err, dict):
            cov.missing.append(node)
            cov.reasons[node] = f"error: {err.get('code')}: {err.get('message')}"
            return
        cov.answered.append(node)
        answers[node] = ans

    targets = sorted(set(nodes))
    await asyncio.gather(*(one(n) for n in targets))
    if cov.missing:
        _log.info(
            "history_scatter_partial", what=req.get("what"), missing=sorted(cov.missing), reasons=cov.reasons
        )
    return answers, cov


def merge_rows(
    what: str,
    answers: dict[str, dict[str, Any]],
    *,
    limit: int,
    sort: str = "-started",
) -> tuple[list[dict[str, Any]], bool]:
    """Merge the answers' rows newest first (or most tokens first), at most ``limit`` of them.

    Rows with the same id are one row (the first node's, by node id). A node that had more rows than
    it sent bounds the merge at its last row (see the module docstring).

    Returns:
        ``(rows, more)``: ``more`` is True when rows beyond the returned ones may exist.
    """
    seen: set[tuple[Any, ...]] = set()
    rows: list[dict[str, Any]] = []
    floor: tuple[Any, ...] | None = None
    for node in sorted(answers):
        got = [r for r in answers[node].get("rows") or [] if isinstance(r, dict)]
        if answers[node].get("more") and got:
            last = min(row_key(what, r, sort=sort) for r in got)
            floor = last if floor is None or last > floor else floor
        for r in got:
            ident = (
                (r.get("turn_id"),) if what in ("turns", "turn") else (r.get("event_time"), r.get("event_id"))
            )
            if ident in seen:
                continue
            seen.add(ident)
            rows.append(r)
    rows.sort(key=lambda r: row_key(what, r, sort=sort), reverse=True)
    more = floor is not None
    if floor is not None:
        kept = [r for r in rows if row_key(what, r, sort=sort) >= floor]
        rows = kept
    if len(rows) > limit:
        rows, more = rows[:limit], True
    return rows, more


def merge_tokens(answers: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Sum the answers' token rollups per seat-day, org-day and work item (CO-22)."""
    groups: dict[str, tuple[tuple[str, ...], dict[tuple[Any, ...], dict[str, Any]]]] = {
        "seat_day": (("seat", "day"), {}),
        "org_day": (("day",), {}),
        "work_items": (("work_item",), {}),
    }
    for node in sorted(answers):
        bd = answers[node].get("breakdown") or {}
        for name, (keys, acc) in groups.items():
            for row in bd.get(name) or []:
                k = tuple(row.get(x) for x in keys)
                cur = acc.setdefault(
                    k, {**{x: row.get(x) for x in keys}, "input": 0, "output": 0, "total": 0, "turns": 0}
                )
                for f in ("input", "output", "total", "turns"):
                    cur[f] += int(row.get(f) or 0)
    out: dict[str, list[dict[str, Any]]] = {}
    for name, (keys, acc) in groups.items():
        order = ("day", "seat") if name == "seat_day" else keys
        out[name] = sorted(acc.values(), key=lambda r: tuple(str(r.get(x) or "") for x in order))
    return out
