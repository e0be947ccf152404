"""A read-only operator command's whole run, with refusals on stderr (issue 15: ``turns``, ``turn``,
``work``, ``objects``).

:func:`crewlet._node_api.show_view` with the refusal line on stderr so ``--json`` output on
stdout stays parseable, and the printer's console has markup off: seat output carries brackets
(``[offline]``) that are text, not style. The printer is handed a cleaned view (control characters
shown as ``\\xNN``, :func:`crewlet._node_api.clean_view`); bad input, a bad token and an answer that
is not a crewlet node's are refused by :func:`crewlet._node_api.call`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import typer
from rich.console import Console

from ._node_api import Need, call, show_view

__all__ = ["err_console", "fetch", "plain_console", "show"]


def plain_console(width: int = 200) -> Console:
    """A stdout console with markup and highlighting off, ``width`` columns when not a terminal."""
    return Console(width=width, markup=False, highlight=False)


def err_console() -> Console:
    """The stderr console the refusal lines go to."""
    return Console(stderr=True, width=200, markup=False, highlight=False)


def fetch(
    url: str,
    token: str,
    path: str,
    *,
    timeout: float,
    need: Need | None = None,
    parts: Mapping[str, str] | None = None,
    query: Mapping[str, Any] | None = None,
    names: Mapping[str, str] | None = None,
) -> Any:
    """GET ``path`` (its ``parts`` and ``query`` checked and encoded by :func:`call`); return the
    answer, or exit with :func:`call`'s code after one line on stderr.

    Raises:
        typer.Exit: 1 unreachable (the line names the URL), 503/504, or not a crewlet answer
            (``need`` missing); 2 refused (the line names the status, the error code and the field),
            no or a bad token, or an argument that is not valid text.
    """
    code, view = call(
        "GET",
        url,
        token,
        path,
        timeout=timeout,
        out=err_console(),
        need=need,
        parts=parts,
        query=query,
        names=names,
    )
    if code != 0:
        raise typer.Exit(code)
    return view


def show(
    url: str,
    token: str,
    path: str,
    *,
    as_json: bool,
    printer: Callable[[Any, Console], None],
    timeout: float,
    need: Need | None = None,
    parts: Mapping[str, str] | None = None,
    query: Mapping[str, Any] | None = None,
    names: Mapping[str, str] | None = None,
) -> None:
    """GET ``path`` and print it (raw JSON with ``as_json``, else a cleaned view through ``printer``),
    refusals on stderr: :func:`crewlet._node_api.show_view` at 200 columns.

    Raises:
        typer.Exit: Always: 0 shown, else :func:`call`'s code (1 when the printer cannot read it).
    """
    show_view(
        url,
        token,
        path,
        as_json=as_json,
        printer=printer,
        timeout=timeout,
        width=200,
        need=need,
        parts=parts,
        query=query,
        names=names,
        refusals_to_stderr=True,
    )
