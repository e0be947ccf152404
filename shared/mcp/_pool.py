"""A seat's MCP servers and the node's pool of them (CO-34, FL-46, FL-65, FL-66, FL-115).

:class:`SeatTools` is one seat's set of server instances (or, with no seat, the node's shared
set). Starting it starts every server concurrently, so the acquire waits for the slowest, not the
sum (FL-65); a server that fails is skipped and named, the seat still runs (CO-34).
:meth:`SeatTools.apply` reconciles against a new resolution: an instance restarts only when its
fingerprint moved (FL-115).

:class:`McpPool` is the node's: one :class:`SeatTools` per held seat plus the shared set, the
heartbeat's start rows (FL-46) and the surface a seat's turn sees. Before each turn
:meth:`McpPool.revive` starts again a server that ran and then died mid-session (at most once per
:data:`REVIVE_INTERVAL` per server); one that failed to start waits for a new claim or config.

Not guaranteed: the rows are the node's *current* instances (a released seat's instances leave
them); they are not a history of every start.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterable, Sequence
from typing import TypedDict

import anyio

from shared import logs

from ._resolve import ResolvedServer
from ._session import McpServerSession
from ._surface import McpSurface

__all__ = ["REVIVE_INTERVAL", "McpPool", "McpRow", "SeatTools"]

REVIVE_INTERVAL = 30.0
"""Seconds between two revivals of one server that died mid-session (ours)."""

_log = logs.get("mcp")


class McpRow(TypedDict):
    """One heartbeat row per MCP server name (FL-46).

    Keys:
        server: The ``mcp_servers`` entry name.
        started: Instances on this node that are running.
        failed: Instances on this node that failed to start or whose process exited.
        reason: One failure reason (the first failed instance's, in seat order), prefixed with the
            seat it failed for (``seat dev: ...``, or ``shared: ...``); None when none.
    """

    server: str
    started: int
    failed: int
    reason: str | None


class SeatTools:
    """One seat's MCP server instances, or the node's shared ones (CO-34).

    Args:
        seat: The seat's handle, named on log records; None for the node's shared set.
    """

    def __init__(self, seat: str | None = None) -> None:
        self.seat = seat
        self._sessions: dict[str, McpServerSession] = {}
        self._revived: dict[str, float] = {}  # server -> monotonic time of its last revival
        self._lock = anyio.Lock()
        self._closed = False

    @property
    def sessions(self) -> list[McpServerSession]:
        """The instances, in resolution order."""
        return list(self._sessions.values())

    def session(self, server: str) -> McpServerSession | None:
        """Return the instance of ``server``, or None."""
        return self._sessions.get(server)

    async def start(self, servers: Sequence[ResolvedServer]) -> None:
        """Start ``servers`` concurrently; returns when each is running or has failed (FL-65).

        Same as :meth:`apply` on an empty set. Never raises for a server fault: see
        :attr:`McpServerSession.error`.
        """
        await self.apply(servers)

    async def apply(self, servers: Sequence[ResolvedServer]) -> None:
        """Reconcile with a new resolution (FL-115).

        An instance whose fingerprint is unchanged keeps its process (a new ``tool_prefix`` /
        ``tool_annotations`` is swapped in); one whose fingerprint moved is stopped and started
        again; one no longer resolved is stopped; a new one is started. Starts run concurrently,
        bounded by each server's ``startup_timeout_seconds``. An instance that failed or exited
        is not retried while its fingerprint stands (a hanging server would otherwise cost its
        full start timeout on every apply): the next claim of the seat, or a config change that
        moves it, starts it again.

        Args:
            servers: The resolution (:func:`~shared.mcp.resolve` or
                :func:`~shared.mcp.resolve_shared`); names are unique.
        """
        async with self._lock:
            if self._closed:
                return
            wanted = {s.name: s for s in servers}
            stale: list[McpServerSession] = []
            keep: dict[str, McpServerSession] = {}
            for name, session in self._sessions.items():
                target = wanted.get(name)
                if target is not None and target.fingerprint == session.server.fingerprint:
                    session.server = target
                    keep[name] = session
                else:
                    stale.append(session)
            fresh = [McpServerSession(s, seat=self.seat) for s in servers if s.name not in keep]
            every = {**keep, **{s.name: s for s in fresh}}
            self._sessions = {s.name: every[s.name] for s in servers}
            await _all(session.stop() for session in stale)
            await _all(session.start() for session in fresh)
            if self._closed:  # a stop came while the starts ran
                await _all(session.stop(force=True) for session in fresh)

    async def revive(self, *, every: float = REVIVE_INTERVAL) -> list[str]:
        """Start again each instance that ran and then exited or went away mid-session.

        A server that failed to *start* is not retried here (its fingerprint has to move, or the
        seat be claimed again); one that died while serving is, at most once per ``every`` seconds,
        so a server that crashes on every call cannot turn each turn into a restart loop.

        Args:
            every: Seconds between two revivals of one server.

        Returns:
            The names of the servers started again (running or failed again).
        """
        async with self._lock:
            if self._closed:
                return []
            now = time.monotonic()
            due = [
                s
                for s in self._sessions.values()
                if s.lost_mid_session and now - self._revived.get(s.name, -every) >= every
            ]
            fresh = [McpServerSession(s.server, seat=self.seat) for s in due]
            for session in fresh:
                self._sessions[session.name] = session
                self._revived[session.name] = now
            await _all(session.stop(force=True) for session in due)
            await _all(session.start() for session in fresh)
            for session in fresh:
                _log.info("mcp_server_revived", server=session.name, seat=self.seat, running=session.running)
            return [session.name for session in fresh]

    async def stop(self, *, force: bool = False) -> None:
        """Stop every instance and refuse later starts; idempotent (FL-66).

        Does not wait for a start in progress to finish: starting instances are stopped at once,
        so a fenced release is never held up by a slow server.

        Args:
            force: SIGKILL each process group first instead of closing stdin gracefully.
        """
        self._closed = True
        await _all(session.stop(force=force) for session in list(self._sessions.values()))

    def surface(self, shared: SeatTools | None = None) -> McpSurface:
        """Return what a turn sees: this set's instances, then ``shared``'s."""
        return McpSurface([*self.sessions, *(shared.sessions if shared is not None else [])])


async def _all(steps: Iterable[Awaitable[object]]) -> None:
    pending = list(steps)
    if pending:
        await asyncio.gather(*pending)


class McpPool:
    """The node's MCP server instances: per held seat, and shared (CO-34, FL-46).

    The lead's seat lifecycle calls :meth:`acquire` in the acquire hook (after the agent object
    and budget ceiling, before the consumers attach, FL-65) and :meth:`release` in the release
    hook (FL-66: per-seat children die with the lease).

    Args:
        node_id: This node's id, for the record only (log lines already carry ``node``); None
            when unknown.
    """

    def __init__(self, node_id: str | None = None) -> None:
        self.node_id = node_id
        self._seats: dict[str, SeatTools] = {}
        self._shared = SeatTools(None)

    @property
    def shared(self) -> SeatTools:
        """The node's shared instances."""
        return self._shared

    def held(self) -> list[str]:
        """The handles of the seats holding instances."""
        return list(self._seats)

    def seat(self, seat: str) -> SeatTools | None:
        """Return the seat's set, or None when the seat holds none on this node."""
        return self._seats.get(seat)

    async def acquire(self, seat: str, servers: Sequence[ResolvedServer]) -> SeatTools:
        """Start (or reconcile) the seat's per-seat servers; waits for the slowest (FL-65).

        Calling it again for a held seat applies a new resolution (restarts only moved
        fingerprints, FL-115).

        Args:
            seat: The seat's handle.
            servers: :func:`~shared.mcp.resolve` of the seat.

        Returns:
            The seat's set; failures are on its sessions, never raised.
        """
        tools = self._seats.get(seat)
        if tools is None:
            tools = self._seats[seat] = SeatTools(seat)
        await tools.apply(servers)
        return tools

    async def release(self, seat: str, *, force: bool = False) -> None:
        """Stop the seat's instances and forget the seat; idempotent (FL-66).

        Args:
            seat: The seat's handle; an unknown one is a no-op.
            force: SIGKILL the process groups at once (a fenced release).
        """
        tools = self._seats.pop(seat, None)
        if tools is not None:
            await tools.stop(force=force)

    async def revive(self, seat: str) -> list[str]:
        """Before a turn: start again the seat's and the node's servers that died mid-session
        (:meth:`SeatTools.revive`); returns their names."""
        tools = self._seats.get(seat)
        revived = await tools.revive() if tools is not None else []
        return revived + await self._shared.revive()

    async def apply_shared(self, servers: Sequence[ResolvedServer]) -> None:
        """Reconcile the node's shared instances with :func:`~shared.mcp.resolve_shared` (FL-115)."""
        await self._shared.apply(servers)

    def surface(self, seat: str) -> McpSurface | None:
        """Return what the seat's turn sees (its instances, then the node's shared ones), or None
        when the seat holds no set on this node."""
        tools = self._seats.get(seat)
        return tools.surface(self._shared) if tools is not None else None

    def rows(self) -> list[McpRow]:
        """The heartbeat's MCP start rows: one per server name, sorted by name (FL-46).

        Returns:
            ``{"server", "started", "failed", "reason"}`` per name with at least one instance on
            this node (counts over the seats' and the shared instances).
        """
        rows: dict[str, McpRow] = {}
        for tools in (*self._seats.values(), self._shared):
            for session in tools.sessions:
                row = rows.setdefault(
                    session.name, {"server": session.name, "started": 0, "failed": 0, "reason": None}
                )
                if session.running:
                    row["started"] += 1
                elif session.state == "failed":
                    row["failed"] += 1
                    if row["reason"] is None:
                        who = f"seat {tools.seat}: " if tools.seat else "shared: "
                        row["reason"] = who + (session.error or "failed")
        return [rows[name] for name in sorted(rows)]

    async def close(self, *, force: bool = False) -> None:
        """Stop every instance, the seats' and the shared ones (node shutdown)."""
        seats, self._seats = list(self._seats.values()), {}
        await _all(tools.stop(force=force) for tools in (*seats, self._shared))
