"""``crewlet config``: the company document's revisions, through a running node (CO-4, CO-28).

The control plane (fleet.md §14) holds the one source of truth for the company document in a
fleet; these commands talk to it through a node's API (``GET``/``PUT /config``,
``/config/revisions...``, CO-27):

- ``import FILE [--summary S] [--dry-run] [--compat] [--if-match ID]``: a new active revision
  (``PUT /config``); ``--dry-run`` validates on the node and lists what would change. The node's
  warnings are printed, one per ``${NAME}`` neither its secret store nor its environment holds
  (issue 38); with ``--offline`` this shell's environment is asked instead.
- ``import FILE --offline --data-dir D`` (or ``--node F``): no node running; the revision is stored in
  the node's store and the fleet's pointer moves to it at that node's next start (FL-109). A scratch
  store (``store.scratch: true`` in the node file, or the ``.scratch`` mark a scratch node leaves) is
  refused naming ``store.scratch``: its writes would vanish at the next boot (FL-145). This build has
  no ``crewlet migrate``, offline ``secrets`` or ``search eval`` command to refuse.
- ``show``, ``export [--revision ID] [-o PATH]``: the active revision (or any one) as a summary or
  as YAML.
- ``revisions [--limit N]``, ``diff A [B]``: history, newest first, and a structural diff whose
  values the node has already redacted.
- ``activate ID``: point the fleet at an older revision, or re-activate the active one to mint a
  new epoch (the gesture that makes every node re-read its secrets, FL-104/FL-115).

A document is read and validated here before anything is sent: a file that is missing, not YAML
or not a valid company is refused locally with one ``file: path: message`` line per error (the
lines ``crewlet validate`` prints) and nothing reaches the node.

Every command takes ``--url`` (``CREWLET_URL``, default ``http://127.0.0.1:8080``) and
``--token`` (``CREWLET_API_TOKEN``; reads need ``config:read``, writes ``config:write``). Exit
codes: 0 done; 1 the node could not be reached or failed (a 5xx such as ``503
no_active_revision``: asking again later may work); 2 refused: bad input, no token, a token the
node refused, or any other 4xx (the node's ``error`` and ``detail`` are printed). No command
prints a traceback.

The commands are here; the node client in :mod:`crewlet._config_node`, the local document checks in
:mod:`crewlet._config_document`, the offline import in :mod:`crewlet._config_offline`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from shared.config import unresolved_issues

from ._config_document import absolute_scripts, check_document, org_rows
from ._config_node import (
    ConfigNode,
    change_line,
    console,
    echo_activated,
    echo_changes,
    fail,
    issue_line,
    revision_path,
    summary_header,
)
from ._config_offline import import_offline, offline_store_dir
from ._node_api import clean

__all__ = ["absolute_scripts", "app", "change_line", "check_document"]

app = typer.Typer(no_args_is_help=True, help="The company document's revisions (CO-4, CO-28).")

DEFAULT_URL = "http://127.0.0.1:8080"
"""Where a node's API is when neither ``--url`` nor ``CREWLET_URL`` says otherwise."""

_Url = Annotated[str, typer.Option("--url", envvar="CREWLET_URL", help="A node's base URL")]
_Token = Annotated[
    str,
    typer.Option(
        "--token", envvar="CREWLET_API_TOKEN", help="API token (config:read; config:write to change)"
    ),
]
_Json = Annotated[bool, typer.Option("--json", help="Print the node's JSON answer")]


@app.callback()
def _group() -> None:
    """The company document's revisions (CO-4, CO-28)."""


