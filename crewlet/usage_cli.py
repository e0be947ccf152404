"""``crewlet usage``: the fleet's spend by day, seat, node, model, phase or worker (AG-48, ES-69).

``crewlet usage [--from DAY] [--to DAY] [--seat H] [--schedule S] [--group-by day|seat|node|model|
phase|worker] [--url U] [--token T] [--json]`` prints ``GET /usage`` (grant ``state:read``) as a table
(one row per group: turns where the grouping splits them, input, output and total tokens, model
calls), then the total, the nodes whose days contributed and the horizon of days the answering copy
holds. Days are company days (``YYYY-MM-DD``). Exit codes: 0 shown; 1 unreachable or 503 (no data
node answered); 2 refused (``from`` after ``to``, a span over 181 days, an unknown ``--group-by``:
the line names the parameter), bad token, no token.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ._node_api import JsonFlag, Token, Url
from ._operator_view import show

__all__ = ["print_usage", "usage_cmd"]

TIMEOUT = 30.0
"""Seconds the command waits (a read waits up to 10 s on each data node it asks)."""


def _n(value: Any) -> str:
    return str(value) if isinstance(value, int) else "-"


def print_usage(view: dict[str, Any], out: Console) -> None:
    """Print a ``GET /usage`` answer: a table of groups, the total, nodes and horizon lines."""
    table = Table(title=f"usage {view.get('from')} .. {view.get('to')} by {view.get('group_by')}")
    for col in (str(view.get("group_by") or "group"), "turns", "input", "output", "total", "calls"):
        table.add_column(col, overflow="fold")
    for g in view.get("groups") or []:
        table.add_row(
            str(g.get("key") or "-"),
            _n(g.get("turns")),
            _n(g.get("input_tokens")),
            _n(g.get("output_tokens")),
            _n(g.get("total_tokens")),
            _n(g.get("rounds")),
        )
    out.print(table)
    total = view.get("total") or {}
    out.print(
        f"total: {_n(total.get('total_tokens'))} tokens ({_n(total.get('input_tokens'))} in / "
        f"{_n(total.get('output_tokens'))} out), {_n(total.get('turns'))} turns, "
        f"{_n(total.get('page_reads'))} pages read (+{_n(total.get('reads_dropped'))} not itemised)",
        markup=False,
    )
    nodes = view.get("nodes") or []
    out.print(f"nodes: {', '.join(nodes) if nodes else 'none recorded in this window'}", markup=False)
    horizon = view.get("horizon") or {}
    first, last = horizon.get("first_day"), horizon.get("last_day")
    if first is None:
        out.print("horizon: no usage days recorded yet", markup=False)
    else:
        note = " (the window starts before the data)" if str(view.get("from")) < str(first) else ""
        out.print(f"horizon: {first} .. {last}{note}", markup=False)


def usage_cmd(
    from_: Annotated[str | None, typer.Option("--from", help="First company day YYYY-MM-DD")] = None,
    to: Annotated[
        str | None, typer.Option("--to", help="Last company day YYYY-MM-DD (default today)")
    ] = None,
    seat: Annotated[str | None, typer.Option("--seat", help="Only this seat (a handle)")] = None,
    schedule: Annotated[
        str | None, typer.Option("--schedule", help="Only this schedule (scope/name)")
    ] = None,
    group_by: Annotated[
        str, typer.Option("--group-by", help="day, seat, node, model, phase or worker")
    ] = "day",
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
    as_json: JsonFlag = False,
) -> None:
    """Show the fleet's spend by day, seat, node, model, phase or worker, nodes that left included (AG-48)."""
    show(
        url,
        token,
        "/usage",
        query={"from": from_, "to": to, "seat": seat, "schedule": schedule, "group_by": group_by},
        names={"from": "--from", "group_by": "--group-by"},
        need={"groups": list, "total": dict},
        as_json=as_json,
        printer=print_usage,
        timeout=TIMEOUT,
    )
