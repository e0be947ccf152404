"""``crewlet secrets``: the keyring and the secret store of a running node (CO-28, CO-40, FL-151).

- ``keygen [--id K]``: print fresh key material and the node file's ``secrets:`` block; writes
  nothing. Give every node the same key (``CREWLET_SECRETS_KEY``).
- ``set NAME``: the value comes from stdin when it is piped (one trailing newline stripped),
  else from a hidden prompt asked twice; never from the command line (it would sit in the shell
  history and in ``ps``).
- ``list``, ``get NAME [--reveal]``, ``unset NAME``, ``rekey``: through the node's API.

Every command but ``keygen`` talks to a node: ``--url`` (``CREWLET_URL``, default
``http://127.0.0.1:8080``) with ``--token`` (``CREWLET_API_TOKEN``; grants ``secrets:read`` /
``secrets:write``). Exit 0 on success; 1 when the node cannot be reached or failed (5xx), or
``rekey`` left values it could not open; 2 for a usage error: an invalid name (refused before any
request), no token, or a refusal (the node's error is printed).

Not offered: writing a stopped node's local table (FL-151's bootstrap path); start the node.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, NoReturn

import httpx
import typer
from rich.console import Console
from rich.table import Table

from shared.secrets import InvalidSecretName, generate_key_material, validate_name

__all__ = ["app", "read_value"]

app = typer.Typer(no_args_is_help=True, help="The keyring and the secret store (CO-40).")

Url = Annotated[str, typer.Option("--url", envvar="CREWLET_URL", help="A node's base URL")]
Token = Annotated[str, typer.Option("--token", envvar="CREWLET_API_TOKEN", help="API token")]
DEFAULT_URL = "http://127.0.0.1:8080"


@app.callback()
def _group() -> None:
    """The keyring and the secret store (CO-40)."""


def _fail(line: str, code: int = 2) -> NoReturn:
    typer.echo(line, err=True)
    raise typer.Exit(code)


def _check_name(name: str) -> str:
    try:
        return validate_name(name)
    except InvalidSecretName as e:
        _fail(str(e))


def read_value(name: str) -> str:
    """Return the value for ``secrets set``: stdin when piped (one trailing newline stripped),
    else a hidden prompt with confirmation."""
    if not sys.stdin.isatty():
        try:
            value = sys.stdin.buffer.read().decode("utf-8")
        except UnicodeDecodeError:
            _fail(f"{name}: the value on stdin is not UTF-8 text")
        if value.endswith("\r\n"):
            value = value[:-2]
        elif value.endswith("\n"):
            value = value[:-1]
    else:
        value = str(typer.prompt(f"value of {name}", hide_input=True, confirmation_prompt=True))
    if not value:
        _fail(f"{name}: an empty value; to remove a secret use `crewlet secrets unset {name}`")
    return value


def _call(method: str, url: str, token: str, path: str, **kwargs: Any) -> httpx.Response:
    """One request to the node; exits on no token (2), unreachable or 5xx (1), refusal (2)."""
    if not token:
        _fail("no API token: set CREWLET_API_TOKEN or pass --token")
    try:
        with httpx.Client(base_url=url.rstrip("/"), timeout=30.0) as client:
            r = client.request(method, path, headers={"Authorization": f"Bearer {token}"}, **kwargs)
    except httpx.HTTPError as e:
        _fail(f"cannot reach {url}: {e}", 1)
    if r.status_code < 400:
        return r
    try:
        body = r.json()
        error, detail = body.get("error", ""), body.get("detail", "")
        if not isinstance(detail, str):
            detail = json.dumps(detail)
    except ValueError:
        error, detail = "", r.text
    if r.status_code in (401, 403):
        _fail(
            f"{url} refused the token ({r.status_code} {error}): {detail}; set CREWLET_API_TOKEN or --token"
        )
    _fail(f"{url} answered {r.status_code} {error}: {detail}", 1 if r.status_code >= 500 else 2)


@app.command("keygen")
def keygen(
    key_id: Annotated[str, typer.Option("--id", help="The key id to write in the snippet")] = "k1",
) -> None:
    """Print new key material and the node file's secrets block to paste; writes nothing."""
    material = generate_key_material()
    typer.echo(material)
    typer.echo(
        "\n# Keep the line above secret and give every node of the fleet the same value, e.g. as\n"
        "# CREWLET_SECRETS_KEY in each node's environment. Node file (Tier A):\n"
        "secrets:\n"
        f"  active_key_id: {key_id}\n"
        "  keys:\n"
        f"    - id: {key_id}\n"
        '      material: "${CREWLET_SECRETS_KEY}"\n'
        "# Rotating: add the new key beside the old one, make it active on every node, run\n"
        "# `crewlet secrets rekey`, then remove the old key."
    )


