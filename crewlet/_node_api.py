"""One request to a running node's API, as the operator commands send it (FL-24 §CLI).

Shared by every operator command that talks to a node (``send``, ``turns``/``turn``, ``work``,
``objects``, ``fleet status``, ``fleet broker``, ``budgets``, ``schedules``, ``knowledge import``):
the ``--url`` / ``--token`` / ``--json`` options (``CREWLET_URL``, ``CREWLET_API_TOKEN``),
:func:`call`, which turns every outcome into an exit code and a printed line — never a
traceback — and :func:`show_view`, the whole of a read-only listing command.

What :func:`call` guards, so that every command gets it:

- **bad local input** (exit 2, nothing sent): a token that is not printable ASCII without
  whitespace (a trailing newline read from a file, a non-ASCII character), and any path part,
  query value or body string that is not valid text (a lone surrogate, or a byte that is not UTF-8
  as the shell passed it); the line names the argument (``text``, ``handle``, ``--seat``, ...).
- **a URL that is not a crewlet node** (exit 1): an answer that is not JSON is one line
  ``<url><path> answered <status> <content-type>, not a crewlet node's JSON``; a JSON answer
  without the keys the command reads is ``the answer from <url><path> is not a crewlet node's:
  missing '<key>'``.
- **terminal escapes in the data** (issue-tracker titles, seat replies, webhook text are
  untrusted): :func:`clean` and :func:`clean_view` replace control characters (ESC, OSC, C0 but
  newline and tab, DEL, C1) with a visible ``\\xNN``, bidirectional controls with ``\\u202e`` and
  lone surrogates with U+FFFD; every printer
  is handed a cleaned view. ``--json`` output stays JSON (which escapes them itself).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any
from urllib.parse import quote, urlencode

import httpx
import typer
from rich.console import Console
from rich.errors import NotRenderableError

__all__ = [
    "JsonFlag",
    "Need",
    "Token",
    "Url",
    "bad_text",
    "bad_token",
    "call",
    "clean",
    "clean_view",
    "print_view",
    "refusal_text",
    "show_view",
]

Url = Annotated[str, typer.Option("--url", "-url", envvar="CREWLET_URL", help="A node's base URL")]
"""The ``--url`` option: a node's base URL."""
Token = Annotated[str, typer.Option("--token", "-token", envvar="CREWLET_API_TOKEN", help="API token")]
"""The ``--token`` option: an API token holding the route's grant."""
JsonFlag = Annotated[bool, typer.Option("--json", "-json", help="Print the raw answer")]
"""The ``--json`` option: print the route's answer as JSON instead of a table."""

Need = Mapping[str, type | tuple[type, ...]]
"""The top-level keys a command reads from an answer, each with the type(s) it must have."""

LINE = 200
"""Most characters of a line that quotes what a foreign server answered."""

_BIDI = "\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_BIDI}]")
_CONTROL_LINE = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_BIDI}]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_TYPE_NAMES = {list: "a list", dict: "an object", str: "a string", int: "a number", float: "a number"}


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(text: str, *, one_line: bool = False) -> str:
    """``text`` safe for a terminal: every control character (ESC, BEL, CR, DEL, C1, ...) but newline
    and tab as a visible ``\\xNN``, a bidirectional control (U+202A..U+202E, U+2066..U+2069, which
    reorder what follows: issue 38) as ``\\u202e``, a lone surrogate as U+FFFD; with ``one_line``
    newline and tab too."""
    text = (_CONTROL_LINE if one_line else _CONTROL).sub(_escape, text)
    return _SURROGATE.sub("\ufffd", text)