@app.command("import")
def import_cmd(
    file: Annotated[Path, typer.Argument(help="The company document (YAML)")],
    summary: Annotated[
        str | None, typer.Option("--summary", help="What changed (default: 'import <file name>')")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Validate on the node and list what would change")
    ] = False,
    compat: Annotated[bool, typer.Option("--compat", help="Accept upstream-only keys (CO-43)")] = False,
    if_match: Annotated[
        str | None,
        typer.Option("--if-match", help="Only when this revision is active ('none': only on an empty fleet)"),
    ] = None,
    offline: Annotated[
        bool, typer.Option("--offline", help="No node running: store it under --data-dir (FL-109)")
    ] = False,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="With --offline: the node's store.dir")
    ] = None,
    node_file: Annotated[
        Path | None, typer.Option("--node", help="With --offline: the node file (its store.dir)")
    ] = None,
    url: _Url = DEFAULT_URL,
    token: _Token = "",
) -> None:
    """Make FILE the fleet's active company revision (PUT /config; CO-4, CO-28, FL-109).

    FILE is validated here first: on an error nothing is sent (exit 2). Relative offline
    script paths are sent as absolute paths under FILE's directory: the node resolves them as given.
    """
    summary = summary if summary is not None else f"import {file.name}"
    header = summary_header(summary)
    if offline and (dry_run or if_match is not None):
        fail(["--offline stores without a node: --dry-run and --if-match need one (drop --offline)"])
    if offline and node_file is not None:
        data_dir = offline_store_dir(node_file, data_dir)
    if offline and data_dir is None:
        fail(["--offline needs --data-dir D (the node's store.dir, e.g. .crewlet/node-0) or --node F"])
    document, company, issues = check_document(file, compat=compat)
    errors = [i for i in issues if i.severity == "error"]
    for i in issues:
        typer.echo(i.line(), err=True)
    if document is None or company is None or errors:
        fail(["nothing was imported"])
    if offline:
        assert data_dir is not None
        applied = company.model_dump(mode="json", exclude_unset=True)
        for i in unresolved_issues(applied, os.environ, file=str(file), where="this shell's environment"):
            typer.echo(i.line(), err=True)  # no node to ask: this shell is the best guess
        # keep the converted document; the revision carries the compat flag for its apply (CO-43)
        stored = company.model_dump(mode="json", exclude_unset=True) if compat else document
        import_offline(data_dir, absolute_scripts(stored, file.resolve().parent), summary, compat=compat)
        return
    document = absolute_scripts(document, file.resolve().parent)
    node = ConfigNode(url, token)
    params = {k: "true" for k, on in (("compat", compat), ("dry_run", dry_run)) if on}
    headers: dict[str, str | bytes] = {"X-Summary": header}
    if if_match is not None:
        headers["If-Match"] = if_match
    body = json.dumps(document, ensure_ascii=False, default=str).encode()
    r = node.call("PUT", "/config", params=params, headers=headers, body=body, file=str(file))
    answer: dict[str, Any] = r.json()
    local = {(i.path, i.message) for i in issues}
    for w in answer.get("warnings") or []:
        if isinstance(w, dict) and (w.get("path", ""), w.get("message")) not in local:
            typer.echo(issue_line({**w, "severity": "warning"}, str(file)), err=True)
    if dry_run:
        changes = answer.get("changes") or []
        if not changes:
            typer.echo(f"dry run: {file} is valid; no differences from the active revision")
        else:
            typer.echo(f"dry run: {file} is valid; activating it would change {len(changes)} path(s):")
            echo_changes(changes)
        typer.echo("nothing was activated")
        return
    echo_activated(answer)


@app.command()
def show(url: _Url = DEFAULT_URL, token: _Token = "", as_json: _Json = False) -> None:
    """Summarise the active revision: id, epoch, origin, the company, its seats and providers."""
    active: dict[str, Any] = ConfigNode(url, token).call("GET", "/config").json()
    if as_json:
        typer.echo(json.dumps(active, indent=2, ensure_ascii=False))
        return
    origin = f"{active.get('created_by') or 'not recorded'} ({active.get('created_by_kind') or '?'})"
    rows = [
        ("revision", str(active.get("revision_id"))),
        ("epoch", str(active.get("epoch"))),
        ("activated at", f"{active.get('activated_at')} by {active.get('activated_by') or 'not recorded'}"),
        ("created", f"{active.get('created_at')} by {origin} via {active.get('source')}"),
        ("parent", str(active.get("parent_revision_id") or "none")),
        ("summary", str(active.get("summary") or "")),
    ]
    document = active.get("document")
    rows += org_rows(document) if isinstance(document, dict) else [("document", "(not returned)")]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for label, value in rows:
        grid.add_row(label, Text(clean(value)))  # the company's names are untrusted text
    console().print(grid)


