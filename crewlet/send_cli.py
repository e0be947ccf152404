"""``crewlet send HANDLE TEXT``: post a message or a task to a seat through a running node (CO-8, CO-28).

- ``crewlet send HANDLE TEXT [--task] [--work-item KEY] [--wait] [--timeout S] [--url U] [--token T]
  [--json]`` sends ``POST /seats/{handle}/messages`` (grant ``work:write``) with ``{"text", "kind":
  "message"|"task", "work_item"?}`` and prints the ``message_id`` the node answers (202).
- ``--wait`` then polls ``GET /messages/{id}`` (grant ``state:read``) every 0.25 s until the status
  ends (``queued``/``running`` are not ends); while it waits, each new error of an attempt that will
  be retried is printed as it appears (``still queued: llm_unavailable: ... (retry in 30 s)``):

  - ``answered``: prints the seat's reply (the turn's final artifact, CO-8/CO-31), exit 0;
  - ``failed`` / ``dead_lettered``: prints the status, ``error_kind`` and ``error``, exit 1;
  - ``--timeout`` seconds (default 120) pass first: says the message is still ``queued`` or
    ``running`` (and its ``turn_id`` if any) and the ``GET /messages/{id}`` to ask again, exit 2 —
    the message stays in the seat's inbox. ``--timeout`` without ``--wait``, or not a finite
    number (``nan``), is refused (exit 2).

  A task (``--task``) is owed no reply (CO-8), but its status moves through the same record, so
  ``--task --wait`` waits for the turn's end: it prints the turn's outcome and id (and the turn's
  final text when there is one), exit 0 when the turn ended ``answered``.

With ``--json`` the route's answers are printed as JSON (the 202 body, or with ``--wait`` the
final ``GET /messages/{id}`` record). The URL and token default to ``CREWLET_URL`` and
``CREWLET_API_TOKEN``; the command never opens the broker or a store (FL-40): a stopped node
fails naming the URL.

Exit codes: 0 sent (or answered); 1 the node could not be reached, answered 503, or the message
failed; 2 refused (unknown seat 404, human seat 409, bad token 401, bad field 400/422), no token,
or still not finished at ``--timeout``.
"""

from __future__ import annotations

import json
import math
import time
from typing import Annotated, Any, NoReturn
from urllib.parse import quote

import typer
from rich.console import Console

from ._node_api import JsonFlag, Token, Url, call, clean, clean_view

__all__ = ["ENDED", "TIMEOUT", "last_error", "send"]

TIMEOUT = 15.0
"""Seconds each request waits for the node."""
POLL = 0.25
"""Seconds between two ``GET /messages/{id}`` while waiting."""
ENDED = {"answered", "failed", "dead_lettered"}
"""Statuses a message does not leave (services/seats/messages.py)."""


def _get(url: str, token: str, message_id: str, out: Console) -> tuple[int, Any]:
    """One ``GET /messages/{id}``; a record without a ``status`` is not a crewlet node's."""
    return call(
        "GET",
        url,
        token,
        "/messages/{id}",
        parts={"id": message_id},
        names={"id": "the message id"},
        need={"status": str},
        timeout=TIMEOUT,
        out=out,
    )


def last_error(record: dict[str, Any]) -> str | None:
    """The line saying why a message that has not ended is still waiting, or None when nothing failed.

    E.g. ``still queued: llm_unavailable: no member of the chain has a usable key (retry in 30 s,
    turn T)``: what ``GET /messages/{id}`` records after an attempt that will be retried (issue 38).
    """
    if not record.get("error") and not record.get("error_kind"):
        return None
    line = f"still {record.get('status', 'queued')}: {record.get('error_kind') or 'error'}: {record.get('error') or ''}"
    extra = (
        [f"retry in {record['retry_in_seconds']:g} s"]
        if isinstance(record.get("retry_in_seconds"), int | float)
        else []
    )
    extra += [f"turn {record['turn_id']}"] if record.get("turn_id") else []
    return clean(line.rstrip(": ") + (f" ({', '.join(extra)})" if extra else ""), one_line=True)


def _wait(
    url: str, token: str, message_id: str, timeout: float, out: Console, *, tell: Console | None = None
) -> tuple[int, dict[str, Any]]:
    """Poll ``GET /messages/{id}`` until its status ends or ``timeout`` s pass; return (code, record).

    Code 0 on a final record, 3 on timeout (the caller maps it), the :func:`call` code on a refusal.
    A transient 503 (the message store electing a leader) is retried until the deadline. With
    ``tell``, each new :func:`last_error` of the waiting message is printed there as it appears.
    """
    deadline = time.monotonic() + timeout
    record: dict[str, Any] = {"message_id": message_id, "status": "queued"}
    quiet = Console(quiet=True)  # transient refusals (503 while a store elects) are retried quietly
    told: tuple[Any, ...] | None = None
    while True:
        code, got = _get(url, token, message_id, quiet)
        if code == 0 and isinstance(got, dict):
            record = got
            if record.get("status") in ENDED:
                return 0, record
            why = last_error(record)
            attempt = tuple(record.get(f) for f in ("status", "error_kind", "error", "turn_id"))
            if tell is not None and why is not None and attempt != told:
                tell.print(why)  # a new attempt's error: say it once, as it appears
                told = attempt
        elif code == 2 or got is None:
            _get(url, token, message_id, out)  # print why
            return code or 1, record
        if time.monotonic() >= deadline:
            return 3, record
        time.sleep(POLL)