def clean_view(value: Any) -> Any:
    """A copy of a JSON answer with every string (keys too) passed through :func:`clean`."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {clean(str(k)): clean_view(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_view(v) for v in value]
    return value


def bad_token(token: str) -> str | None:
    """Why ``token`` cannot be sent (never echoing it), or None: empty, or not printable ASCII without
    whitespace — a token read from a file with its newline, or with a non-ASCII character."""
    if not token:
        return "no API token: set CREWLET_API_TOKEN or pass --token"
    for i, ch in enumerate(token, 1):
        if "!" <= ch <= "~":
            continue
        if ch.isspace():
            kind = "whitespace (a trailing newline from a file?)"
        elif ord(ch) < 128:
            kind = "a control character"
        else:
            kind = "a non-ASCII character"
        return (
            f"CREWLET_API_TOKEN or --token: character {i} of {len(token)} is {kind}; "
            "a token is printable ASCII without spaces"
        )
    return None


def bad_text(name: str, value: str) -> str | None:
    """Why ``value`` (the argument ``name``) cannot be sent as UTF-8, or None."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        code = ord(value[e.start])
        what = (
            f"the byte 0x{code - 0xDC00:02x} is not UTF-8"
            if 0xDC80 <= code <= 0xDCFF  # how Python keeps an undecodable byte of argv or the environment
            else f"a lone surrogate U+{code:04X}"
        )
        return f"{name}: not valid text ({what}, at character {e.start + 1}); pass UTF-8 text"
    return None


def _strings(value: Any, name: str, names: Mapping[str, str]) -> str | None:
    """The first :func:`bad_text` among the strings of a JSON body, named by their key."""
    if isinstance(value, str):
        return bad_text(name, value)
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        why = _strings(v, names.get(str(k), str(k)) if isinstance(k, str) else name, names)
        if why:
            return why
    return None


def _target(
    path: str,
    parts: Mapping[str, str],
    query: Mapping[str, Any],
    body: Any,
    names: Mapping[str, str],
) -> tuple[str, str | None]:
    """``(path with its parts quoted and its query, None)``, or ``("", why)`` for bad local input."""
    for k, v in parts.items():
        why = bad_text(names.get(k, k), v)
        if why:
            return "", why
    for k, v in query.items():
        why = bad_text(names.get(k, f"--{k}"), str(v)) if v is not None else None
        if why:
            return "", why
    why = _strings(body, "body", names) if body is not None else None
    if why:
        return "", why
    full = path.format(**{k: quote(v, safe="") for k, v in parts.items()}) if parts else path
    why = bad_text("the route", full)
    if why:
        return "", why
    q = urlencode({k: v for k, v in query.items() if v is not None})
    return (f"{full}?{q}" if q else full), None


def _missing(answer: Any, need: Need) -> str | None:
    """What of ``need`` the answer lacks (``missing 'turns'`` / ``'turns' is not a list``), or None."""
    if not isinstance(answer, dict):
        return f"missing '{next(iter(need))}' (it is not a JSON object)"
    for key, kind in need.items():
        if key not in answer:
            return f"missing '{key}'"
        if not isinstance(answer[key], kind):
            want = _TYPE_NAMES.get(kind, "another type") if isinstance(kind, type) else "another type"
            return f"'{key}' is not {want}"
    return None


