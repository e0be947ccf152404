"""``crewlet objects status``: the object store and the collector's last findings, through a node (FL-5, ES-75).

- ``crewlet objects status [--url U] [--token T] [--json]`` prints ``GET /objects`` (grant
  ``state:read``): the recorded store (ES-71), when the last collector pass ran and on which node,
  how many objects are named and stored, what it deleted and kept, and every named file whose
  bytes are missing or of the wrong size or digest (``<project>/<path>@<version>``, the object key
  and the problem), with the remedy.

The URL and token default to ``CREWLET_URL`` and ``CREWLET_API_TOKEN``; the command never opens the
broker or the store (FL-40). Exit codes: 0 no file missing (or no pass yet); 1 files are missing,
the node could not be reached, or it answered 503; 2 refused (bad token), no token.
"""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from ._node_api import JsonFlag, Token, Url, print_view
from ._operator_view import err_console, fetch, plain_console

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="The company's object store and its collector (FL-5, ES-75).")

TIMEOUT = 15.0
"""Seconds the command waits for the node."""


def _store(identity: Any) -> str:
    if not isinstance(identity, dict):
        return "(none recorded yet)"
    text = f"{identity.get('type', '?')} bucket {identity.get('bucket', '?')}"
    if identity.get("type") == "s3":
        text += f" at {identity.get('endpoint_url') or 'the AWS default endpoint'}"
    return text


def print_status(view: dict[str, Any], out: Console) -> None:
    """Print a ``GET /objects`` answer: the store, the last pass, the missing files."""
    out.print(f"store: {_store(view.get('store'))}", markup=False)
    f = view.get("findings")
    if not isinstance(f, dict):
        out.print(
            "collector: no pass recorded yet (it runs hourly on the node holding worker:objects)",
            markup=False,
        )
        return
    out.print(
        f"last pass: {f.get('at')} on {f.get('holder')} ({f.get('duration_seconds')} s); "
        f"{f.get('named')} named, {f.get('stored')} stored; deletion {f.get('deletion')}; "
        f"{f.get('deleted_count', 0)} orphan(s) deleted, {f.get('kept_count', 0)} unnamed kept "
        f"(grace {f.get('grace_seconds')} s)",
        markup=False,
    )
    for e in f.get("errors") or []:
        out.print(f"error: {e}", markup=False)
    missing = f.get("missing") or []
    if not missing:
        out.print("missing: none", markup=False)
        return
    table = Table(title=f"objects_missing: {f.get('missing_count', len(missing))} file(s)")
    for col in ("file", "object key", "problem", "expected size", "found size"):
        table.add_column(col, overflow="fold")
    for m in missing:
        found = m.get("found_size")
        table.add_row(
            str(m.get("file")),
            str(m.get("key")),
            str(m.get("problem")),
            str(m.get("expected_size")),
            "-" if found is None else str(found),
        )
    out.print(table)
    out.print(f"remedy: {f.get('remedy') or 'restore from backup or upload again'}", markup=False)


@app.command("status")
def status_cmd(url: Url = "http://127.0.0.1:8080", token: Token = "", as_json: JsonFlag = False) -> None:
    """Show the object store and the collector's findings; exit 1 when any file is missing (FL-5, ES-75)."""
    view = fetch(
        url, token, "/objects", timeout=TIMEOUT, need={"store": object, "findings": object, "missing": int}
    )
    if as_json:
        typer.echo(json.dumps(view, indent=2))
    elif print_view(print_status, view, plain_console(), err_console(), url.rstrip("/") + "/objects"):
        raise typer.Exit(1)
    raise typer.Exit(1 if view.get("missing") else 0)
