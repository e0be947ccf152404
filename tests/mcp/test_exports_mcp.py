"""Pin the public API of ``shared.mcp`` (STYLE: a test pins ``__all__``)."""

from __future__ import annotations

from shared import mcp

EXPECTED = [
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


def test_all_is_pinned() -> None:
    assert sorted(mcp.__all__) == sorted(EXPECTED)
    for name in EXPECTED:
        assert hasattr(mcp, name), name


def test_errors_are_tool_errors() -> None:
    from shared.tools import ToolError, ToolFailed

    for cls in (mcp.McpCallFailed, mcp.McpServerUnavailable, mcp.McpServerGarbage, mcp.McpToolReturnedError):
        assert issubclass(cls, ToolFailed)
    err = mcp.McpCallTimedOut("slow", server="s")
    assert isinstance(err, ToolError) and isinstance(err, TimeoutError)
    assert (err.server, str(err), err.code) == ("s", "slow", "timeout")
