"""``crewlet config``: the company document's revisions, through a running node (CO-4, CO-28).

The control plane (fleet.md §14) holds the one source of truth for the company document in a
fleet; these commands talk to it through a node's API (``GET``/``PUT /config``,
``/config/revisions...``, CO-27):

- ``import FILE [--summary S] [--dry-run] [--compat] [--if-match ID]``: a new active revision
  (``PUT /config``); ``--dry-run`` validates on the node and lists what would change.
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
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Annotated, Any, NoReturn, cast
from urllib.parse import quote

import httpx
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from shared.config import (
    Company,
    ConfigInvalid,
    Issue,
    IssueType,
    OrgModel,
    read_yaml_mapping,
    validate_company_data,
    validate_offline_script_data,
)

__all__ = ["absolute_scripts", "app", "change_line", "check_document"]

app = typer.Typer(no_args_is_help=True, help="The company document's revisions (CO-4, CO-28).")

DEFAULT_URL = "http://127.0.0.1:8080"
"""Where a node's API is when neither ``--url`` nor ``CREWLET_URL`` says otherwise."""
EXIT_UNREACHABLE = 1
EXIT_REFUSED = 2
_TIMEOUT = 60.0  # seconds; an import waits for the node's validation and the pointer's CAS

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


def _fail(lines: list[str], code: int = EXIT_REFUSED) -> NoReturn:
    for line in lines:
        typer.echo(line, err=True)
    raise typer.Exit(code)


def _console() -> Console:
    """A console for tables; wide when not a terminal, so piped ids are never folded."""
    out = Console(markup=False, highlight=False)
    return out if out.is_terminal else Console(markup=False, highlight=False, width=200)


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def change_line(change: dict[str, Any]) -> str:
    """Render one change of a diff as ``+ path: value``, ``- path: value`` or ``~ path: before -> after``.

    Args:
        change: ``{"path", "op", "before", "after"}`` as the node's diff route returns it
            (``op`` is ``added``, ``removed`` or ``changed``); values are printed as JSON.

    Returns:
        The line, without a newline.
    """
    path, op = change.get("path", ""), change.get("op")
    if op == "added":
        return f"+ {path}: {_dump(change.get('after'))}"
    if op == "removed":
        return f"- {path}: {_dump(change.get('before'))}"
    return f"~ {path}: {_dump(change.get('before'))} -> {_dump(change.get('after'))}"


def _echo_changes(changes: list[dict[str, Any]]) -> None:
    colours = {"+": "green", "-": "red", "~": "yellow"}
    for change in changes:
        line = change_line(change)
        typer.echo(typer.style(line, fg=colours.get(line[0])))


# --- the document, checked before it leaves this machine ------------------------------------


def absolute_scripts(document: dict[str, Any], base: Path) -> dict[str, Any]:
    """Return a copy of ``document`` whose relative offline ``script`` paths are absolute.

    An offline provider's rules file (``providers.llm.<key>.script``, CO-15) is relative to the
    company file. A node resolves it against the path as given (relative to the directory its own
    seed came from), so a document sent from elsewhere must carry absolute paths: this assumes
    the node can read this machine's files (a node on loopback, or a shared filesystem).

    Args:
        document: The company document as read from the file (not modified).
        base: The company file's directory.

    Returns:
        A deep copy with each relative ``script`` replaced by ``base / script``, resolved.
    """
    out = copy.deepcopy(document)
    providers = out.get("providers")
    llm = providers.get("llm") if isinstance(providers, dict) else None
    if isinstance(llm, dict):
        for entry in llm.values():
            script = entry.get("script") if isinstance(entry, dict) else None
            if isinstance(script, str) and script and not Path(script).is_absolute():
                entry["script"] = str((base / script).resolve())
    return out


