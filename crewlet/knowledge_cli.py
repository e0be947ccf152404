"""``crewlet knowledge import DIR --space KEY`` and ``crewlet knowledge search QUERY`` (CO-25).

``search QUERY [--limit N]`` prints ``GET /knowledge/search`` (grant ``state:read``): each hit's
title, space, page id and snippet, or "no page matched" / "could not be searched" (no data node
answered), and the answer's sentence when it has one.

``import``: publish a folder of Markdown pages.

Every ``*.md`` under ``DIR`` (recursively, in path order) becomes one page posted through a running
node's API (``POST /knowledge/pages``, the ``write_page`` semantics: matched by space + title, so a
re-import of unchanged pages changes nothing and keeps every version).

- **space**: ``--space`` when given; else the file's front matter ``space``; else its parent
  directory's name.
- **title**: front matter ``title``; else the first ``# `` heading; else the file name without
  ``.md``. When two files of one import would share a space and title, each of them is titled
  ``<title> (<path without .md>)`` [our choice: the upstream knowledge folders hold several pages
  all titled "Onboarding", and a title is unique per space].
- **body**: the Markdown after the front matter.

Every file is checked before anything is posted: a file that is not UTF-8 (or whose name is not),
has malformed front matter, or a body over 1 MiB is reported as ``FILE: message`` and nothing is
written (exit 2); an unknown space is refused the same way. The requests go through
:func:`crewlet._node_api.call`: a bad token is refused before anything is sent, and a URL that is not
a crewlet node is one line (exit 1). Exit 0 when every page landed, 1 when a post failed.

On a terminal a progress bar (pages posted of pages found, on stderr) runs while the pages are
posted (issue 15); piped or redirected output gets the plain lines only.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn

import httpx
import typer
import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ._node_api import JsonFlag, Need, Token, Url, bad_text, call, clean
from ._operator_view import show

__all__ = ["PageFile", "app", "progress_bar", "read_pages"]

app = typer.Typer(no_args_is_help=True, help="The native knowledge base (CO-25).")

PAGE_LIMIT = 1024 * 1024
"""Largest page body in bytes (the estate's limit)."""
_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)
_HEADING = re.compile(r"^#[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


@dataclass
class PageFile:
    """One Markdown file, ready to post.

    Attributes:
        path: The file.
        rel: Its path under the import directory.
        space: The space it goes to.
        title: The page title.
        body: The Markdown body (front matter removed).
    """

    path: Path
    rel: str
    space: str
    title: str
    body: str


def read_pages(root: Path, *, space: str | None = None) -> tuple[list[PageFile], list[str]]:
    """Read every Markdown file under ``root``.

    Args:
        root: The directory.
        space: The space for every page, or None to take it from front matter / the parent directory.

    Returns:
        ``(pages, errors)``; each error is ``"FILE: message"``. Pages are only usable when errors is empty.
    """
    pages: list[PageFile] = []
    errors: list[str] = []
    # symlinks are not followed: a link out of the folder would publish whatever it points at
    files = sorted(p for p in root.rglob("*.md") if p.is_file() and not p.is_symlink())
    if not files:
        errors.append(f"{root}: no Markdown (*.md) files found")
    for f in files:
        rel = f.relative_to(root).as_posix()
        if bad_text("path", str(f)):  # a name Python kept as undecodable bytes
            errors.append(f"{clean(str(f))}: the file name is not UTF-8; rename it")
            continue
        raw = f.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            errors.append(f"{f}: not UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start}); save it as UTF-8")
            continue
        text = text.removeprefix("\ufeff")
        front: dict[str, Any] = {}
        body = text
        m = _FRONT.match(text)
        if m:
            try:
                loaded = yaml.safe_load(m.group(1))
            except yaml.YAMLError as e:
                errors.append(f"{f}: front matter is not YAML ({str(e).splitlines()[0]})")
                continue
            front = loaded if isinstance(loaded, dict) else {}
            body = text[m.end() :]
        size = len(body.encode())
        if size > PAGE_LIMIT:
            errors.append(f"{f}: body is {size} bytes; the limit is {PAGE_LIMIT} bytes")
            continue
        heading = _HEADING.search(body)
        title = str(front.get("title") or (heading.group(1) if heading else "") or f.stem).strip()
        key = space or str(front.get("space") or f.parent.name)
        why = bad_text("front matter title", title) or bad_text("front matter space", key)
        if why:
            errors.append(f"{f}: {why}")
            continue
        pages.append(PageFile(f, rel, key, " ".join(title.split()), body))
    seen: dict[tuple[str, str], int] = {}
    for p in pages:
        k = (p.space, p.title.casefold())
        seen[k] = seen.get(k, 0) + 1
    for p in pages:
        if seen[(p.space, p.title.casefold())] > 1:
            p.title = f"{p.title} ({p.rel.removesuffix('.md')})"
    return pages, errors


def progress_bar(what: str, *, disable: bool = False) -> Progress:
    """A progress bar on stderr for ``what`` (count of total, elapsed); off when stderr is no terminal.

    Args:
        what: The label.
        disable: Force it off (e.g. ``--json`` output).
    """
    err = Console(stderr=True)
    return Progress(
        TextColumn(what),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=disable or not err.is_terminal,
        transient=True,
    )


@app.callback()
def _group() -> None:
    """The native knowledge base (CO-25)."""


def _fail(lines: list[str], code: int = 2) -> NoReturn:
    for line in lines:
        typer.echo(line, err=True)
    raise typer.Exit(code)


@app.command("import")
def import_cmd(
    directory: Annotated[
        Path, typer.Argument(help="A folder of Markdown files", exists=True, file_okay=False)
    ],
    space: Annotated[
        str | None, typer.Option("--space", help="The space every page goes to (e.g. ENG)")
    ] = None,
    url: Annotated[
        str, typer.Option("--url", envvar="CREWLET_URL", help="A node's base URL")
    ] = "http://127.0.0.1:8080",
    token: Annotated[str, typer.Option("--token", envvar="CREWLET_API_TOKEN", help="API token")] = "",
) -> None:
    """Publish every Markdown file under DIRECTORY as a knowledge page (idempotent by space + title)."""
    err = Console(stderr=True, width=200, markup=False, highlight=False)
    why = bad_text("--space", space) if space else None
    if why:
        _fail([why])
    pages, errors = read_pages(directory, space=space)
    if errors:
        _fail(errors + ["nothing was imported"])
    with httpx.Client(timeout=60.0) as client:

        def get(path: str, need: Need, **query: Any) -> Any:
            code, answer = call(
                "GET", url, token, path, query=query, need=need, timeout=60.0, out=err, client=client
            )
            if code != 0:
                raise typer.Exit(code)
            return answer

        listed_spaces = get("/knowledge/spaces", {"spaces": list})["spaces"]
        known = {str(s["key"]) for s in listed_spaces if isinstance(s, dict) and "key" in s}
        unknown = sorted({p.space for p in pages} - known)
        if unknown:
            _fail(
                [
                    clean(
                        f"space {s!r} does not exist (spaces: {', '.join(sorted(known)) or 'none'}); "
                        f"give --space KEY"
                    )
                    for s in unknown
                ]
                + ["nothing was imported"]
            )
        before: dict[tuple[str, Any], Any] = {}
        for s in sorted({p.space for p in pages}):
            listed = get("/knowledge/pages", {"pages": list}, space=s, limit=500)["pages"]
            before.update({(s, pg.get("title")): pg.get("version") for pg in listed if isinstance(pg, dict)})
        failed, counts = _publish(client, url, token, pages, before, err)
    typer.echo(
        f"{len(pages) - failed} page(s): {counts['created']} created, {counts['updated']} updated, "
        f"{counts['unchanged']} unchanged" + (f"; {failed} failed" if failed else "")
    )
    raise typer.Exit(1 if failed else 0)


def _publish(
    client: httpx.Client,
    url: str,
    token: str,
    pages: list[PageFile],
    before: dict[tuple[str, Any], Any],
    err: Console,
) -> tuple[int, dict[str, int]]:
    """POST each page, printing one line per page (created, updated or unchanged against ``before``,
    the versions listed before the import) under a progress bar; ``(failed, counts)``.

    An unreachable node (or one that is not a crewlet node) counts every page left as failed.
    """
    failed = 0
    counts = {"created": 0, "updated": 0, "unchanged": 0}
    with progress_bar("importing pages") as bar:
        task = bar.add_task("importing pages", total=len(pages))
        for i, p in enumerate(pages):
            code, answer = call(
                "POST",
                url,
                token,
                "/knowledge/pages",
                body={"space": p.space, "title": p.title, "body": p.body},
                need={"page": dict},
                timeout=60.0,
                out=err,
                client=client,
            )
            bar.advance(task)
            if code != 0:
                failed += 1
                typer.echo(clean(f"{p.path}: not imported"), err=True)
                if answer is None:  # unreachable, or not a crewlet node: the rest would fail alike
                    failed += len(pages) - i - 1
                    break
                continue
            page = answer["page"]
            old = before.get((p.space, p.title))
            state = "created" if old is None else ("unchanged" if page.get("version") == old else "updated")
            counts[state] += 1
            digest = hashlib.sha256(p.body.encode()).hexdigest()[:8]
            typer.echo(clean(f"{state:9} {p.space}/{p.title} v{page.get('version')} ({p.rel}, {digest})"))
    return failed, counts


if __name__ == "__main__":  # ``python -m crewlet.knowledge_cli import DIR`` until the root CLI mounts it
    app()


def _print_hits(view: dict[str, Any], out: Console) -> None:
    """Print a ``GET /knowledge/search`` answer: each hit's title, space, page id and snippet."""
    hits = view.get("hits") or []
    if view.get("mode_used"):  # AG-13: how it searched
        cov = view.get("vector_coverage") or {}
        line = f"mode: {view['mode_used']}  semantic: {view.get('semantic')}"
        if cov:
            line += f"  vectors: {cov.get('current')}/{cov.get('total')}"
        out.print(line, markup=False)
    if view.get("sentence"):
        out.print(str(view["sentence"]), markup=False)
    if not hits:
        out.print("no page matched" if view.get("searched", True) else "could not be searched", markup=False)
    for i, h in enumerate(hits, 1):
        out.print(f"{i}. {h.get('title')}  [{h.get('space')} {h.get('page_id')}]", markup=False)
        if h.get("snippet"):
            out.print(f"   {clean(str(h['snippet']), one_line=True)}", markup=False)


@app.command("search")
def search_cmd(
    query: Annotated[str, typer.Argument(help="What to look for (words or a phrase)")],
    limit: Annotated[int, typer.Option("--limit", min=1, max=20, help="At most this many hits (1..20)")] = 8,
    mode: Annotated[
        str | None,
        typer.Option("--mode", help="hybrid | lexical | semantic (default: hybrid with embeddings)"),
    ] = None,
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
    as_json: JsonFlag = False,
) -> None:
    """Search the knowledge base (``GET /knowledge/search``, grant ``state:read``): ranked hits."""
    show(
        url,
        token,
        "/knowledge/search",
        query={"q": query, "limit": limit, **({"mode": mode} if mode else {})},
        names={"q": "query"},
        need={"hits": list},
        as_json=as_json,
        printer=_print_hits,
        timeout=30.0,
    )
