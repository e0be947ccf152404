"""A read-only operator command's whole run, with refusals on stderr (issue 15: ``turns``, ``turn``,
``work``, ``objects``).

Like :func:`crewlet._node_api.show_view`, but the refusal line goes to stderr so ``--json`` output on
stdout stays parseable, and the printer's console has markup off: seat output carries brackets
(``[offline]``) that are text, not style.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console

from ._node_api import call

__all__ = ["fetch", "plain_console", "show"]


def plain_console(width: int = 200) -> Console:
    """A stdout console with markup and highlighting off, ``width`` columns when not a terminal."""
    return Console(width=width, markup=False, highlight=False)


def fetch(url: str, token: str, path: str, *, timeout: float) -> Any:
    """GET ``path``; return the answer, or exit with :func:`call`'s code after one line on stderr.

    Raises:
        typer.Exit: 1 unreachable (the line names the URL) or 503/504; 2 refused (the line names the
            status, the error code and the field) or no token.
    """
    code, view = call("GET", url, token, path, timeout=timeout, out=Console(stderr=True, width=200))
    if code != 0:
        raise typer.Exit(code)
    return view


def show(
    url: str, token: str, path: str, *, as_json: bool, printer: Callable[[Any, Console], None], timeout: float
) -> None:
    """GET ``path`` and print it (raw JSON with ``as_json``, else through ``printer``); exit 0.

    Raises:
        typer.Exit: Always: 0 shown, else :func:`fetch`'s code.
    """
    view = fetch(url, token, path, timeout=timeout)
    if as_json:
        typer.echo(json.dumps(view, indent=2))
    else:
        printer(view, plain_console())
    raise typer.Exit(0)
