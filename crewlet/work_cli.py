"""``crewlet work list|show``: the tracker through a running node (CO-24, CO-27, CO-28).

- ``crewlet work list [--status S] [--assignee H] [--project P] [--limit N] [--json]`` prints
  ``GET /work`` (grant ``state:read``; newest first, ``limit`` 1..100, default 20) as a table: key,
  status, priority, assignee, title, updated (UTC, RFC 3339).
- ``crewlet work show KEY [--comments-offset N] [--comments-limit M] [--history-offset N]
  [--history-limit M] [--json]`` prints ``GET /work/{key}``: the item's fields, its body, its comments
  (author, instant, text) and its history, each oldest first, one page (the newest 20 by default)
  under a heading saying ``showing N of M`` when there are more.
- ``crewlet work create PROJECT TITLE [--body] [--type] [--priority] [--assignee] [--label ...]``
  posts ``POST /work`` (grant ``work:write``; the item is authored ``operator:<token id>``, an
  assignee seat is woken) and prints ``KEY created: TITLE (assignee H)``.
- ``crewlet work comment KEY TEXT`` posts ``POST /work/{key}/comments`` (the assignee, watchers and
  @mentioned seats are woken, CO-41).

Reads are ``stale`` (the serving node's copy; its lag is shown when not zero). The URL and token
default to ``CREWLET_URL`` and ``CREWLET_API_TOKEN``; a stopped node fails naming the URL (FL-40).
Exit codes: 0 shown; 1 unreachable or 503; 2 refused (unknown key 404, bad token 401, a bad
``--status`` 400 naming the field), no token.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ._node_api import JsonFlag, Token, Url, call, clean_view
from ._operator_view import err_console, plain_console, show

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="The tracker's work items: list, show, create, comment (CO-24).")

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
    out.print(_heading("comments", view, len(comments)), markup=False)
    for c in comments:
        out.print(f"- {c.get('created_at', '')} {c.get('author', '?')}: {c.get('body', '')}", markup=False)
    history = view.get("history") or []
    out.print(_heading("history", view, len(history)), markup=False)
    for h in history:
        fields = ", ".join(f"{k}={v}" for k, v in (h.get("fields") or {}).items())
        out.print(f"- {h.get('at', '')} {h.get('actor', '?')} {h.get('kind', '')}: {fields}", markup=False)
    _lag(view, out)


def _heading(what: str, view: dict[str, Any], shown: int) -> str:
    """``comments (showing 20 of 50, from #31, oldest first; --comments-offset N for others):``."""
    total = view.get(f"{what}_total")
    if not isinstance(total, int):  # a node from before issue 38 says no total
        return f"{what} ({shown}):"
    if shown >= total:
        return f"{what} ({total}, oldest first):"
    first = int(view.get(f"{what}_offset") or 0) + 1
    return (
        f"{what} (showing {shown} of {total}, #{first}..#{first + shown - 1}, oldest first; "
        f"--{what}-offset N --{what}-limit M for others):"
    )


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


_Offset = Annotated[
    int | None, typer.Option(min=0, help="From this entry, 0 = the oldest (default: the newest page)")
]
_Limit = Annotated[int, typer.Option(min=1, max=100, help="At most this many (1..100)")]


@app.command("show")
def show_cmd(
    key: Annotated[str, typer.Argument(help="The item's key, e.g. SUP-1")],
    comments_offset: _Offset = None,
    comments_limit: _Limit = 20,
    history_offset: _Offset = None,
    history_limit: _Limit = 20,
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
    as_json: JsonFlag = False,
) -> None:
    """Show one work item: its fields, body, comments and history, oldest first (CO-24).

    The newest 20 comments and history entries are shown; the headings say how many there are
    ("showing 20 of 50") and ``--comments-offset``/``--history-offset`` page through the rest.
    """
    query: dict[str, Any] = {"comments_limit": comments_limit, "history_limit": history_limit}
    for name, value in (("comments_offset", comments_offset), ("history_offset", history_offset)):
        if value is not None:
            query[name] = value
    show(
        url,
        token,
        "/work/{key}",
        query=query,
        parts={"key": key},
        need={"key": str},
        as_json=as_json,
        printer=print_item,
        timeout=TIMEOUT,
    )


def _write(
    path: str, body: dict[str, Any], url: str, token: str, as_json: bool, what: str, **kw: Any
) -> None:
    """POST ``body`` to ``path``; print the written object's key line (or the JSON); exit like ``call``."""
    out, err = plain_console(), err_console()
    code, answer = call("POST", url, token, path, timeout=TIMEOUT, out=err, body=body, **kw)
    if code != 0:
        raise typer.Exit(code)
    if as_json:
        out.print_json(json.dumps(answer))
        return
    obj = clean_view(answer.get(what) if isinstance(answer, dict) else None) or {}
    outcome = answer.get("outcome", "applied") if isinstance(answer, dict) else "applied"
    if what == "item":
        out.print(f"{obj.get('key')} {outcome}: {obj.get('title')} (assignee {obj.get('assignee') or '-'})")
    else:
        out.print(f"comment {outcome} on {kw.get('parts', {}).get('key')} by {obj.get('author', '?')}")


@app.command("create")
def create_cmd(
    project: Annotated[str, typer.Argument(help="The project's key, e.g. SUP")],
    title: Annotated[str, typer.Argument(help="The item's title")],
    body: Annotated[str, typer.Option("--body", help="The item's description")] = "",
    item_type: Annotated[str, typer.Option("--type", help="task, bug, story, ...")] = "task",
    priority: Annotated[str | None, typer.Option("--priority", help="e.g. high")] = None,
    assignee: Annotated[str | None, typer.Option("--assignee", help="A seat handle; wakes it")] = None,
    label: Annotated[list[str] | None, typer.Option("--label", help="A label (repeat for more)")] = None,
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
    as_json: JsonFlag = False,
) -> None:
    """Create a work item (``POST /work``, grant ``work:write``); an assignee seat is woken (CO-24)."""
    doc: dict[str, Any] = {"project": project, "title": title, "type": item_type, "body": body}
    for name, value in (("priority", priority), ("assignee", assignee), ("labels", label)):
        if value:
            doc[name] = value
    _write("/work", doc, url, token, as_json, "item", names={"type": "--type", "labels": "--label"})


@app.command("comment")
def comment_cmd(
    key: Annotated[str, typer.Argument(help="The item's key, e.g. SUP-1")],
    text: Annotated[str, typer.Argument(help="The comment")],
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
    as_json: JsonFlag = False,
) -> None:
    """Comment on a work item (``POST /work/{key}/comments``); its assignee and watchers are woken."""
    _write("/work/{key}/comments", {"body": text}, url, token, as_json, "comment", parts={"key": key})