def check_document(
    path: Path, *, compat: bool = False
) -> tuple[dict[str, Any] | None, Company | None, list[Issue]]:
    """Read and validate a company file the way ``crewlet validate`` does (CO-1, CO-15, CO-43).

    Args:
        path: The company file.
        compat: Accept the upstream example's older shape (CO-43): unsupported blocks become
            ``unsupported`` warnings.

    Returns:
        ``(document, company, issues)``: the parsed document (None when the file could not be read
        as a YAML mapping), the validated :class:`~shared.config.Company` (None when any issue is
        an error) and every issue, errors and warnings, each naming its file and path. Offline
        providers' rules files are read and checked too, relative to the company file.
    """
    name = str(path)
    try:
        document = read_yaml_mapping(path)
    except ConfigInvalid as e:
        return None, None, list(e.issues)
    company, issues = validate_company_data(document, file=name, compat=compat)
    if company is None:
        return document, None, issues
    seats = {s.handle for s in OrgModel.from_company(company).seats}
    for key, entry in company.providers.llm.items():
        if entry.type != "offline" or not entry.script:
            continue
        script = path.parent / entry.script
        try:
            script_data = read_yaml_mapping(script)
        except ConfigInvalid as e:
            issues += [
                Issue(name, f"providers.llm.{key}.script", i.type, f"{script}: {i.message}") for i in e.issues
            ]
            continue
        issues += validate_offline_script_data(script_data, file=str(script), seats=seats)[1]
    if any(i.severity == "error" for i in issues):
        company = None
    return document, company, issues


def _issue_line(issue: dict[str, Any], file: str) -> str:
    """One issue dict from the node, as ``file: path: message`` (the document's file when unnamed)."""
    return Issue(
        str(issue.get("file") or file),
        str(issue.get("path") or ""),
        cast(IssueType, issue.get("type") or "invalid"),
        str(issue.get("message", "")),
        "warning" if issue.get("severity") == "warning" else "error",
    ).line()


# --- the node's API ---------------------------------------------------------------------------


class _Node:
    """One node's ``/config`` routes; every failure ends the command with its exit code."""

    def __init__(self, url: str, token: str) -> None:
        if not token:
            _fail(["no API token: set CREWLET_API_TOKEN or pass --token"])
        self.url = url.rstrip("/")
        # X-Crewlet-Client: the node records the revision's source as ``cli`` (CO-4), not ``api``
        self._auth = {"Authorization": f"Bearer {token}", "X-Crewlet-Client": "cli"}

    def call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        headers: dict[str, str | bytes] | None = None,
        body: bytes | None = None,
        subject: str = "",
        file: str = "",
    ) -> httpx.Response:
        """Send one request; return a 2xx answer, print the refusal and exit otherwise.

        Args:
            method: The HTTP method.
            path: The route, e.g. ``/config/revisions``.
            params: Query parameters.
            headers: More headers (the bearer token is always sent).
            body: A JSON body, already encoded.
            subject: Named before a refusal (e.g. ``revision 'abc'``).
            file: The document's file, for the ``file: path: message`` lines of a 422.
        """
        hdrs: dict[str, str | bytes] = {**self._auth, **(headers or {})}
        if body is not None:
            hdrs["Content-Type"] = "application/json"
        # bytes, so a non-ASCII summary goes out as UTF-8 instead of failing in httpx's ASCII encoder
        raw = [(k.encode(), v if isinstance(v, bytes) else v.encode()) for k, v in hdrs.items()]
        try:
            with httpx.Client(timeout=_TIMEOUT) as client:
                r = client.request(method, self.url + path, params=params, headers=raw, content=body)
        except httpx.HTTPError as e:
            _fail([f"cannot reach {self.url}: {e or type(e).__name__}"], EXIT_UNREACHABLE)
        if r.is_success:
            return r
        self._refused(r, subject=subject, file=file)

    def _refused(self, r: httpx.Response, *, subject: str, file: str) -> NoReturn:
        try:
            err = r.json()
        except ValueError:
            err = None
        if not isinstance(err, dict):
            _fail([f"{self.url} answered {r.status_code}: {r.text[:2000]}"], self._code(r))
        code, detail = str(err.get("error") or r.status_code), err.get("detail")
        if r.status_code in (401, 403):
            _fail([f"{self.url} refused the token ({r.status_code} {code}): {detail or 'check --token'}"])
        lines = [_issue_line(i, file) for i in err.get("issues") or [] if isinstance(i, dict)]
        head = f"{subject}: " if subject else ""
        lines.append(f"{head}{code}" + (f": {detail}" if detail else f" ({r.status_code})"))
        if code == "revision_advanced":
            lines.append(
                f"revision {err.get('revision_id')} is in history, not active; the fleet activated "
                f"{err.get('active_revision_id')} meanwhile (`crewlet config activate "
                f"{err.get('revision_id')}` makes it active)"
            )
        elif code == "no_active_revision":
            lines.append("the fleet has no active revision yet: `crewlet config import FILE` makes one")
        _fail(lines, self._code(r))

    @staticmethod
    def _code(r: httpx.Response) -> int:
        return EXIT_UNREACHABLE if r.status_code >= 500 else EXIT_REFUSED


