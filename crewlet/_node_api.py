"""One request to a running node's API, as the operator commands send it (FL-24 §CLI).

Shared by :mod:`crewlet.broker_cli`, :mod:`crewlet.budgets_cli` and :mod:`crewlet.schedules_cli`:
the ``--url`` / ``--token`` / ``--json`` options (``CREWLET_URL``, ``CREWLET_API_TOKEN``),
:func:`call`, which turns every outcome into an exit code and a printed line — never a
traceback — and :func:`show_view`, the whole of a read-only listing command.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console

__all__ = ["JsonFlag", "Token", "Url", "call", "refusal_text", "show_view"]

Url = Annotated[str, typer.Option("--url", "-url", envvar="CREWLET_URL", help="A node's base URL")]
"""The ``--url`` option: a node's base URL."""
Token = Annotated[str, typer.Option("--token", "-token", envvar="CREWLET_API_TOKEN", help="API token")]
"""The ``--token`` option: an API token holding the route's grant."""
JsonFlag = Annotated[bool, typer.Option("--json", "-json", help="Print the raw answer")]
"""The ``--json`` option: print the route's answer as JSON instead of a table."""


def call(
    method: str,
    url: str,
    token: str,
    path: str,
    *,
    timeout: float,
    out: Console,
    body: dict[str, Any] | None = None,
) -> tuple[int, Any]:
    """Send one request; return ``(exit code, answer)``.

    Args:
        method: ``GET`` or ``POST``.
        url: The node's base URL.
        token: The API token; "" prints what to set and answers exit code 2.
        path: The route with its query string.
        timeout: Seconds to wait for the answer.
        out: Where the refusals are printed.
        body: A JSON body to send, or None for none.

    Returns:
        ``(0, body)`` for a 2xx; ``(1, None)`` when the node cannot be reached or answers no JSON;
        ``(1, body)`` for a 503/504 and ``(2, body)`` for any other refusal, printed as
        ``refused (<status> <code>): <detail>``.
    """
    if not token:
        out.print("no API token: set CREWLET_API_TOKEN or pass --token")
        return 2, None
    base = url.rstrip("/")
    try:
        with httpx.Client(timeout=timeout) as client:
            r = client.request(method, base + path, json=body, headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as e:
        out.print(f"cannot reach the node at {base}: {type(e).__name__}: {e}", markup=False)
        return 1, None
    try:
        answer = r.json()
    except ValueError:
        out.print(f"{base}{path} answered {r.status_code}: {r.text[:500]}", markup=False)
        return 1, None
    if 200 <= r.status_code < 300:
        return 0, answer
    code = answer.get("error", "") if isinstance(answer, dict) else ""
    out.print(f"refused ({r.status_code} {code}): {refusal_text(answer)}", markup=False)
    return (1 if r.status_code in (503, 504) else 2), answer


def refusal_text(answer: Any) -> str:
    """The readable part of a refusal's JSON: its ``detail``, a validation error as
    ``field: message; ...`` (each field named), anything else as JSON."""
    if not isinstance(answer, dict):
        return json.dumps(answer)
    detail = answer.get("detail", answer)
    if isinstance(detail, list):  # a validation error: name each field
        parts = []
        for d in detail:
            if isinstance(d, dict):
                where = d.get("path") or ".".join(str(x) for x in d.get("loc", []) if x != "body")
                parts.append(f"{where}: {d.get('message') or d.get('msg')}")
        return "; ".join(parts) or json.dumps(detail)
    return detail if isinstance(detail, str) else json.dumps(detail)


def show_view(
    url: str,
    token: str,
    path: str,
    *,
    as_json: bool,
    printer: Callable[[Any, Console], None],
    timeout: float,
    width: int = 160,
) -> None:
    """GET ``path`` and print it: the raw answer with ``as_json``, else through ``printer(view,
    console)``; then exit with :func:`call`'s code (0 shown, 1 unreachable or 5xx, 2 refused).

    Raises:
        typer.Exit: Always, with that code.
    """
    out = Console(width=width)
    code, view = call("GET", url, token, path, timeout=timeout, out=out)
    if code == 0:
        if as_json:
            typer.echo(json.dumps(view, indent=2))
        else:
            printer(view, out)
    raise typer.Exit(code)