@app.command("set")
def set_cmd(name: str, url: Url = DEFAULT_URL, token: Token = "") -> None:
    """Set secret NAME; the value comes from stdin, or a hidden prompt (never the command line)."""
    name = _check_name(name)
    if not token:
        _fail("no API token: set CREWLET_API_TOKEN or pass --token")
    value = read_value(name)
    r = _call("PUT", url, token, f"/secrets/{name}", json={"value": value})
    typer.echo(f"set {name} (key {r.json().get('key_id', '?')})")


@app.command("list")
def list_cmd(
    url: Url = DEFAULT_URL,
    token: Token = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print the raw answer")] = False,
) -> None:
    """List secret names with their key id and last update (never a value)."""
    rows: list[dict[str, Any]] = _call("GET", url, token, "/secrets").json().get("secrets", [])
    if as_json:
        typer.echo(json.dumps({"secrets": rows}, indent=2))
        return
    if not rows:
        typer.echo("no secrets")
        return
    table = Table(title="secrets")
    for col in ("name", "key id", "updated at", "updated by"):
        table.add_column(col)
    for s in rows:
        table.add_row(s["name"], s.get("key_id", ""), s.get("updated_at", ""), s.get("updated_by", ""))
    Console(width=120).print(table)


@app.command("get")
def get_cmd(
    name: str,
    reveal: Annotated[
        bool, typer.Option("--reveal", help="Print the value itself (alone on stdout)")
    ] = False,
    url: Url = DEFAULT_URL,
    token: Token = "",
) -> None:
    """Show secret NAME's metadata; with --reveal print its value alone."""
    name = _check_name(name)
    params = {"reveal": "true"} if reveal else None
    info = _call("GET", url, token, f"/secrets/{name}", params=params).json()
    if reveal:
        typer.echo(info.get("value", ""))
        return
    typer.echo(
        f"{info['name']}: key {info.get('key_id', '')}, updated {info.get('updated_at', '')}"
        + (f" by {info['updated_by']}" if info.get("updated_by") else "")
    )


@app.command("unset")
def unset_cmd(name: str, url: Url = DEFAULT_URL, token: Token = "") -> None:
    """Delete secret NAME."""
    name = _check_name(name)
    _call("DELETE", url, token, f"/secrets/{name}")
    typer.echo(f"unset {name}")


@app.command("rekey")
def rekey_cmd(url: Url = DEFAULT_URL, token: Token = "") -> None:
    """Re-seal every value under the node's active key (then old keys can be removed)."""
    res = _call("POST", url, token, "/secrets/rekey").json()
    typer.echo(
        f"re-sealed {len(res.get('resealed', []))} value(s) under key {res.get('active_key_id', '?')}; "
        f"{len(res.get('current', []))} already current"
    )
    bad = res.get("unopenable") or []
    if bad:
        _fail(
            f"{len(bad)} value(s) did not open and were left as they were: {', '.join(bad)}; "
            "add their key to secrets.keys (or set them again), then rekey; keep the old key until then",
            1,
        )
