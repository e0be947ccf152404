"""What an MCP server's answer becomes for the model (CO-34): the tool's result, or the
:class:`~shared.mcp.McpCallFailed` error whose message the model reads, always short.

:class:`~shared.mcp.McpServerSession` keeps what depends on the session's life (a closed
connection, a dead process); the translations here depend only on the answer.
"""

from __future__ import annotations

import contextlib
from typing import Any

from mcp import types as mcp_types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from ._errors import McpCallFailed, McpCallTimedOut, McpToolReturnedError

__all__ = ["call_error", "garbage_text", "leaf", "short", "tool_result"]

_TEXT_LIMIT = 300


def short(text: str, limit: int = _TEXT_LIMIT) -> str:
    """``text`` on one line, cut to ``limit`` characters (with an ellipsis)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def leaf(exc: BaseException) -> BaseException:
    """The first innermost exception of an exception group (the SDK's task groups nest them)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def garbage_text(exc: Exception) -> str:
    """What a non-JSON-RPC line on a server's stdout said, short (the offending input if known)."""
    if isinstance(exc, ValidationError):
        with contextlib.suppress(Exception):
            return short(repr(exc.errors()[0].get("input")), 200)
    return short(f"{type(exc).__name__}: {exc}", 200)


def tool_result(name: str, tool: str, result: Any) -> mcp_types.CallToolResult:
    """The result of a call that answered.

    Args:
        name: The server's name.
        tool: The server's own tool name.
        result: What the SDK returned.

    Raises:
        McpCallFailed: The answer is not a ``CallToolResult``.
        McpToolReturnedError: The tool ran and reported an error; the message is its text.
    """
    if not isinstance(result, mcp_types.CallToolResult):
        raise McpCallFailed(f"MCP server {name!r} answered {tool} with an unexpected result", server=name)
    if result.is_error:
        text = " ".join(b.text for b in result.content if isinstance(b, mcp_types.TextContent))
        raise McpToolReturnedError(
            f"{tool} (MCP server {name!r}) failed: {short(text) or 'no message'}", server=name
        )
    return result


def call_error(name: str, tool: str, failure: BaseException, *, limit: float) -> McpCallFailed:
    """The error of a call that failed other than by a closed connection.

    Args:
        name: The server's name.
        tool: The server's own tool name.
        failure: The innermost exception (:func:`leaf`).
        limit: The call's ``request_timeout_seconds``.

    Returns:
        :class:`McpCallTimedOut` for the SDK's request timeout; else :class:`McpCallFailed`
        naming the JSON-RPC refusal (with its code) or the exception.
    """
    if isinstance(failure, MCPError) and failure.code == mcp_types.REQUEST_TIMEOUT:
        return McpCallTimedOut(f"MCP server {name!r} did not answer {tool} within {limit:g} s", server=name)
    if isinstance(failure, MCPError):
        return McpCallFailed(
            f"MCP server {name!r} refused {tool}: {short(failure.message)} (code {failure.code})", server=name
        )
    return McpCallFailed(
        f"MCP server {name!r} failed on {tool}: {type(failure).__name__}: {short(str(failure))}", server=name
    )