def call(
    method: str,
    url: str,
    token: str,
    path: str,
    *,
    timeout: float,
    out: Console,
    body: dict[str, Any] | None = None,
    parts: Mapping[str, str] | None = None,
    query: Mapping[str, Any] | None = None,
    names: Mapping[str, str] | None = None,
    need: Need | None = None,
    client: httpx.Client | None = None,
) -> tuple[int, Any]:
    """Send one request; return ``(exit code, answer)``.

    Args:
        method: ``GET`` or ``POST``.
        url: The node's base URL.
        token: The API token; "" prints what to set and answers exit code 2.
        path: The route; ``{name}`` placeholders are filled from ``parts``.
        timeout: Seconds to wait for the answer.
        out: Where the refusals are printed.
        body: A JSON body to send, or None for none.
        parts: Raw (unquoted) path parts, checked and quoted here.
        query: Query parameters (None values left out), checked and encoded here.
        names: How the command's user calls a part, query key or body key (``{"seat": "--seat"}``),
            for the refusal of bad input; a query key defaults to ``--<key>``, the rest to itself.
        need: The keys (and their types) the command reads from a 2xx answer.
        client: An open client to reuse (``knowledge import`` posts many pages), else one is opened.

    Returns:
        ``(0, body)`` for a 2xx; ``(1, None)`` when the node cannot be reached, answers no JSON or
        JSON without ``need``; ``(1, body)`` for a 503/504 and ``(2, body)`` for any other refusal,
        printed as ``refused (<status> <code>): <detail>``; ``(2, None)`` for a bad token, URL or
        argument (nothing is sent).
    """

    def say(line: str) -> None:
        out.print(line, markup=False, highlight=False, soft_wrap=True)

    why = bad_token(token) or bad_text("--url (CREWLET_URL)", url)
    target, bad = _target(path, parts or {}, query or {}, body, names or {})
    if why or bad:
        say(str(why or bad))
        return 2, None
    base = url.rstrip("/")
    headers = {"Authorization": f"Bearer {token}"}
    try:
        if client is not None:
            r = client.request(method, base + target, json=body, headers=headers, timeout=timeout)
        else:
            with httpx.Client(timeout=timeout) as own:
                r = own.request(method, base + target, json=body, headers=headers)
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as e:
        say(clean(f"--url (CREWLET_URL): {base!r} is not an http(s) URL: {e}", one_line=True))
        return 2, None
    except httpx.HTTPError as e:
        say(clean(f"cannot reach the node at {base}: {type(e).__name__}: {e}", one_line=True))
        return 1, None
    where = clean(base + target, one_line=True)
    try:
        answer = r.json()
    except ValueError:
        kind = r.headers.get("content-type") or "no content type"
        say(
            clean(f"{where} answered {r.status_code} {kind}, not a crewlet node's JSON", one_line=True)[:LINE]
        )
        return 1, None
    if 200 <= r.status_code < 300:
        lack = _missing(answer, need) if need else None
        if lack:
            say(clean(f"the answer from {where} is not a crewlet node's: {lack}", one_line=True)[:LINE])
            return 1, None
        return 0, answer
    code = answer.get("error", "") if isinstance(answer, dict) else ""
    say(clean(f"refused ({r.status_code} {code}): {refusal_text(answer)}"))
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


def print_view(
    printer: Callable[[Any, Console], None], view: Any, out: Console, err: Console, where: str
) -> int:
    """Print a cleaned copy of ``view`` through ``printer``; 0, or 1 after one line on ``err`` when the
    answer (from ``where``) has a shape the printer cannot read — never a traceback."""
    try:
        printer(clean_view(view), out)
    except (AttributeError, KeyError, TypeError, ValueError, IndexError, NotRenderableError) as e:
        err.print(
            clean(f"the answer from {where} is not a crewlet node's: {type(e).__name__}: {e}", one_line=True)[
                :LINE
            ],
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return 1
    return 0


def show_view(
    url: str,
    token: str,
    path: str,
    *,
    as_json: bool,
    printer: Callable[[Any, Console], None],
    timeout: float,
    width: int = 160,
    need: Need | None = None,
    parts: Mapping[str, str] | None = None,
    query: Mapping[str, Any] | None = None,
    names: Mapping[str, str] | None = None,
    refusals_to_stderr: bool = False,
) -> None:
    """GET ``path`` and print it: the raw answer with ``as_json``, else through ``printer(view,
    console)`` (a cleaned view, markup off); then exit with :func:`call`'s code (0 shown, 1
    unreachable, 5xx or not a crewlet answer, 2 refused or bad input).

    Args:
        parts, query, names: As :func:`call` (checked and encoded there).
        refusals_to_stderr: Print refusal lines on stderr (the newer commands, so ``--json`` on
            stdout stays parseable) instead of with the view on stdout.

    Raises:
        typer.Exit: Always, with that code.
    """
    out = Console(width=width, markup=False, highlight=False)
    err = Console(stderr=True, width=200, markup=False, highlight=False) if refusals_to_stderr else out
    code, view = call(
        "GET", url, token, path, timeout=timeout, out=err, need=need, parts=parts, query=query, names=names
    )
    if code == 0:
        if as_json:
            typer.echo(json.dumps(view, indent=2))
        else:
            where = url.rstrip("/") + (
                path.format(**{k: quote(str(v), safe="") for k, v in parts.items()}) if parts else path
            )
            code = print_view(printer, view, out, err, where)
    raise typer.Exit(code)
