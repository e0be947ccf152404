"""MCP seam: tool servers per seat and per node, through the official ``mcp`` SDK (CO-34).

- :func:`resolve` / :func:`resolve_shared` turn the company's ``mcp_servers`` and the seat's
  ``mcp_env`` chain into :class:`ResolvedServer`\\ s with a fingerprint (FL-115);
  :func:`spawns` says whether claiming a seat forks a stdio child (the claim limiter, FL-56).
- :class:`McpServerSession` is one running server (stdio child or streamable HTTP): bounded
  start that never raises, bounded calls that fail as tool errors, allow-listed environment,
  children that die with the node.
- :class:`SeatTools` is a seat's set (started concurrently, FL-65); :class:`McpPool` the node's,
  with the heartbeat rows (FL-46).
- :class:`McpSurface` is what a turn sees: server names, ``list_mcp_server_tools`` and
  ``activate_tool``.
"""

from ._child import CHILD_ENV_ALLOWLIST, child_environment
from ._errors import (
    McpCallFailed,
    McpCallTimedOut,
    McpServerGarbage,
    McpServerUnavailable,
    McpToolReturnedError,
)
from ._pool import McpPool, McpRow, SeatTools
from ._resolve import (
    ResolvedServer,
    fingerprint_of,
    resolve,
    resolve_seat_servers,
    resolve_shared,
    seat_mcp_env,
    spawns,
)
from ._session import McpServerSession, SessionState
from ._surface import ACTIVATE_TOOL, LIST_TOOLS_TOOL, McpSurface, hint_overrides

__all__ = [
    "ACTIVATE_TOOL",
    "CHILD_ENV_ALLOWLIST",
    "LIST_TOOLS_TOOL",
    "McpCallFailed",
    "McpCallTimedOut",
    "McpPool",
    "McpRow",
    "McpServerGarbage",
    "McpServerSession",
    "McpServerUnavailable",
    "McpSurface",
    "McpToolReturnedError",
    "ResolvedServer",
    "SeatTools",
    "SessionState",
    "child_environment",
    "fingerprint_of",
    "hint_overrides",
    "resolve",
    "resolve_seat_servers",
    "resolve_shared",
    "seat_mcp_env",
    "spawns",
]
