"""``crewlet turns`` and ``crewlet turn ID``: turn records through a running node (CO-20, CO-28, ES-79).

- ``crewlet turns [--seat H] [--limit N] [--url U] [--token T] [--json]`` prints ``GET /turns``
  (grant ``audit:read``; gathered from every live node) as a table: turn id, seat, outcome, tokens
  (input + output), duration (seconds), started (UTC). A partial answer (a node that did not answer
  in time) is said under the table.
- ``crewlet turn ID [--json]`` prints ``GET /turns/{id}`` as a tree: the turn (seat, outcome,
  tokens, duration, trace id), then each phase/iteration (``execute #1``, ``review #1``, ...) with
  its tokens and duration, under it its LLM rounds (tokens, stop reason, duration) and under each
  round its tool calls (name, arguments, result or error).

The URL and token default to ``CREWLET_URL`` and ``CREWLET_API_TOKEN``; a stopped node fails naming
the URL (FL-40). Exit codes: 0 shown; 1 unreachable or 503 (e.g. ``history_partial``); 2 refused
(unknown turn 404, bad token 401, a bad ``--limit`` 422), no token.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from ._node_api import JsonFlag, Token, Url, clean
from ._operator_view import show

__all__ = ["turn_cmd", "turns_cmd"]

TIMEOUT = 15.0
"""Seconds the command waits (the node waits at most 5 s for its peers)."""


def _when(ts: Any) -> str:
    if not isinstance(ts, int | float):
        return "-"
    return datetime.fromtimestamp(float(ts), UTC).strftime("%Y-%m-%d %H:%M:%S")


def _decision(ph: dict[str, Any]) -> str:
    """`` decision D`` for a review phase, with why when the engine overturned the reviewer's
    ``done`` (its notes start "Nothing reached the asker"): the reviewer's own call below reads
    ``done``, so the phase line says both (issue 38)."""
    decision = ph.get("decision")
    if not decision:
        return ""
    notes = str(ph.get("notes") or "")
    if decision == "self_iterate" and notes.startswith("Nothing reached the asker"):
        return f"  decision self_iterate (the reviewer said done; overturned: {notes.split(':')[0]})"
    return f"  decision {decision}"


def _secs(value: Any) -> str:
    return f"{float(value):.2f} s" if isinstance(value, int | float) else "-"


def _duration(row: dict[str, Any]) -> str:
    start, end = row.get("started_at"), row.get("ended_at")
    if isinstance(start, int | float) and isinstance(end, int | float):
        return _secs(end - start)
    return "running" if row.get("outcome") == "running" else "-"


def _tokens(inp: Any, outp: Any) -> str:
    i, o = int(inp or 0), int(outp or 0)
    return f"{i + o} ({i} in / {o} out)"


def _coverage_note(view: dict[str, Any], out: Console) -> None:
    cov = view.get("coverage") or {}
    if cov.get("partial"):
        missing = ", ".join(cov.get("missing") or []) or "-"
        out.print(f"partial: {missing} did not answer; their turns are not listed", markup=False)


def print_turns(view: dict[str, Any], out: Console, *, seat: str | None = None) -> None:
    """Print a ``GET /turns`` answer as a table (id, seat, outcome, tokens, duration, started).

    With ``seat`` (the ``--seat`` filter) an empty answer says so: ``GET /turns`` filters by handle
    and answers an unknown handle like an idle seat, so the command cannot tell them apart.
    """
    table = Table(title=f"turns ({view.get('count', 0)})")
    for col in ("turn id", "seat", "outcome", "tokens", "duration", "started (UTC)", "node"):
        table.add_column(col, overflow="fold")
    for t in view.get("turns", []):
        table.add_row(
            str(t.get("turn_id", "")),
            str(t.get("seat", "")),
            str(t.get("outcome", "")),
            _tokens(t.get("input_tokens"), t.get("output_tokens")),
            _duration(t),
            _when(t.get("started_at")),
            str(t.get("node", "")),
        )
    out.print(table)
    if not view.get("turns"):
        if seat:
            out.print(
                f"no turns recorded for seat {seat!r} (an unknown handle lists none either; "
                "crewlet fleet status lists the seats)",
                markup=False,
            )
        else:
            out.print("no turns recorded", markup=False)
    _coverage_note(view, out)


def _args(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 1] + "…"


def print_turn(view: dict[str, Any], out: Console) -> None:
    """Print a ``GET /turns/{id}`` answer as a tree: phases/iterations → rounds → tool calls."""
    record = view.get("record") or {}
    head = (
        f"turn {view.get('turn_id')}  seat {view.get('seat')}  {view.get('outcome')}  "
        f"tokens {_tokens(view.get('input_tokens'), view.get('output_tokens'))}  {_duration(view)}"
    )
    tree = Tree(head, highlight=False)
    facts = tree.add(
        f"started {_when(view.get('started_at'))} UTC on {view.get('node', '?')}, "
        f"trace {view.get('trace_id') or '-'}, work item {view.get('work_item') or '-'}"
    )
    if view.get("error"):
        facts.add(f"error ({view.get('error_kind')}): {view.get('error')}")
    rounds: list[dict[str, Any]] = list(record.get("rounds") or [])
    calls: list[dict[str, Any]] = list(record.get("tool_calls") or [])
    phases: list[dict[str, Any]] = list(record.get("phases") or [])
    if not phases:  # an older or failed record: one synthetic phase holding every round
        phases = [{"phase": "turn", "iteration": 1}]

    def where(x: dict[str, Any]) -> tuple[Any, Any]:
        return (x.get("phase", "turn"), x.get("iteration", 1))

    for ph in phases:
        name, it = ph.get("phase"), ph.get("iteration")
        node = tree.add(
            f"{name} #{it}  rounds {ph.get('rounds', '?')}  tokens "
            f"{_tokens(ph.get('input_tokens'), ph.get('output_tokens'))}  {_secs(ph.get('duration_seconds'))}"
            + (f"  failed: {ph.get('error')}" if ph.get("failed") else "")
            + _decision(ph)
        )
        for rd in rounds:
            if where(rd) != (name, it) and name != "turn":
                continue
            n = rd.get("round")
            rnode = node.add(
                f"round {n}  tokens {_tokens(rd.get('input_tokens'), rd.get('output_tokens'))}  "
                f"{rd.get('stop_reason') or '-'}  {_secs(rd.get('duration_seconds'))}"
            )
            if rd.get("text"):
                rnode.add(f"text: {_args(rd['text'])}")
            for c in calls:
                if c.get("round") != n or (where(c) != where(rd) and name != "turn"):
                    continue
                if c.get("error") or c.get("is_error"):
                    outcome = f"error: {_args(c.get('error') or c.get('content'))}"
                else:
                    outcome = f"→ {_args(c.get('result', c.get('content')), 80)}"
                rnode.add(
                    f"tool {c.get('name')}({_args(c.get('arguments'), 80)})  {_secs(c.get('duration_seconds'))}  "
                    f"{outcome}"
                )
    if record.get("reply") or view.get("reply"):
        tree.add(f"reply: {_args(record.get('reply') or view.get('reply'), 300)}")
    out.print(tree)


def turns_cmd(
    seat: Annotated[str | None, typer.Option("--seat", help="Only this seat's turns (a handle)")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500, help="At most this many (1..500)")] = 20,
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
    as_json: JsonFlag = False,
) -> None:
    """List recent turns, newest first: id, seat, outcome, tokens, duration, started (CO-20, CO-28)."""
    shown = clean(seat) if seat else None

    def printer(view: dict[str, Any], out: Console) -> None:
        print_turns(view, out, seat=shown)

    show(
        url,
        token,
        "/turns",
        query={"limit": limit, "seat": seat or None},
        names={"seat": "--seat"},
        need={"turns": list},
        as_json=as_json,
        printer=printer,
        timeout=TIMEOUT,
    )


def turn_cmd(
    turn_id: Annotated[str, typer.Argument(help="The turn's id (from crewlet turns)")],
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
    as_json: JsonFlag = False,
) -> None:
    """Show one turn as a tree: phases and iterations, their rounds, each round's tool calls (CO-20)."""
    show(
        url,
        token,
        "/turns/{turn_id}",
        parts={"turn_id": turn_id},
        names={"turn_id": "turn ID"},
        need={"turn_id": str},
        as_json=as_json,
        printer=print_turn,
        timeout=TIMEOUT,
    )