_REVISION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _revision_path(revision: str) -> str:
    """The route of one revision; an id that no revision can have is refused locally (exit 2)."""
    if not _REVISION_ID.match(revision):
        _fail([f"unknown revision {revision!r}: `crewlet config revisions` lists them"])
    return "/config/revisions/" + quote(revision, safe="")


def _summary_header(summary: str) -> bytes:
    """``X-Summary`` as UTF-8 bytes: one line, refused locally otherwise (a header cannot hold a newline)."""
    if not summary.strip() or any(ord(c) < 32 or ord(c) == 127 for c in summary):
        _fail([f"--summary {summary!r}: give one non-empty line of text"])
    return summary.encode("utf-8")


def _echo_activated(answer: dict[str, Any], tail: str = "") -> None:
    """Print an activation: ``revision <id> active at epoch <n> (activated at <instant>)``."""
    typer.echo(
        f"revision {answer.get('revision_id')} active at epoch {answer.get('epoch')} "
        f"(activated at {answer.get('activated_at')}){tail}"
    )
    if answer.get("applied_here") is False:
        typer.echo(
            "the node that answered had not applied it when it answered (slow, or the apply failed): "
            "`crewlet fleet status` shows each node's epoch and apply status"
        )


# --- commands ---------------------------------------------------------------------------------


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
    header = _summary_header(summary)
    if offline and (dry_run or if_match is not None):
        _fail(["--offline stores without a node: --dry-run and --if-match need one (drop --offline)"])
    if offline and node_file is not None:
        data_dir = _offline_store_dir(node_file, data_dir)
    if offline and data_dir is None:
        _fail(["--offline needs --data-dir D (the node's store.dir, e.g. .crewlet/node-0) or --node F"])
    document, company, issues = check_document(file, compat=compat)
    errors = [i for i in issues if i.severity == "error"]
    for i in issues:
        typer.echo(i.line(), err=True)
    if document is None or company is None or errors:
        _fail(["nothing was imported"])
    if offline:
        assert data_dir is not None
        # keep the converted document; the revision carries the compat flag for its apply (CO-43)
        stored = company.model_dump(mode="json", exclude_unset=True) if compat else document
        _import_offline(data_dir, absolute_scripts(stored, file.resolve().parent), summary, compat=compat)
        return
    document = absolute_scripts(document, file.resolve().parent)
    node = _Node(url, token)
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
            typer.echo(_issue_line({**w, "severity": "warning"}, str(file)), err=True)
    if dry_run:
        changes = answer.get("changes") or []
        if not changes:
            typer.echo(f"dry run: {file} is valid; no differences from the active revision")
        else:
            typer.echo(f"dry run: {file} is valid; activating it would change {len(changes)} path(s):")
            _echo_changes(changes)
        typer.echo("nothing was activated")
        return
    _echo_activated(answer)


SCRATCH_REFUSAL = (
    "store.scratch: true: this node's store is wiped at every boot, so an offline write would vanish "
    "(FL-145); configure the fleet through a data node's API instead (crewlet config import FILE --url U)"
)


def _offline_store_dir(node_file: Path, data_dir: Path | None) -> Path:
    """The store directory an offline command writes to, from ``--node F`` (FL-145).

    Exits 2 when the node file is invalid, names another directory than ``--data-dir``, or sets
    ``store.scratch: true`` (the refusal names ``store.scratch``).
    """
    from shared.config import load_node_file

    try:
        cfg, _warnings = load_node_file(str(node_file))
    except ConfigInvalid as e:
        _fail([i.line() for i in e.issues])
    if cfg.store.scratch:
        _fail([f"{node_file}: {SCRATCH_REFUSAL}"])
    if data_dir is not None and data_dir.resolve() != cfg.store_dir.resolve():
        _fail([f"--data-dir {data_dir} is not {node_file}'s store.dir ({cfg.store_dir}): give one of them"])
    return cfg.store_dir


