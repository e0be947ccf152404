"""Fixtures of the MCP tests: every session or pool a test starts is stopped, also on failure,
and every child pid it saw is SIGKILLed if it somehow survived."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from shared import mcp


class Started:
    """What a test started: sessions, seat sets and pools, stopped at the end."""

    def __init__(self) -> None:
        self.sessions: list[mcp.McpServerSession] = []
        self.pools: list[mcp.McpPool] = []
        self.seat_tools: list[mcp.SeatTools] = []

    def session(self, server: mcp.ResolvedServer, *, seat: str | None = "ada") -> mcp.McpServerSession:
        s = mcp.McpServerSession(server, seat=seat)
        self.sessions.append(s)
        return s

    def pool(self) -> mcp.McpPool:
        p = mcp.McpPool()
        self.pools.append(p)
        return p

    def seat(self, handle: str | None = "ada") -> mcp.SeatTools:
        t = mcp.SeatTools(handle)
        self.seat_tools.append(t)
        return t

    def pids(self) -> list[int]:
        every = [*self.sessions]
        for t in self.seat_tools:
            every.extend(t.sessions)
        for p in self.pools:
            every.extend(p.shared.sessions)
            for seat in p.held():
                held = p.seat(seat)
                if held is not None:
                    every.extend(held.sessions)
        return [s.pid for s in every if s.pid is not None]

    async def stop(self) -> None:
        pids = self.pids()
        for s in self.sessions:
            await s.stop(force=True)
        for t in self.seat_tools:
            await t.stop(force=True)
        for p in self.pools:
            await p.close(force=True)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


@pytest.fixture
async def started() -> AsyncIterator[Started]:
    """Start MCP sessions through this; all are stopped (and their groups killed) afterwards."""
    box = Started()
    try:
        yield box
    finally:
        await box.stop()


@pytest.fixture
def engine_marker(monkeypatch: pytest.MonkeyPatch) -> Callable[[], str]:
    """Put a secret-looking variable in the engine's environment; children must not see it."""

    def put() -> str:
        monkeypatch.setenv("CREWLET_ENGINE_MARKER", "engine-secret-value")
        return "CREWLET_ENGINE_MARKER"

    return put


def first_text(result: Any) -> str:
    """The first text block of a CallToolResult."""
    return str(result.content[0].text)
