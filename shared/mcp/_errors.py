"""Errors of the MCP seam (CO-34, FL-116).

A call to an MCP server fails as a *tool error* the model reads, never as a crash of the turn or
the node: every error here is a :class:`~shared.tools.ToolFailed`, which
:meth:`shared.tools.ToolRegistry.execute` turns into an error result::

    CrewletError
    └── ToolError                              (shared.tools)
        └── ToolFailed
            └── McpCallFailed                  a call to an MCP server failed; ``server`` names it
                ├── McpToolReturnedError       the server ran the tool and it reported an error
                ├── McpServerUnavailable       not running: failed to start, stopped, restarted
                │                              by an apply (FL-116), or exited mid-call
                ├── McpServerGarbage           the server wrote a line on stdout that is not
                │                              JSON-RPC while the call was waiting
                └── McpCallTimedOut            no answer within request_timeout_seconds
                                               (also a TimeoutError)

A failed *start* raises nothing: :meth:`McpServerSession.start` keeps the reason on the session
(CO-34: "a server that misses a deadline is skipped, the seat still runs").
"""

from __future__ import annotations

from shared.tools import ToolFailed

__all__ = [
    "McpCallFailed",
    "McpCallTimedOut",
    "McpServerGarbage",
    "McpServerUnavailable",
    "McpToolReturnedError",
]


class McpCallFailed(ToolFailed):
    """A call to an MCP server failed; the message says which server and why.

    Attributes:
        server: The ``mcp_servers`` entry name.
    """

    code = "mcp_call_failed"

    def __init__(self, message: str, *, server: str) -> None:
        super().__init__(message)
        self.server = server


class McpToolReturnedError(McpCallFailed):
    """The server ran the tool and the tool reported an error (``isError``); the message is
    the tool's own text."""

    code = "mcp_tool_error"


class McpServerUnavailable(McpCallFailed):
    """The server is not running: it failed to start, was stopped or restarted, or its process
    exited (a restarted server's old tools fail this way, FL-116)."""

    code = "mcp_server_unavailable"


class McpServerGarbage(McpCallFailed):
    """The server printed a line on stdout that is not JSON-RPC while the call was waiting."""

    code = "mcp_server_garbage"


class McpCallTimedOut(McpCallFailed, TimeoutError):
    """No answer within the server's ``request_timeout_seconds``; the server may still be
    working on it (the outcome is unknown)."""

    code = "timeout"
    retryable = True
