"""What ``--help`` shows: the commands' texts without the spec's requirement ids (issue 38).

A command's docstring names the requirements it implements (``(CO-24)``, ``FL-147``, ...) for the
reader of the code; a newcomer reading ``crewlet work --help`` needs none of them. :func:`plain_help`
walks a Typer app once, after every command is registered, and gives each command, group and
parameter its help text with those ids taken out (:func:`without_ids`); the docstrings stay as
they are.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, get_args

import typer

__all__ = ["SPEC_ID", "plain_help", "without_ids"]

SPEC_ID = re.compile(r"\b(?:FL|CO|ES|AG)-\d+")
"""A requirement id of the specs (fleet, company, estate, agent)."""

_ID = r"(?:FL|CO|ES|AG)-\d+(?:\s*(?:\.\.|–)\s*(?:FL|CO|ES|AG)-\d+)?(?:\s*§\s*\w+)?"
_ONLY_IDS = re.compile(rf"\s*\(\s*{_ID}(?:\s*(?:[,;]|and)\s*{_ID})*\s*\)")
"""A parenthesis holding nothing but ids: ``(CO-4, FL-109)``."""
_AN_ID = re.compile(rf"[,;]?[ \t]*{_ID}")
"""One id inside other words: ``(PUT /config; CO-4, CO-28)`` keeps ``(PUT /config)``."""


def without_ids(text: str) -> str:
    """``text`` with every spec requirement id and the punctuation around it taken out.

    Args:
        text: A help text, e.g. ``"List work items (CO-24)."``.

    Returns:
        The text without ids, e.g. ``"List work items."``; a parenthesis left empty is dropped.
    """
    out = _ONLY_IDS.sub("", text)
    out = _AN_ID.sub("", out)
    out = re.sub(r"\s*\(\s*\)", "", out)
    out = re.sub(r"\(\s*[,;]?\s*", "(", out)
    out = re.sub(r"\s+\)", ")", out)
    out = re.sub(r"(?<=\S)[ \t]+([.,;:])", r"\1", out)
    return re.sub(r"(?<=\S)[ \t]{2,}", " ", out).strip()


def _plain(value: Any) -> Any:
    return without_ids(value) if isinstance(value, str) else value


def _params(callback: Any) -> None:
    """Strip the help of each ``typer.Option``/``typer.Argument`` the callback's parameters carry.

    The annotations are strings (``from __future__ import annotations``), evaluated afresh on each
    read, so the evaluated signature is pinned on the callback (``__signature__``, which Typer reads).
    """
    try:
        sig = inspect.signature(callback, eval_str=True)
    except Exception:  # noqa: BLE001 - a hint that does not resolve: the texts stay as they are
        return
    for param in sig.parameters.values():
        for info in (*get_args(param.annotation)[1:], param.default):
            if isinstance(info, typer.models.ParameterInfo):
                info.help = _plain(info.help)
    callback.__signature__ = sig


def _docstring_help(help_value: Any, callback: Any) -> Any:
    if isinstance(help_value, str):
        return without_ids(help_value)
    doc = inspect.getdoc(callback) if callback is not None else None
    return without_ids(doc) if doc else help_value


def plain_help(app: typer.Typer) -> None:
    """Give every command, group and parameter of ``app`` (and its sub-apps) help without spec ids.

    Call it once, after every command is registered; it changes the help texts Typer will show,
    never a docstring.

    Args:
        app: The root Typer app.
    """
    app.info.help = _docstring_help(
        app.info.help, app.registered_callback and app.registered_callback.callback
    )
    if app.registered_callback is not None:
        cb = app.registered_callback
        cb.help = _docstring_help(cb.help, cb.callback)
        if cb.callback is not None:
            _params(cb.callback)
    for command in app.registered_commands:
        command.help = _docstring_help(command.help, command.callback)
        command.short_help = _plain(command.short_help)
        if command.callback is not None:
            _params(command.callback)
    for group in app.registered_groups:
        group.help = _plain(group.help)
        if group.typer_instance is not None:
            plain_help(group.typer_instance)
