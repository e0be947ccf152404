"""``crewlet files list|put|get``: a project's files through a running node (ES-70, CO-26).

- ``crewlet files list PROJECT`` prints ``GET /projects/{key}/files`` (grant ``state:read``): path,
  version, size, content type.
- ``crewlet files put PROJECT PATH LOCAL [--content-type T]`` uploads ``LOCAL``'s bytes as ``PATH``
  (``PUT /projects/{key}/files/{path}``, grant ``work:write``); prints the stored version and digest.
- ``crewlet files get PROJECT PATH [-o FILE] [--version N]`` downloads a file to ``FILE`` (default:
  the path's last part in the current directory; ``-`` for stdout).

The URL and token default to ``CREWLET_URL`` and ``CREWLET_API_TOKEN``; a bad token or a path that
is not valid text is refused before anything is sent. Exit codes: 0 done; 1 unreachable or 5xx; 2
refused (the node's code and detail printed), a local file that cannot be read or written, no token.
"""

from __future__ import annotations

import mimetypes
import sys
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import httpx
import typer
from rich.table import Table

from ._node_api import JsonFlag, Token, Url, bad_text, bad_token, clean, refusal_text
from ._operator_view import err_console, plain_console, show

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="A project's files: list, upload, download (ES-70).")

TIMEOUT = 120.0
"""Seconds a transfer may take (files are up to the node's limit, 100 MiB)."""


def _print_files(view: dict[str, Any], out: Any) -> None:
    table = Table(title=f"files ({len(view.get('files') or [])})")
    for col in ("path", "version", "size", "content type", "updated (UTC)"):
        table.add_column(col, overflow="fold")
    for f in view.get("files") or []:
        table.add_row(
            str(f.get("path", "")),
            str(f.get("version", "")),
            str(f.get("size", "")),
            str(f.get("content_type", "")),
            str(f.get("updated_at", "")),
        )
    out.print(table)


@app.command("list")
def list_cmd(
    project: Annotated[str, typer.Argument(help="The project's key, e.g. ENG")],
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
    as_json: JsonFlag = False,
) -> None:
    """List a project's files (path, version, size, content type)."""
    show(
        url,
        token,
        "/projects/{key}/files",
        parts={"key": project},
        names={"key": "project"},
        need={"files": list},
        as_json=as_json,
        printer=_print_files,
        timeout=30.0,
    )


def _target(url: str, token: str, project: str, path: str) -> str:
    """The file's URL, or exit 2 naming the bad argument."""
    why = bad_token(token) or bad_text("--url (CREWLET_URL)", url) or bad_text("project", project)
    why = why or bad_text("path", path)
    if why:
        err_console().print(why)
        raise typer.Exit(2)
    return f"{url.rstrip('/')}/projects/{quote(project, safe='')}/files/{quote(path, safe='/')}"


def _send(method: str, target: str, token: str, **kw: Any) -> httpx.Response:
    """One request; exit 1 (unreachable) or 2 (bad URL) with one line."""
    try:
        return httpx.request(
            method,
            target,
            headers={"Authorization": f"Bearer {token}", **kw.pop("headers", {})},
            timeout=TIMEOUT,
            **kw,
        )
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as e:
        err_console().print(clean(f"--url (CREWLET_URL): not an http(s) URL: {e}", one_line=True))
        raise typer.Exit(2) from None
    except httpx.HTTPError as e:
        err_console().print(clean(f"cannot reach the node: {type(e).__name__}: {e}", one_line=True))
        raise typer.Exit(1) from None


def _refused(r: httpx.Response) -> None:
    try:
        answer: Any = r.json()
    except ValueError:
        answer = r.text[:200]
    code = answer.get("error", "") if isinstance(answer, dict) else ""
    err_console().print(clean(f"refused ({r.status_code} {code}): {refusal_text(answer)}"))
    raise typer.Exit(1 if r.status_code in (503, 504) else 2)


@app.command("put")
def put_cmd(
    project: Annotated[str, typer.Argument(help="The project's key, e.g. ENG")],
    path: Annotated[str, typer.Argument(help="Where the file goes in the project, e.g. docs/plan.md")],
    local: Annotated[Path, typer.Argument(help="The local file to upload")],
    content_type: Annotated[str | None, typer.Option("--content-type", help="Default: from the name")] = None,
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
) -> None:
    """Upload a local file as a project file (a new version when the path exists)."""
    target = _target(url, token, project, path)
    try:
        data = local.read_bytes()
    except OSError as e:
        err_console().print(clean(f"cannot read {local}: {e.strerror or e}", one_line=True))
        raise typer.Exit(2) from None
    kind = content_type or mimetypes.guess_type(path)[0] or "application/octet-stream"
    r = _send("PUT", target, token, content=data, headers={"Content-Type": kind})
    if r.status_code >= 300:
        _refused(r)
    row = r.json().get("file") or r.json()
    plain_console().print(
        clean(
            f"{project}/{path} version {row.get('version')}: {row.get('size')} bytes, sha256 {row.get('sha256')}"
        )
    )


@app.command("get")
def get_cmd(
    project: Annotated[str, typer.Argument(help="The project's key, e.g. ENG")],
    path: Annotated[str, typer.Argument(help="The file's path in the project")],
    output: Annotated[str | None, typer.Option("-o", "--output", help="Where to write ('-': stdout)")] = None,
    version: Annotated[int | None, typer.Option("--version", min=1, help="An older version")] = None,
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
) -> None:
    """Download a project file (the newest version unless ``--version``)."""
    target = _target(url, token, project, path)
    r = _send("GET", target, token, params={"version": version} if version else None)
    if r.status_code >= 300:
        _refused(r)
    if output == "-":
        sys.stdout.buffer.write(r.content)
        return
    dest = Path(output or Path(path).name or "download")
    try:
        dest.write_bytes(r.content)
    except OSError as e:
        err_console().print(clean(f"cannot write {dest}: {e.strerror or e}", one_line=True))
        raise typer.Exit(2) from None
    plain_console().print(
        clean(f"wrote {dest}: {len(r.content)} bytes, version {r.headers.get('X-Crewlet-File-Version')}")
    )
