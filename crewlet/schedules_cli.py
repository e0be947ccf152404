"""``crewlet schedules [list]``: every schedule of the company and its next fire, through a running node (CO-33).

- ``crewlet schedules [list] [--url U] [--token T] [--json]`` prints a node's ``GET /schedules``
  (grant ``state:read``): per schedule its scope, name, cron line and zone, target seats,
  whether it is enabled and catches up, its next fire (UTC instant and local label) and, per
  target, what became of the most recent slot (``fired``, ``skipped`` or ``-`` for no record).

The URL and token default to ``CREWLET_URL`` and ``CREWLET_API_TOKEN``. This command never opens
the broker or a store itself (FL-40): against a stopped node it fails naming the URL.

Exit codes: 0 answered; 1 the node could not be reached or answered 503 (no company applied yet);
2 refused (a token without the grant), no token, or a usage error.
"""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from ._node_api import JsonFlag, Token, Url, show_view

__all__ = ["app"]

app = typer.Typer(help="Scheduled tasks of the company: list them with their next fire (CO-33).")

TIMEOUT = 15.0
"""Seconds the command waits for the node (a read of the org and one claim per schedule target)."""


def _seats(last: dict[str, Any] | None) -> str:
    if not last:
        return ""
    seats = last.get("seats") or {}
    return ", ".join(f"{h}: {state or '-'}" for h, state in seats.items())


def _print_view(view: dict[str, Any], out: Console) -> None:
    state = "enabled" if view.get("enabled") else "DISABLED"
    title = f"schedules (asked {view.get('asked', '?')}, scheduling {state}, store {view.get('fires', '?')})"
    table = Table(title=title)
    for col in (
        "scope",
        "name",
        "cron",
        "zone",
        "targets",
        "on",
        "catchup",
        "next fire (UTC)",
        "fire label (local)",
        "last slot",
    ):
        table.add_column(col)
    for s in view.get("schedules", []):
        nxt = s.get("next_fire") or {}
        last = s.get("last_slot")
        table.add_row(
            s["scope"],
            s["name"],
            s["cron"],
            s["timezone"],
            ", ".join(s["targets"]) or "(nobody)",
            "yes" if s["enabled"] else "no",
            "yes" if s["catchup"] else "no",
            nxt.get("at", ""),
            nxt.get("label", ""),
            (f"{last['label']} {_seats(last)}" if last else ""),
        )
    out.print(table)
    if not view.get("schedules"):
        out.print("no schedules in the company", markup=False)


def _list(url: str, token: str, as_json: bool) -> None:
    show_view(
        url,
        token,
        "/schedules",
        as_json=as_json,
        printer=_print_view,
        timeout=TIMEOUT,
        width=200,
        need={"schedules": list},
    )


@app.callback(invoke_without_command=True)
def main(
    ctx: typer.Context,
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
    as_json: JsonFlag = False,
) -> None:
    """List every schedule with its next fire (the same as ``crewlet schedules list``)."""
    if ctx.invoked_subcommand is None:
        _list(url, token, as_json)


@app.command("list")
def list_cmd(
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
    as_json: JsonFlag = False,
) -> None:
    """List every schedule: scope, cron and zone, targets, next fire, the last slot's outcome (CO-33)."""
    _list(url, token, as_json)
