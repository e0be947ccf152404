"""Built-in knowledge base and file tools (CO-23, CO-25, CO-26).

``search_knowledge`` never raises to the model (CO-25): a failed search returns no hits and
``searched: false``. File tools carry text only: ``read_file`` refuses a binary file (naming its
size and type) and anything over 1 MiB; ``write_file`` takes UTF-8 text up to 1 MiB and a
relative POSIX path without ``..`` of at most 512 characters (CO-26).
"""

from __future__ import annotations

import mimetypes
from typing import Any

from shared.config import KEY_PATTERN

from ._errors import ToolFailed
from ._registry import Tool, ToolAnnotations, ToolContext
from ._schema import arguments

__all__ = ["FILE_IO_LIMIT_BYTES", "SNIPPET_CHARS", "check_path", "file_tools", "knowledge_tools"]

FILE_IO_LIMIT_BYTES = 1024 * 1024
"""What one file tool call reads or writes at most, in bytes (CO-26, ours)."""
SNIPPET_CHARS = 200
"""A search hit's snippet length, in characters (CO-25)."""

_SPACE = {"type": "string", "pattern": KEY_PATTERN, "description": "Space key, e.g. ENG."}
_PROJECT = {"type": "string", "pattern": KEY_PATTERN, "description": "Project key, e.g. ENG."}
_PATH = {"type": "string", "minLength": 1, "maxLength": 512, "description": "Relative POSIX path."}
_READ = ToolAnnotations(read_only="yes", destructive="no", idempotent="yes", open_world="no")
_WRITE = ToolAnnotations(read_only="no", destructive="yes", idempotent="yes", open_world="no")


def check_path(path: str) -> str:
    """Check a project file path (CO-26): relative POSIX, no ``..``, no empty segment.

    Raises:
        ToolFailed: The path breaks a rule (``field="path"``).
    """
    if path.startswith("/") or "\\" in path:
        raise ToolFailed(f"path {path!r} must be a relative POSIX path", "path")
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ToolFailed(f"path {path!r} may not contain empty, '.' or '..' segments", "path")
    return path


async def _search(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    limit = int(args.get("limit", 5))
    try:
        found = await ctx.workspace.search_pages(
            args["query"], args.get("space"), mode=args.get("mode"), limit=limit
        )
    except Exception as e:  # noqa: BLE001 - CO-25: search never raises to the model
        return {"hits": [], "searched": False, "error": f"{type(e).__name__}: {e}"}
    hits = found.get("hits", []) if isinstance(found, dict) else []
    out = []
    for hit in hits[:limit]:
        hit = dict(hit)
        if isinstance(hit.get("snippet"), str):
            hit["snippet"] = hit["snippet"][:SNIPPET_CHARS]
        out.append(hit)
    # the sentence the model reads: partial (ES-64), building (ES-65) or failed (ES-36) say so
    extra: dict[str, Any] = {
        k: found[k]
        for k in (
            "sentence",
            "state",
            "partial",
            "mode_requested",
            "mode_used",
            "semantic",
            "vector_coverage",
        )
        if isinstance(found, dict) and k in found
    }
    searched = bool(found.get("searched", True)) if isinstance(found, dict) else True
    return {"hits": out, "searched": searched, **extra}


async def _get_page(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return await ctx.workspace.read_page(args["space"], args["title"])


async def _write_page(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return await ctx.workspace.write_page(args["space"], args["title"], args["body"])


async def _list_files(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    files = await ctx.workspace.list_files(args["project"])
    prefix = args.get("prefix", "")
    chosen = [f for f in files if str(f.get("path", "")).startswith(prefix)]
    return {"files": chosen, "count": len(chosen)}


async def _read_file(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    path = check_path(args["path"])
    content = await ctx.workspace.get_file(args["project"], path)
    kind = mimetypes.guess_type(path)[0] or "application/octet-stream"
    if len(content) > FILE_IO_LIMIT_BYTES:
        raise ToolFailed(
            f"{path} is {len(content)} bytes; a tool reads at most {FILE_IO_LIMIT_BYTES}", "path"
        )
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolFailed(
            f"{path} is binary ({len(content)} bytes, {kind}); only UTF-8 text is read", "path"
        ) from None
    return {"project": args["project"], "path": path, "size": len(content), "content": text}


async def _write_file(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    path = check_path(args["path"])
    data = args["content"].encode("utf-8")
    if len(data) > FILE_IO_LIMIT_BYTES:
        raise ToolFailed(
            f"content is {len(data)} bytes; a tool writes at most {FILE_IO_LIMIT_BYTES}", "content"
        )
    return await ctx.workspace.put_file(args["project"], path, data)


def knowledge_tools() -> list[Tool]:
    """Return the knowledge base built-ins (CO-25), in catalogue order."""
    return [
        Tool(
            "search_knowledge",
            "Search the company's knowledge base by words (BM25) and, when the company has "
            "embeddings, by meaning (hybrid by default). Returns up to `limit` hits (default 5) "
            "with a short snippet each, and says how it searched (`mode_used`, `semantic`).",
            arguments(
                {
                    "query": {"type": "string", "minLength": 1},
                    "space": _SPACE,
                    "limit": {"type": "integer", "minimum": 1, "maximum": 20},
                    "mode": {"type": "string", "enum": ["hybrid", "lexical", "semantic"]},
                },
                "query",
            ),
            _search,
            annotations=_READ,
        ),
        Tool(
            "get_page",
            "Read one knowledge base page by space and title.",
            arguments({"space": _SPACE, "title": {"type": "string", "minLength": 1}}, "space", "title"),
            _get_page,
            annotations=_READ,
        ),
        Tool(
            "write_page",
            "Create or update the page with this title in a space (markdown body).",
            arguments(
                {
                    "space": _SPACE,
                    "title": {"type": "string", "minLength": 1, "maxLength": 300},
                    "body": {"type": "string"},
                },
                "space",
                "title",
                "body",
            ),
            _write_page,
            writes=True,
            delivers_to="page",
            annotations=_WRITE,
        ),
    ]


def file_tools() -> list[Tool]:
    """Return the project file built-ins (CO-26), in catalogue order."""
    return [
        Tool(
            "list_files",
            "List a project's files, optionally those whose path starts with `prefix`.",
            arguments({"project": _PROJECT, "prefix": {"type": "string"}}, "project"),
            _list_files,
            annotations=_READ,
        ),
        Tool(
            "read_file",
            "Read a project file as UTF-8 text (binary files and files over 1 MiB are refused).",
            arguments({"project": _PROJECT, "path": _PATH}, "project", "path"),
            _read_file,
            annotations=_READ,
        ),
        Tool(
            "write_file",
            "Write UTF-8 text to a project file (created or replaced; at most 1 MiB).",
            arguments(
                {"project": _PROJECT, "path": _PATH, "content": {"type": "string"}},
                "project",
                "path",
                "content",
            ),
            _write_file,
            writes=True,
            delivers_to="file",
            annotations=_WRITE,
        ),
    ]