def refuse_scratch_store(data_dir: Path) -> None:
    """Exit 2 naming ``store.scratch`` when ``data_dir`` is a scratch store (FL-145).

    A scratch node marks its store with ``.scratch`` at every boot (:mod:`crewlet.node`).
    """
    if (data_dir / ".scratch").exists():
        _fail([f"{data_dir}: {SCRATCH_REFUSAL}"])


def _import_offline(data_dir: Path, document: dict[str, Any], summary: str, *, compat: bool = False) -> None:
    """Store ``document`` in a stopped node's store (FL-109): the pointer moves at its next start.

    A scratch store is refused naming ``store.scratch`` (FL-145).
    """
    from shared import control  # the control plane; imported only when asked for
    from shared.errors import CrewletError, UsageError

    if not data_dir.is_dir():
        _fail([f"{data_dir}: no such directory (give the node's store.dir, e.g. .crewlet/node-0)"])
    refuse_scratch_store(data_dir)
    try:
        store = control.node_store(data_dir)
        revision = control.offline_import(store, document, summary=summary, compat=compat)
    except CrewletError as e:
        lines = [i.line() for i in getattr(e, "issues", None) or [] if isinstance(i, Issue)]
        _fail([*lines, f"{data_dir}: {e}"], EXIT_REFUSED if isinstance(e, UsageError) else EXIT_UNREACHABLE)
    except OSError as e:
        _fail([f"{data_dir}: {e.strerror or e}"], EXIT_UNREACHABLE)
    typer.echo(
        f"revision {revision} stored in {store}; the fleet's pointer moves to it at that node's next start"
    )


def _org_rows(document: dict[str, Any]) -> list[tuple[str, str]]:
    """``(label, value)`` rows naming the company, its units, seats and providers."""
    llm = (document.get("providers") or {}).get("llm") or {}
    providers = [f"{k} ({v.get('type', '?')})" if isinstance(v, dict) else str(k) for k, v in llm.items()]
    rows = [("company", str(document.get("name", ""))), ("providers", ", ".join(providers) or "none")]
    # compat: a document stored in the upstream shape still reads; masked credentials are strings
    company, issues = validate_company_data(document, compat=True)
    if company is None:
        first = next(i.line() for i in issues if i.severity == "error")
        return [*rows, ("org", f"not readable by this build ({first})")]
    org = OrgModel.from_company(company)

    def listed(names: list[str]) -> str:
        return f"{len(names)}: {', '.join(names)}" if names else "0"

    return [
        *rows[:1],
        ("units", listed([u.id for u in org.units])),
        ("agent seats", listed([s.handle for s in org.seats])),
        ("human seats", listed([s.handle for s in org.humans])),
        *rows[1:],
    ]


@app.command()
def show(url: _Url = DEFAULT_URL, token: _Token = "", as_json: _Json = False) -> None:
    """Summarise the active revision: id, epoch, origin, the company, its seats and providers."""
    active: dict[str, Any] = _Node(url, token).call("GET", "/config").json()
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
    rows += _org_rows(document) if isinstance(document, dict) else [("document", "(not returned)")]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for label, value in rows:
        grid.add_row(label, Text(value))
    _console().print(grid)


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
    node = _Node(url, token)
    path = "/config" if revision is None else _revision_path(revision)
    subject = f"revision {revision!r}" if revision is not None else ""
    text = node.call("GET", path, params={"format": "yaml"}, subject=subject).text
    if output is None:
        typer.echo(text, nl=not text.endswith("\n"))
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as e:
        _fail([f"{output}: cannot write: {e.strerror or e}"])
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
        _Node(url, token).call("GET", "/config/revisions", params={"limit": limit}).json()
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
    _console().print(table)


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
        _Node(url, token)
        .call("GET", _revision_path(revision) + "/diff", params=params, subject=subject)
        .json()
    )
    if as_json:
        typer.echo(json.dumps(answer, indent=2, ensure_ascii=False))
        return
    typer.echo(f"from {answer.get('from') or '(nothing)'} to {answer.get('to')}")
    changes = answer.get("changes") or []
    if not changes:
        typer.echo("no differences")
    _echo_changes(changes)


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
    node = _Node(url, token)
    headers: dict[str, str | bytes] = {"X-Summary": _summary_header(summary)} if summary is not None else {}
    answer: dict[str, Any] = node.call(
        "POST", _revision_path(revision) + "/activate", headers=headers, subject=f"revision {revision!r}"
    ).json()
    _echo_activated(answer, "; every node applies it and re-reads its secrets")
