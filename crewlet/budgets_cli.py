"""``crewlet budgets show|reset``: the fleet's token budgets through a running node (FL-120, CO-37).

- ``crewlet budgets show [--url U] [--token T] [--json]`` prints a node's ``GET /budgets``: per
  scope (``org``, then every capped seat) its state, each capped window's spend against its
  ceiling and when it turns over, and when it last refused (grant ``state:read``).
- ``crewlet budgets reset [--scope org|agent:<agent id or handle>]`` posts ``POST /budgets/reset``:
  zeroes the current windows of that scope, or of all scopes without ``--scope`` (grant
  ``config:write``), and prints what was zeroed.

The URL and token default to ``CREWLET_URL`` and ``CREWLET_API_TOKEN``. This command never opens
the broker or a store itself (FL-40): against a stopped node it fails naming the URL and writes
nothing.

Exit codes: 0 answered; 1 the node could not be reached or answered 503 (its budgets store is
unreadable); 2 refused (an unknown scope, a token without the grant), no token, or a usage error.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ._node_api import JsonFlag, Token, Url, call, clean_view, show_view

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="Token budgets of the fleet: show them, reset a scope (FL-120).")

TIMEOUT = 15.0
"""Seconds a command waits for the node (a read of a few counters, or a reset of a few)."""


def _print_view(view: dict[str, Any], out: Console) -> None:
    table = Table(title=f"token budgets (asked {view.get('asked', '?')}, clock {view['timezone']})")
    for col in ("scope", "seat", "state", "period", "window", "spent", "ceiling", "resets at", "refused at"):
        table.add_column(col)
    for s in view["scopes"]:
        rows = list(s["windows"].items()) or [("-", None)]
        for i, (period, w) in enumerate(rows):
            first = i == 0
            table.add_row(
                s["scope"] if first else "",
                (s["handle"] or "") if first else "",
                s["state"] if first else "",
                period if w is not None else "no cap",
                w["window"] if w else "",
                str(w["spent"]) if w else "",
                str(w["ceiling"]) if w else "",
                w["resets_at"] if w else "",
                (w["refused_at"] or "") if w else "",
            )
    out.print(table)
    refusing = view.get("refusing") or []
    out.print("refusing: " + (", ".join(refusing) if refusing else "none"), markup=False)


@app.command("show")
def show_cmd(
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
    as_json: JsonFlag = False,
) -> None:
    """Print caps, spend of the current windows and refusing scopes (FL-120)."""
    show_view(
        url,
        token,
        "/budgets",
        as_json=as_json,
        printer=_print_view,
        timeout=TIMEOUT,
        need={"scopes": list, "timezone": str},
    )


@app.command("reset")
def reset_cmd(
    scope: Annotated[
        str | None,
        typer.Option("--scope", "-scope", help="org or agent:<agent id or handle>; all when omitted"),
    ] = None,
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
) -> None:
    """Zero the current day, week and month counters of one scope or of all (FL-120).

    An empty ``--scope`` (e.g. from an unset shell variable) is refused, never read as "all".
    """
    out = Console(width=160, markup=False, highlight=False)
    if scope is not None and not scope.strip():
        out.print(
            "--scope: empty; name a scope (org, agent:<handle>) or leave the option out for all", markup=False
        )
        raise typer.Exit(2)
    code, answer = call(
        "POST",
        url,
        token,
        "/budgets/reset",
        query={"scope": scope or None},
        timeout=TIMEOUT,
        out=out,
        need={"scope": str, "zeroed": list},
    )
    if code == 0:
        answer = clean_view(answer)
        zeroed = answer.get("zeroed", [])
        if not zeroed:
            out.print(f"reset {answer['scope']}: nothing was counted in the current windows", markup=False)
        for z in zeroed:
            out.print(f"reset {z['scope']} {z['period']} {z['window']}: was {z['was']}", markup=False)
    raise typer.Exit(code)
