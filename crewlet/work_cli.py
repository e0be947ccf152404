"""``crewlet work list|show``: the tracker through a running node (CO-24, CO-27, CO-28).

- ``crewlet work list [--status S] [--assignee H] [--project P] [--limit N] [--json]`` prints
  ``GET /work`` (grant ``state:read``; newest first, ``limit`` 1..100, default 20) as a table: key,
  status, priority, assignee, title, updated (UTC, RFC 3339).
- ``crewlet work show KEY [--json]`` prints ``GET /work/{key}``: the item's fields, its body and its
  comments (author, instant, text).

Reads are ``stale`` (the serving node's copy; its lag is shown when not zero). The URL and token
default to ``CREWLET_URL`` and ``CREWLET_API_TOKEN``; a stopped node fails naming the URL (FL-40).
Exit codes: 0 shown; 1 unreachable or 503; 2 refused (unknown key 404, bad token 401, a bad
``--status`` 400 naming the field), no token.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ._node_api import JsonFlag, Token, Url
from ._operator_view import show

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="The tracker's work items: list them, show one (CO-24).")

TIMEOUT = 15.0
"""Seconds the command waits for the node."""


def _lag(view: dict[str, Any], out: Console) -> None:
    lag = ((view.get("read") or {}).get("lag") or {}).get("records")
    if lag:
        out.print(
            f"(read from {view['read'].get('served_by')}, {lag} record(s) behind the log)", markup=False
        )


def print_items(view: dict[str, Any], out: Console) -> None:
    """Print a ``GET /work`` answer as a table."""
    table = Table(title=f"work items ({view.get('count', 0)})")
    for col in ("key", "status", "priority", "assignee", "title", "updated (UTC)"):
        table.add_column(col, overflow="fold")
    for item in view.get("items", []):
        table.add_row(
            str(item.get("key", "")),
            str(item.get("status", "")),
            str(item.get("priority", "")),
            str(item.get("assignee") or "-"),
            str(item.get("title", "")),
            str(item.get("updated_at", "")),
        )
    out.print(table)
    if not view.get("items"):
        out.print("no work items match", markup=False)
    _lag(view, out)


_FIELDS = (
    "key",
    "title",
    "project",
    "type",
    "status",
    "priority",
    "assignee",
    "reporter",
    "parent",
    "due",
    "labels",
    "external",
    "url",
    "watchers",
    "version",
    "created_at",
    "updated_at",
)


def print_item(view: dict[str, Any], out: Console) -> None:
    """Print a ``GET /work/{key}`` answer: fields, body, comments."""
    table = Table(show_header=False, title=f"{view.get('key')}: {view.get('title')}")
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for name in _FIELDS:
        value = view.get(name)
        if isinstance(value, list):
            value = ", ".join(str(v) for v in value) or "-"
        table.add_row(name, "-" if value in (None, "") else str(value))
    out.print(table)
    if view.get("body"):
        out.print("body:", markup=False)
        out.print(str(view["body"]), markup=False)
    comments = view.get("comments") or []
    out.print(f"comments ({len(comments)}):", markup=False)
    for c in comments:
        out.print(f"- {c.get('created_at', '')} {c.get('author', '?')}: {c.get('body', '')}", markup=False)
    _lag(view, out)


@app.command("list")
def list_cmd(
    status: Annotated[str | None, typer.Option("--status", help="Only items in this status")] = None,
    assignee: Annotated[
        str | None, typer.Option("--assignee", help="Only items assigned to this handle")
    ] = None,
    project: Annotated[str | None, typer.Option("--project", help="Only this project's items (key)")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=100, help="At most this many (1..100)")] = 20,
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
    as_json: JsonFlag = False,
) -> None:
    """List work items, newest first: key, status, priority, assignee, title, updated (CO-24)."""
    query: dict[str, Any] = {"limit": limit}
    for name, value in (("status", status), ("assignee", assignee), ("project", project)):
        if value:
            query[name] = value
    show(
        url,
        token,
        "/work",
        query=query,
        need={"items": list},
        as_json=as_json,
        printer=print_items,
        timeout=TIMEOUT,
    )


@app.command("show")
def show_cmd(
    key: Annotated[str, typer.Argument(help="The item's key, e.g. SUP-1")],
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
    as_json: JsonFlag = False,
) -> None:
    """Show one work item: its fields, body and comments (CO-24)."""
    show(
        url,
        token,
        "/work/{key}",
        parts={"key": key},
        need={"key": str},
        as_json=as_json,
        printer=print_item,
        timeout=TIMEOUT,
    )
