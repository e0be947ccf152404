"""One running MCP server, over stdio or streamable HTTP, with the official ``mcp`` SDK (CO-34).

:class:`McpServerSession` owns one server instance. Its SDK contexts (the transport and the
``ClientSession``) are entered and exited in one dedicated *runner* task, because the SDK's
context managers hold anyio task groups that must be left by the task that entered them; start,
call and stop may then come from any task of the loop.

The rules it enforces:

- **Bounded start** (CO-34): spawn, ``initialize`` and the tool listing must finish within
  ``startup_timeout_seconds``. :meth:`~McpServerSession.start` never raises: a command that is not
  found, a server that exits at once (with its last stderr lines), one that does not answer
  ``initialize`` in time, or one that prints garbage instead, leaves the session ``failed`` with
  a readable :attr:`~McpServerSession.error`. The seat runs without it.
- **Bounded calls** (CO-34, CO-16): a call answers within ``request_timeout_seconds``; a dead
  server, a non-JSON-RPC line on stdout while the call waits, or a timeout become
  :class:`~shared.mcp.McpCallFailed` tool errors the model reads, never a crash.
- **Allow-listed environment** (CO-34): a stdio child gets ``PATH HOME LANG LC_ALL TZ TMPDIR USER
  SHELL TERM`` from the node (those that are set) plus the server's resolved ``env``; nothing else
  of the engine's environment (the launcher drops even what the SDK adds by default).
- **No orphans** (FL-66, CO-34): children start through :mod:`shared.mcp._launcher`, which arms
  ``PR_SET_PDEATHSIG=SIGKILL`` and leads a process group before exec'ing the command, so a
  ``kill -9`` of the node kills the server; :meth:`~McpServerSession.stop` kills the whole group.
- **Stderr as logs** (CO-34): each stderr line is a DEBUG record ``mcp_server_stderr{server, seat,
  line}``; the last lines are kept for failure reasons.

Not guaranteed: the PID death signal is bound to the *thread* that spawned the child (the event
loop's thread); a loop run in a short-lived thread kills its children when that thread ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections import deque
from typing import Any, Literal

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp import types as mcp_types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from shared import logs

from ._answers import call_error, garbage_text, leaf, short, tool_result
from ._child import child_environment, kill_group, launcher_args, pid_alive, read_lines
from ._errors import (
    McpCallTimedOut,
    McpServerGarbage,
    McpServerUnavailable,
)
from ._launcher import PID_LINE_PREFIX
from ._resolve import ResolvedServer

__all__ = ["McpServerSession", "SessionState"]

SessionState = Literal["new", "starting", "running", "failed", "stopped"]
"""``new`` → ``starting`` → ``running`` | ``failed``; ``running`` → ``failed`` (the process
exited) | ``stopped``."""

_STDERR_TAIL_LINES = 20
_REASON_TAIL_LINES = 5
_MAX_TOOL_PAGES = 50
_REASON_LIMIT = 800
_STOP_BUDGET_SECONDS = 10.0
_STDERR_DRAIN_SECONDS = 1.0
_EXIT_CONFIRM_POLLS = 100  # x 0.05 s
_CLIENT_INFO = mcp_types.Implementation(name="crewlet", version="0.1.0")

_log = logs.get("mcp")


class _StartRefused(Exception):
    """The start stopped before spawning (command not found); the message is the reason."""


class McpServerSession:
    """One instance of one MCP server (CO-34).

    Args:
        server: What to run (see :func:`~shared.mcp.resolve`).
        seat: The seat's handle, named on log records; None for a node-shared server.

    Attributes:
        server: The resolved entry; an apply may swap in one with the same fingerprint (a new
            ``tool_prefix`` or ``tool_annotations``) without a restart.
        seat: As given.
        state: See :data:`SessionState`.
        error: Why the start failed or the process exited, readable; None otherwise.
        pid: The stdio child's pid (also its process group id); None for http or before spawn.
        tools: The server's tools as listed at start (``mcp.types.Tool``).
        start_seconds: Wall time the start took (spawn to tool list), seconds; None before.
    """

    def __init__(self, server: ResolvedServer, *, seat: str | None = None) -> None:
        self.server = server
        self.seat = seat
        self.state: SessionState = "new"
        self.error: str | None = None
        self.pid: int | None = None
        self.tools: list[mcp_types.Tool] = []
        self.start_seconds: float | None = None
        self.lost_mid_session = False  # it ran, then exited or went away (revivable, unlike a bad start)
        self._tail: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)
        self._garbage: deque[str] = deque(maxlen=3)
        self._session: ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._stderr_task: asyncio.Task[None] | None = None
        self._scope: anyio.CancelScope | None = None
        self._ready = asyncio.Event()
        self._wake = asyncio.Event()
        self._phase = "initialize"
        self._stopping = False
        self._faults: set[asyncio.Future[str]] = set()
        self._exit_watch: asyncio.Task[None] | None = None

    # --- introspection ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The server's name (the ``mcp_servers`` entry)."""
        return self.server.name

    @property
    def running(self) -> bool:
        """True while the server answered its start and has not exited or been stopped."""
        return self.state == "running"

    @property
    def stderr_tail(self) -> list[str]:
        """The last stderr lines (at most 20), oldest first."""
        return list(self._tail)

    def _fields(self) -> dict[str, Any]:
        return {"server": self.name, "seat": self.seat}

    def _tail_text(self) -> str:
        lines = [line for line in self._tail if line.strip()][-_REASON_TAIL_LINES:]
        return "; last stderr: " + " | ".join(short(line, 200) for line in lines) if lines else ""

    def _garbage_note(self) -> str:
        if not self._garbage:
            return ""
        return f"; it printed non-JSON-RPC output on stdout: {self._garbage[-1]}"

    # --- start ------------------------------------------------------------------------------

    async def start(self) -> bool:
        """Start the server and list its tools, bounded by ``startup_timeout_seconds`` (CO-34).

        Never raises for a server fault: a failure leaves :attr:`state` ``failed`` with
        :attr:`error` saying why (command not found; exited before answering, with its last
        stderr lines; did not answer within N s; what it printed instead of JSON-RPC) and logs
        ``mcp_server_failed``. A second call waits for and returns the first outcome.

        Returns:
            True when the server is running and :attr:`tools` is filled.

        Raises:
            asyncio.CancelledError: The caller was cancelled; the child is killed first.
        """
        if self.state == "starting":
            await self._ready.wait()
        if self.state != "new":
            return self.running
        self.state = "starting"
        began = time.monotonic()
        self._scope = anyio.CancelScope()
        self._task = asyncio.create_task(self._run(), name=f"mcp:{self.name}:{self.seat or '-'}")
        limit = self.server.startup_timeout_seconds
        try:
            async with asyncio.timeout(limit):
                await self._ready.wait()
        except TimeoutError:
            kill_group(self.pid)  # first, so its last stderr lines are all in before the reason
            await self._drain_stderr()
            self._fail(
                f"did not answer {self._phase} within {limit:g} s{self._garbage_note()}{self._tail_text()}"
            )
            await self.stop(force=True)
            return False
        except BaseException:
            kill_group(self.pid)
            self._scope.cancel()
            raise
        self.start_seconds = time.monotonic() - began
        if self.running:
            _log.info(
                "mcp_server_started",
                **self._fields(),
                pid=self.pid,
                tools=len(self.tools),
                elapsed_ms=round(self.start_seconds * 1000),
            )
        return self.running

    def _fail(self, reason: str) -> None:
        if self.state in ("failed", "stopped"):
            return
        starting = self.state in ("new", "starting")
        self.state = "failed"
        self.lost_mid_session = not starting
        self.error = short(reason, _REASON_LIMIT)  # it travels on every heartbeat (FL-46)
        self._wake.set()
        event = "mcp_server_failed" if starting else "mcp_server_exited"
        _log.warning(
            event, **self._fields(), reason=reason, stderr_tail=self.stderr_tail[-_REASON_TAIL_LINES:]
        )

    async def _run(self) -> None:
        assert self._scope is not None
        try:
            with self._scope:
                async with contextlib.AsyncExitStack() as stack:
                    if self.server.transport == "stdio":
                        read, write = await self._open_stdio(stack)
                    else:
                        read, write = await self._open_http(stack)
                    session = await stack.enter_async_context(
                        ClientSession(read, write, message_handler=self._on_message, client_info=_CLIENT_INFO)
                    )
                    self._phase = "initialize"
                    await session.initialize()
                    self._phase = "the tool listing"
                    self.tools = await self._list_tools(session)
                    if self.state == "starting":
                        self._session = session
                        self.state = "running"
                        self._ready.set()
                        await self._wake.wait()
        except Exception as e:  # every fault of the server ends as a reason, never a crash
            await self._drain_stderr()
            self._fail(self._explain(e))
        finally:
            self._session = None
            self._ready.set()
            self._fail_pending("the server's session ended")

    async def _open_stdio(self, stack: contextlib.AsyncExitStack) -> Any:
        command = self.server.command or ""
        env = child_environment(self.server)
        if shutil.which(command, path=env.get("PATH")) is None:
            where = "" if "/" in command else " (not on the child's PATH)"
            raise _StartRefused(f"command not found: {command!r}{where}")
        read_fd, write_fd = os.pipe()
        errlog = os.fdopen(write_fd, "w")
        try:
            self._stderr_task = asyncio.create_task(
                read_lines(read_fd, self._on_stderr), name=f"mcp-stderr:{self.name}"
            )
            executable, argv = launcher_args(command, self.server.args, env)
            params = StdioServerParameters(command=executable, args=argv, env=env)
            streams = await stack.enter_async_context(stdio_client(params, errlog=errlog))
        finally:
            errlog.close()  # the child holds its own copy: EOF on the read end means it is gone
        self._stderr_task.add_done_callback(self._on_stderr_eof)
        return streams

    async def _open_http(self, stack: contextlib.AsyncExitStack) -> Any:
        connect = min(30.0, self.server.startup_timeout_seconds)
        client = httpx2.AsyncClient(
            headers=self.server.headers,
            timeout=httpx2.Timeout(connect, read=self.server.request_timeout_seconds),
        )
        await stack.enter_async_context(client)
        return await stack.enter_async_context(
            streamable_http_client(self.server.url or "", http_client=client)
        )

    async def _list_tools(self, session: ClientSession) -> list[mcp_types.Tool]:
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_TOOL_PAGES):
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    def _explain(self, exc: BaseException) -> str:
        failure = leaf(exc)
        if isinstance(failure, _StartRefused):
            return str(failure)
        if isinstance(failure, MCPError) and failure.code == mcp_types.CONNECTION_CLOSED:
            if self.state == "starting":
                what = "exited" if self.server.transport == "stdio" else "closed the connection"
                return f"{what} before answering {self._phase}{self._garbage_note()}{self._tail_text()}"
            return f"the connection closed{self._tail_text()}"
        if isinstance(failure, MCPError):
            return f"answered {self._phase} with an error: {short(failure.message)}{self._tail_text()}"
        if isinstance(failure, OSError) and self.server.transport == "stdio":
            return f"could not be spawned: {failure}"
        return (
            f"failed during {self._phase}: {type(failure).__name__}: {short(str(failure))}{self._tail_text()}"
        )

    # --- stderr and stdout faults -----------------------------------------------------------

    def _on_stderr(self, line: str) -> None:
        if self.pid is None and line.startswith(PID_LINE_PREFIX):
            with contextlib.suppress(ValueError):
                self.pid = int(line[len(PID_LINE_PREFIX) :])
                return
        self._tail.append(line)
        _log.debug("mcp_server_stderr", **self._fields(), line=line)

    def _on_stderr_eof(self, task: asyncio.Task[None]) -> None:
        # EOF: every holder of the pipe is gone, so the server exited (or closed stderr on purpose)
        if self.state == "running" and not self._stopping:
            self._exit_watch = asyncio.create_task(self._confirm_exit(), name=f"mcp-exit:{self.name}")

    async def _confirm_exit(self) -> None:
        # the kernel closes a dying process's files before it turns into a zombie: give the
        # exit a moment to show in /proc rather than read "alive" in between
        for _ in range(_EXIT_CONFIRM_POLLS):
            if self.pid is None or not pid_alive(self.pid):
                self._fail(f"exited mid-session{self._garbage_note()}{self._tail_text()}")
                return
            if self.state != "running" or self._stopping:
                return
            await asyncio.sleep(0.05)

    async def _drain_stderr(self) -> None:
        """Let the stderr reader take in the last lines of an exited child before a reason is
        written (bounded)."""
        task = self._stderr_task
        if task is None or task.done():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_STDERR_DRAIN_SECONDS):
                await asyncio.shield(task)

    async def _on_message(self, message: Any) -> None:
        if not isinstance(message, Exception):
            return
        text = garbage_text(message)
        self._garbage.append(text)
        _log.warning("mcp_server_garbage", **self._fields(), output=text)
        what = (
            "printed non-JSON-RPC output on stdout" if self.server.transport == "stdio" else "transport error"
        )
        self._fail_pending(f"{what}: {text}")

    def _fail_pending(self, why: str) -> None:
        for fault in list(self._faults):
            if not fault.done():
                fault.set_result(why)

    # --- calls ------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        """Call ``tool`` with ``arguments``, bounded by ``request_timeout_seconds`` (CO-34).

        Args:
            tool: The server's own (unprefixed) tool name.
            arguments: The JSON arguments object.

        Returns:
            The server's result (``isError`` false).

        Raises:
            McpServerUnavailable: The server is not running (failed start, stopped, restarted) or
                its process exited during the call; the message says why, with stderr lines.
            McpServerGarbage: It wrote a non-JSON-RPC line on stdout while the call waited.
            McpCallTimedOut: No answer within ``request_timeout_seconds``.
            McpToolReturnedError: The tool ran and reported an error; the message is its text.
            McpCallFailed: Any other failure of the call (a JSON-RPC error, a transport error).
        """
        session = self._session
        if session is None or not self.running:
            raise McpServerUnavailable(self._unavailable_text(), server=self.name)
        limit = self.server.request_timeout_seconds
        loop = asyncio.get_running_loop()
        fault: asyncio.Future[str] = loop.create_future()
        self._faults.add(fault)
        task = asyncio.ensure_future(session.call_tool(tool, arguments, read_timeout_seconds=limit))
        waiters: set[asyncio.Future[Any]] = {task, fault}
        try:
            done, _ = await asyncio.wait(waiters, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._faults.discard(fault)
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if task in done:
            return self._result_of(tool, task)
        if fault in done:
            why = fault.result()
            if not self.running:
                await self._drain_stderr()
                raise McpServerUnavailable(
                    f"{self._unavailable_text()} (during the call to {tool})", server=self.name
                )
            raise McpServerGarbage(
                f"MCP server {self.name!r} {why}; the call to {tool} failed", server=self.name
            )
        raise McpCallTimedOut(
            f"MCP server {self.name!r} did not answer {tool} within {limit:g} s", server=self.name
        )

    def _result_of(self, tool: str, task: asyncio.Future[Any]) -> mcp_types.CallToolResult:
        exc = task.exception()
        if exc is None:
            return tool_result(self.name, tool, task.result())
        failure = leaf(exc)
        if isinstance(failure, MCPError) and failure.code == mcp_types.CONNECTION_CLOSED:
            if self._stopping:
                raise McpServerUnavailable(
                    f"{self._unavailable_text()} (during the call to {tool})", server=self.name
                )
            if self.server.transport == "http":
                self._fail("the connection closed mid-session (the server went away?)")
            elif not (self.pid and pid_alive(self.pid)):
                self._fail(f"exited mid-session{self._garbage_note()}{self._tail_text()}")
            raise McpServerUnavailable(
                f"MCP server {self.name!r} closed the connection during the call to {tool}{self._tail_text()}",
                server=self.name,
            )
        raise call_error(self.name, tool, failure, limit=self.server.request_timeout_seconds)

    def _unavailable_text(self) -> str:
        if self.state == "failed":
            return f"MCP server {self.name!r} is not running: {self.error}"
        if self.state == "stopped":
            return f"MCP server {self.name!r} was stopped (released or restarted by a config change)"
        return f"MCP server {self.name!r} is not running ({self.state})"

    # --- stop -------------------------------------------------------------------------------

    async def stop(self, *, force: bool = False) -> None:
        """Stop the server and everything in its process group; idempotent (CO-34, FL-66).

        Graceful by default (the SDK closes stdin, waits, then signals the group); ``force``
        SIGKILLs the group first. Either way the group gets a SIGKILL at the end, so no
        descendant survives. Bounded to about 10 s.

        Args:
            force: Kill at once instead of letting the server exit on stdin EOF.
        """
        self._stopping = True
        if self.state in ("new", "starting", "running"):
            self.state = "stopped"  # a stop during the start is the caller's choice, not a failure
        if force:
            kill_group(self.pid)
        self._wake.set()
        if self._session is None and self._scope is not None:
            self._scope.cancel()  # still spawning or initializing: nothing to close gracefully
        task = self._task
        if task is not None and not task.done():
            try:
                async with asyncio.timeout(_STOP_BUDGET_SECONDS):
                    await asyncio.shield(task)
            except TimeoutError:
                kill_group(self.pid)
                if self._scope is not None:
                    self._scope.cancel()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_STOP_BUDGET_SECONDS / 2):
                        await asyncio.shield(task)
        kill_group(self.pid)
        stderr = self._stderr_task
        if stderr is not None and not stderr.done():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_STDERR_DRAIN_SECONDS):
                    await asyncio.shield(stderr)
            stderr.cancel()
        _log.debug("mcp_server_stopped", **self._fields(), pid=self.pid, state=self.state)
