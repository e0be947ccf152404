"""The ``/config`` routes of a running node, as ``crewlet config`` calls them (CO-4, CO-27, CO-28).

Owns :class:`ConfigNode` (one request; every failure ends the command with its exit code and the
node's refusal printed), the printers of an answer (:func:`change_line`, :func:`echo_activated`) and
the local refusals of an argument no route would take (:func:`revision_path`, :func:`summary_header`).
"""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn, cast
from urllib.parse import quote

import httpx
import typer
from rich.console import Console

from shared.config import Issue, IssueType

__all__ = [
    "EXIT_REFUSED",
    "EXIT_UNREACHABLE",
    "ConfigNode",
    "change_line",
    "console",
    "echo_activated",
    "echo_changes",
    "fail",
    "issue_line",
    "revision_path",
    "summary_header",
]

EXIT_UNREACHABLE = 1
EXIT_REFUSED = 2
_TIMEOUT = 60.0  # seconds; an import waits for the node's validation and the pointer's CAS


def fail(lines: list[str], code: int = EXIT_REFUSED) -> NoReturn:
    """Print ``lines`` on stderr and end the command with ``code``."""
    for line in lines:
        typer.echo(line, err=True)
    raise typer.Exit(code)


def console() -> Console:
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


def echo_changes(changes: list[dict[str, Any]]) -> None:
    """Print each change of a diff (:func:`change_line`), coloured by its kind."""
    colours = {"+": "green", "-": "red", "~": "yellow"}
    for change in changes:
        line = change_line(change)
        typer.echo(typer.style(line, fg=colours.get(line[0])))


def issue_line(issue: dict[str, Any], file: str) -> str:
    """One issue dict from the node, as ``file: path: message`` (the document's file when unnamed)."""
    return Issue(
        str(issue.get("file") or file),
        str(issue.get("path") or ""),
        cast(IssueType, issue.get("type") or "invalid"),
        str(issue.get("message", "")),
        "warning" if issue.get("severity") == "warning" else "error",
    ).line()


class ConfigNode:
    """One node's ``/config`` routes; every failure ends the command with its exit code."""

    def __init__(self, url: str, token: str) -> None:
        if not token:
            fail(["no API token: set CREWLET_API_TOKEN or pass --token"])
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
            fail([f"cannot reach {self.url}: {e or type(e).__name__}"], EXIT_UNREACHABLE)
        if r.is_success:
            return r
        self._refused(r, subject=subject, file=file)

    def _refused(self, r: httpx.Response, *, subject: str, file: str) -> NoReturn:
        try:
            err = r.json()
        except ValueError:
            err = None
        if not isinstance(err, dict):
            fail([f"{self.url} answered {r.status_code}: {r.text[:2000]}"], self._code(r))
        code, detail = str(err.get("error") or r.status_code), err.get("detail")
        if r.status_code in (401, 403):
            fail([f"{self.url} refused the token ({r.status_code} {code}): {detail or 'check --token'}"])
        lines = [issue_line(i, file) for i in err.get("issues") or [] if isinstance(i, dict)]
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
        fail(lines, self._code(r))

    @staticmethod
    def _code(r: httpx.Response) -> int:
        return EXIT_UNREACHABLE if r.status_code >= 500 else EXIT_REFUSED


REVISION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def revision_path(revision: str) -> str:
    """The route of one revision; an id that no revision can have is refused locally (exit 2)."""
    if not REVISION_ID.match(revision):
        fail([f"unknown revision {revision!r}: `crewlet config revisions` lists them"])
    return "/config/revisions/" + quote(revision, safe="")


def summary_header(summary: str) -> bytes:
    """``X-Summary`` as UTF-8 bytes: one line, refused locally otherwise (a header cannot hold a newline)."""
    if not summary.strip() or any(ord(c) < 32 or ord(c) == 127 for c in summary):
        fail([f"--summary {summary!r}: give one non-empty line of text"])
    return summary.encode("utf-8")


def echo_activated(answer: dict[str, Any], tail: str = "") -> None:
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
