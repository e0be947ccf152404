"""The process side of a stdio MCP child: its environment, its launch line, its stderr, its end
(CO-34, FL-66).

Kept apart from the session so the session reads as the SDK conversation only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from ._resolve import ResolvedServer

__all__ = [
    "CHILD_ENV_ALLOWLIST",
    "child_environment",
    "kill_group",
    "launcher_args",
    "pid_alive",
    "read_lines",
]

CHILD_ENV_ALLOWLIST = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "SHELL", "TERM")
"""The only variables of the node's environment a stdio child inherits (CO-34)."""

_LAUNCHER = Path(__file__).with_name("_launcher.py")
_LINE_LIMIT = 1 << 20


def child_environment(server: ResolvedServer) -> dict[str, str]:
    """Return the exact environment of a stdio child of ``server`` (CO-34).

    The allow-listed variables the node has set (:data:`CHILD_ENV_ALLOWLIST`; ``PATH`` falls back
    to :data:`os.defpath`), overlaid by the server's resolved ``env`` (entry ``env`` + the seat's
    ``mcp_env``). Nothing else of the engine's environment.
    """
    env = {k: os.environ[k] for k in CHILD_ENV_ALLOWLIST if k in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update(server.env)
    return env


def launcher_args(command: str, args: tuple[str, ...], env: dict[str, str]) -> tuple[str, list[str]]:
    """Return ``(executable, argv)`` running ``command`` through :mod:`shared.mcp._launcher`.

    The launcher keeps exactly the names of ``env`` (the SDK adds a few defaults of its own),
    arms the parent-death signal against this process, and execs ``command``.
    """
    return sys.executable, [
        "-I",
        "-S",
        str(_LAUNCHER),
        str(os.getpid()),
        ",".join(sorted(env)),
        command,
        *args,
    ]


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (``/proc/<pid>/stat``)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def kill_group(pid: int | None) -> None:
    """SIGKILL the process group led by ``pid``; a gone group (or None) is a no-op."""
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def read_lines(fd: int, on_line: Callable[[str], None]) -> None:
    """Read the pipe ``fd`` (taking ownership) line by line until EOF, calling ``on_line`` with
    each line decoded as UTF-8 (bad bytes replaced) without its line end. A line longer than
    1 MiB arrives in pieces."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_LINE_LIMIT)
    pipe = os.fdopen(fd, "rb", buffering=0)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    try:
        while True:
            try:
                raw = await reader.readline()
            except ValueError:  # longer than the limit: take it in pieces
                raw = await reader.read(_LINE_LIMIT)
            if not raw:
                return
            on_line(raw.decode("utf-8", errors="replace").rstrip("\r\n"))
    finally:
        transport.close()