def send(
    handle: Annotated[str, typer.Argument(help="The seat's handle, e.g. triage")],
    text: Annotated[str, typer.Argument(help="The message (1..32000 characters)")],
    task: Annotated[
        bool, typer.Option("--task", help="Send a task (no reply owed) instead of a message")
    ] = False,
    work_item: Annotated[
        str | None, typer.Option("--work-item", help="A work item the message is about (KEY, e.g. SUP-1)")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the turn and print the reply")] = False,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            min=0.0,
            help="Seconds --wait waits before giving up (exit 2; default 120); needs --wait",
        ),
    ] = None,
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
    as_json: JsonFlag = False,
) -> None:
    """Post a message (or --task) to a seat's inbox; --wait prints the seat's reply (CO-8, CO-28).

    A task is owed no reply: with --wait it waits for the turn's end and prints its outcome. Exit 0
    sent or answered; 1 unreachable, 503, failed or dead-lettered; 2 refused, or still queued or
    running at --timeout.
    """
    out = Console(width=200, markup=False, highlight=False)
    err = Console(stderr=True, width=200, markup=False, highlight=False)
    if timeout is not None and not wait:
        err.print("--timeout: only --wait waits; add --wait or leave --timeout out")
        raise typer.Exit(2)
    if timeout is not None and not math.isfinite(timeout):
        err.print(f"--timeout: {timeout} is not a finite number of seconds; give e.g. --timeout 120")
        raise typer.Exit(2)
    limit = 120.0 if timeout is None else timeout
    body: dict[str, Any] = {"text": text, "kind": "task" if task else "message"}
    if work_item:
        body["work_item"] = work_item
    code, answer = call(
        "POST",
        url,
        token,
        "/seats/{handle}/messages",
        parts={"handle": handle},
        names={"work_item": "--work-item"},
        need={"message_id": str},
        timeout=TIMEOUT,
        out=err,
        body=body,
    )
    if code != 0:
        raise typer.Exit(code)
    message_id = answer["message_id"]
    if not message_id:
        err.print(f"the answer from {clean(url, one_line=True)} is not a crewlet node's: empty 'message_id'")
        raise typer.Exit(1)
    shown, who = clean(message_id, one_line=True), clean(handle, one_line=True)
    if not wait:
        if as_json:
            typer.echo(json.dumps(answer, indent=2))
        else:
            out.print(f"{'task' if task else 'message'} {shown} queued for {who}")
        raise typer.Exit(0)
    if not as_json:
        err.print(f"{'task' if task else 'message'} {shown} queued for {who}; waiting")
    _wait_and_print(url, token, handle, message_id, limit, task=task, as_json=as_json, out=out, err=err)


def _wait_and_print(
    url: str,
    token: str,
    handle: str,
    message_id: str,
    limit: float,
    *,
    task: bool,
    as_json: bool,
    out: Console,
    err: Console,
) -> NoReturn:
    """``send --wait``: wait up to ``limit`` seconds for the message's turn, print its reply or why not,
    and exit (0 answered; 1 unreachable, failed or dead-lettered; 2 still queued or running)."""
    shown, who = clean(message_id, one_line=True), clean(handle, one_line=True)
    code, record = _wait(url, token, message_id, limit, err, tell=None if as_json else err)
    if as_json:
        typer.echo(json.dumps(record, indent=2))
    record = clean_view(record)
    status = record.get("status")
    if code == 3:
        turn = f" (turn {record['turn_id']})" if record.get("turn_id") else ""
        why = last_error(record)
        err.print(
            f"message {shown} is still {status}{turn} after {limit:g} s"
            + (f" ({why.removeprefix(f'still {status}: ')})" if why else "")
            + f"; it stays in {who}'s inbox: "
            f"ask again with GET {url.rstrip('/')}/messages/{quote(message_id, safe='')} (grant state:read)"
        )
        raise typer.Exit(2)
    if code != 0:
        raise typer.Exit(code)
    if status == "answered":
        if not as_json:
            reply = record.get("reply") or ""
            if task:
                out.print(f"task done: turn {record.get('turn_id')} ended {record.get('outcome')}")
                if reply:
                    out.print(str(reply))
            else:
                out.print(str(reply))
        raise typer.Exit(0)
    err.print(
        f"message {shown} {status}: {record.get('error_kind') or record.get('outcome') or '?'}: "
        f"{record.get('error') or 'no error recorded'}"
        + (f" (turn {record['turn_id']})" if record.get("turn_id") else "")
    )
    raise typer.Exit(1)
