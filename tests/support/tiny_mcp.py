"""A tiny real MCP server for tests, on the official SDK's server side (``MCPServer``).

Run it as a script::

    python tests/support/tiny_mcp.py                       # stdio
    python tests/support/tiny_mcp.py --http --port 8765    # streamable HTTP on 127.0.0.1:8765/mcp

Tools:

- ``echo{text}``: returns ``text`` (read-only, idempotent);
- ``text.upper{text}``: ``text`` in capitals (a dotted name: model APIs refuse dots);
- ``env_value{name}``: the server process's environment variable ``name``, or ``null``;
- ``header_value{name}``: over HTTP, the request header ``name``, or ``null``;
- ``sleep{seconds}``: sleeps, then returns ``"slept"``;
- ``garble``: writes a line that is not JSON-RPC on stdout, then hangs (stdio only);
- ``die{code}``: exits the process at once with ``code`` (a server dying mid-call);
- ``fail{message}``: the tool reports an error (``isError``).

Options: ``--stderr-lines N`` writes N lines on stderr before serving (stderr-as-logs tests);
``--garbage-first`` writes a non-JSON-RPC line on stdout before serving.

Kept to one module with only the SDK imported, so it starts in well under a second.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

TINY_MCP = Path(__file__).resolve()
"""This file, for ``[sys.executable, str(TINY_MCP), ...]``."""

_WIRE: list[int] = []
"""A duplicate of the original stdout: the SDK moves the protocol off fd 1 (and points fd 1 at
stderr), so garbage meant for the client's reader is written here."""


def build() -> MCPServer[Any]:
    """Return the server object with its tools registered."""
    server: MCPServer[Any] = MCPServer("tiny", log_level="WARNING")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
    def echo(text: str) -> str:
        """Return the text as given."""
        return text

    @server.tool(name="text.upper")
    def upper(text: str) -> str:
        """Return the text in capitals (a dotted tool name, as some servers use)."""
        return text.upper()

    @server.tool()
    def env_value(name: str) -> str | None:
        """Return the server's environment variable `name`, or null."""
        return os.environ.get(name)

    @server.tool()
    def header_value(name: str, ctx: Context) -> str | None:
        """Return the HTTP request header `name`, or null (stdio: always null)."""
        request = ctx.request_context.request
        headers = getattr(request, "headers", None)
        return headers.get(name) if headers is not None else None

    @server.tool()
    async def sleep(seconds: float) -> str:
        """Sleep, then answer."""
        await asyncio.sleep(seconds)
        return "slept"

    @server.tool()
    async def garble() -> str:
        """Write garbage on stdout, then hang."""
        os.write(_WIRE[0] if _WIRE else 1, b"this is not JSON-RPC\n")
        await asyncio.sleep(3600)
        return "never"

    @server.tool()
    def die(code: int = 3) -> str:
        """Exit the process at once."""
        sys.stderr.write(f"tiny: dying with {code}\n")
        sys.stderr.flush()
        os._exit(code)

    @server.tool()
    def fail(message: str) -> str:
        """Report an error."""
        raise ToolError(message)

    return server


def main(argv: list[str] | None = None) -> None:
    """Parse ``argv`` and serve until stdin closes (stdio) or the process is killed (HTTP)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--stderr-lines", type=int, default=0)
    parser.add_argument("--garbage-first", action="store_true")
    args = parser.parse_args(argv)
    _WIRE.append(os.dup(1))
    for i in range(args.stderr_lines):
        sys.stderr.write(f"tiny stderr line {i}\n")
    sys.stderr.flush()
    if args.garbage_first:
        os.write(1, b"hello, I am not a JSON-RPC message\n")
    server = build()
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