@app.command()
def export(
    revision: Annotated[
        str | None, typer.Option("--revision", help="A revision id (default: the active one)")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write here instead of stdout")
    ] = None,
    url: _Url = DEFAULT_URL,
    token: _Token = "",
) -> None:
    """Print a revision's document as YAML (literal credentials masked, ${...} references kept)."""
    node = ConfigNode(url, token)
    path = "/config" if revision is None else revision_path(revision)
    subject = f"revision {revision!r}" if revision is not None else ""
    text = node.call("GET", path, params={"format": "yaml"}, subject=subject).text
    if output is None:
        typer.echo(text, nl=not text.endswith("\n"))
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as e:
        fail([f"{output}: cannot write: {e.strerror or e}"])
    typer.echo(f"wrote {output} ({revision or 'the active revision'})")


@app.command()
def revisions(
    limit: Annotated[int, typer.Option("--limit", min=1, help="How many, newest first")] = 20,
    url: _Url = DEFAULT_URL,
    token: _Token = "",
    as_json: _Json = False,
) -> None:
    """List revisions newest first; the active one is marked with the fleet's epoch."""
    listing: dict[str, Any] = (
        ConfigNode(url, token).call("GET", "/config/revisions", params={"limit": limit}).json()
    )
    if as_json:
        typer.echo(json.dumps(listing, indent=2, ensure_ascii=False))
        return
    active = listing.get("active_revision_id")
    table = Table(title=f"revisions (active: {active or 'none'}, epoch {listing.get('epoch')})")
    table.add_column("active")
    table.add_column("revision", no_wrap=True)
    for col in ("created at", "by", "source", "summary"):
        table.add_column(col)
    for rev in listing.get("revisions") or []:
        mark = (
            f"* epoch {listing.get('epoch')}" if rev.get("active") or rev.get("revision_id") == active else ""
        )
        by = f"{rev.get('created_by') or 'not recorded'} ({rev.get('created_by_kind') or '?'})"
        cells = (str(rev.get(k) or "") for k in ("revision_id", "created_at"))
        table.add_row(mark, *cells, by, str(rev.get("source") or ""), Text(str(rev.get("summary") or "")))
    console().print(table)


@app.command()
def diff(
    revision: Annotated[str, typer.Argument(help="The revision to show (the newer side)")],
    against: Annotated[
        str | None, typer.Argument(help="The revision to compare with (default: its parent)")
    ] = None,
    url: _Url = DEFAULT_URL,
    token: _Token = "",
    as_json: _Json = False,
) -> None:
    """Show what REVISION changed against AGAINST (or its parent); values come redacted."""
    params = {"against": against} if against is not None else None
    subject = f"revision {revision!r}" + (f" or {against!r}" if against is not None else "")
    answer: dict[str, Any] = (
        ConfigNode(url, token)
        .call("GET", revision_path(revision) + "/diff", params=params, subject=subject)
        .json()
    )
    if as_json:
        typer.echo(json.dumps(answer, indent=2, ensure_ascii=False))
        return
    typer.echo(f"from {answer.get('from') or '(nothing)'} to {answer.get('to')}")
    changes = answer.get("changes") or []
    if not changes:
        typer.echo("no differences")
    echo_changes(changes)


@app.command()
def activate(
    revision: Annotated[str, typer.Argument(help="The revision to make active")],
    summary: Annotated[
        str | None, typer.Option("--summary", help="Why (recorded with the activation)")
    ] = None,
    url: _Url = DEFAULT_URL,
    token: _Token = "",
) -> None:
    """Point the fleet at REVISION with a new epoch (FL-104).

    Re-activating the active revision mints a new epoch too: every node re-applies it and re-reads
    its secrets (the way to pick up a rotated secret, FL-115).
    """
    node = ConfigNode(url, token)
    headers: dict[str, str | bytes] = {"X-Summary": summary_header(summary)} if summary is not None else {}
    answer: dict[str, Any] = node.call(
        "POST", revision_path(revision) + "/activate", headers=headers, subject=f"revision {revision!r}"
    ).json()
    echo_activated(answer, "; every node applies it and re-reads its secrets")
