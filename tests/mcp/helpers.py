"""Helpers of the MCP tests: resolved servers for real commands, a tool context, process checks."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, cast

from shared import mcp, tools
from shared.providers import ToolCall
from tests.support.procs import VENV_BIN, pid_alive
from tests.support.tiny_mcp import TINY_MCP
from tests.turns.workspace import Estate

__all__ = ["MCP_SERVER_TIME", "call", "ctx", "pid_alive", "server", "tiny", "time_server"]

MCP_SERVER_TIME = str(VENV_BIN / "mcp-server-time")
"""The PyPI ``mcp-server-time`` console script installed in the venv."""


def server(
    name: str,
    command: str | None,
    args: list[str] | None = None,
    *,
    env: dict[str, str] | None = None,
    transport: str = "stdio",
    url: str | None = None,
    headers: dict[str, str] | None = None,
    startup: float = 20.0,
    request: float = 20.0,
    prefix: str | None = None,
    annotations: dict[str, dict[str, bool]] | None = None,
) -> mcp.ResolvedServer:
    """A resolved server built by hand (the resolution itself is tested in test_resolve)."""
    args_t = tuple(args or [])
    env = env or {}
    headers = headers or {}
    fp = mcp.fingerprint_of(
        name=name,
        transport=transport,
        command=command,
        args=args_t,
        env=env,
        url=url,
        headers=headers,
        startup_timeout_seconds=startup,
        request_timeout_seconds=request,
    )
    return mcp.ResolvedServer(
        name=name,
        transport=transport,  # type: ignore[arg-type]
        shared=False,
        command=command,
        args=args_t,
        env=env,
        url=url,
        headers=headers,
        tool_prefix=prefix,
        tool_annotations=annotations or {},
        startup_timeout_seconds=startup,
        request_timeout_seconds=request,
        fingerprint=fp,
    )


def time_server(name: str = "time", **kw: Any) -> mcp.ResolvedServer:
    """``mcp-server-time`` on UTC, as a per-seat stdio server."""
    return server(name, MCP_SERVER_TIME, ["--local-timezone", "UTC"], **kw)


def tiny(name: str = "tiny", *extra: str, **kw: Any) -> mcp.ResolvedServer:
    """The test server of :mod:`tests.support.tiny_mcp` over stdio."""
    return server(name, sys.executable, [str(TINY_MCP), *extra], **kw)


def ctx(seat: str = "ada") -> tools.ToolContext:
    """A tool context over an in-memory workspace (MCP tools never touch it)."""
    return tools.ToolContext(seat, cast(tools.Workspace, Estate().workspace(seat)))


async def call(registry: tools.ToolRegistry, name: str, arguments: dict[str, Any]) -> tools.ToolOutcome:
    """Run one call through the registry, as the turn loop does."""
    return await registry.execute(ToolCall(id=f"c-{name}", name=name, arguments=arguments), ctx())


def exists(pid: int | None) -> bool:
    """True while ``pid`` is a live, non-zombie process."""
    return pid is not None and pid_alive(pid)


def proc_path(pid: int) -> Path:
    """``/proc/<pid>``."""
    return Path(f"/proc/{pid}")
