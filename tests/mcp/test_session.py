"""One MCP server instance with real processes (CO-34): start, calls, faults, stop, environment."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog

from shared import mcp
from tests.support.procs import free_port
from tests.support.tiny_mcp import TINY_MCP

from .conftest import Started, first_text
from .helpers import exists, server, time_server, tiny


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


async def gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not exists(pid):
            return True
        await asyncio.sleep(0.05)
    return not exists(pid)


# --- mcp-server-time, the PyPI server --------------------------------------------------------


async def test_mcp_server_time_lists_calls_and_stop_leaves_no_process(started: Started) -> None:
    session = started.session(time_server())
    assert await session.start(), session.error
    assert session.running and session.error is None
    assert {"get_current_time", "convert_time"} <= {t.name for t in session.tools}
    pid = session.pid
    assert pid is not None and exists(pid)
    assert os.getpgid(pid) == pid  # it leads its own process group
    assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1].endswith(b"mcp-server-time")

    result = await session.call("get_current_time", {"timezone": "UTC"})
    assert '"timezone": "UTC"' in first_text(result)

    await session.stop()
    assert session.state == "stopped"
    assert await gone(pid)
    await session.stop()  # idempotent
    with pytest.raises(mcp.McpServerUnavailable, match="was stopped"):
        await session.call("get_current_time", {"timezone": "UTC"})


async def test_child_environment_is_the_allow_list_plus_server_env(
    started: Started, engine_marker: Callable[[], str]
) -> None:
    marker = engine_marker()
    session = started.session(time_server(env={"SEAT_TOKEN": "seat-value"}))
    assert await session.start(), session.error
    assert session.pid is not None
    env = environ_of(session.pid)
    assert marker not in env
    assert env["SEAT_TOKEN"] == "seat-value"
    assert set(env) <= {*mcp.CHILD_ENV_ALLOWLIST, "SEAT_TOKEN"}
    assert env["PATH"] == os.environ["PATH"]


async def test_tiny_server_reports_its_environment(
    started: Started, engine_marker: Callable[[], str]
) -> None:
    marker = engine_marker()
    session = started.session(tiny(env={"MINE": "from-mcp-env"}))
    assert await session.start(), session.error
    seen = await session.call("env_value", {"name": marker})
    assert seen.structured_content == {"result": None}
    mine = await session.call("env_value", {"name": "MINE"})
    assert first_text(mine) == "from-mcp-env"
    logname = await session.call("env_value", {"name": "LOGNAME"})  # the SDK's default, dropped
    assert logname.structured_content == {"result": None}


# --- failed starts: the seat runs without the server ------------------------------------------


async def test_command_not_found_fails_with_reason(started: Started) -> None:
    session = started.session(server("ghost", "crewlet-no-such-command-xyz"))
    assert not await session.start()
    assert session.state == "failed"
    assert session.error is not None and "command not found: 'crewlet-no-such-command-xyz'" in session.error
    assert session.pid is None
    with pytest.raises(mcp.McpServerUnavailable, match="command not found"):
        await session.call("anything", {})


async def test_command_that_exits_at_once_fails_with_its_last_stderr_lines(started: Started) -> None:
    code = "import sys; sys.stderr.write('config error: no token\\n'); sys.exit(3)"
    session = started.session(server("quitter", sys.executable, ["-c", code], startup=10))
    assert not await session.start()
    assert session.error is not None
    assert "exited before answering initialize" in session.error
    assert "config error: no token" in session.error
    assert session.pid is not None and await gone(session.pid)


async def test_command_that_hangs_at_start_fails_after_the_startup_timeout(started: Started) -> None:
    session = started.session(server("sleeper", "sleep", ["60"], startup=1))
    assert not await session.start()
    assert session.error == "did not answer initialize within 1 s"
    assert session.pid is not None and await gone(session.pid)


async def test_garbage_instead_of_json_rpc_at_start_is_named_in_the_reason(started: Started) -> None:
    code = "import time; print('Welcome to my server!', flush=True); time.sleep(60)"
    session = started.session(server("chatty", sys.executable, ["-c", code], startup=2))
    assert not await session.start()
    assert session.error is not None
    assert session.error.startswith("did not answer initialize within 2 s")
    assert "non-JSON-RPC output on stdout: 'Welcome to my server!'" in session.error
    assert session.pid is not None and await gone(session.pid)


# --- calls that go wrong -----------------------------------------------------------------------


async def test_garbage_on_stdout_during_a_call_fails_that_call_not_the_node(started: Started) -> None:
    session = started.session(tiny(request=30))
    assert await session.start(), session.error
    with pytest.raises(mcp.McpServerGarbage, match="non-JSON-RPC output on stdout: 'this is not JSON-RPC'"):
        await session.call("garble", {})
    assert first_text(await session.call("echo", {"text": "still here"})) == "still here"


async def test_server_killed_mid_session_answers_a_readable_tool_error(started: Started) -> None:
    session = started.session(tiny())
    assert await session.start(), session.error
    assert session.pid is not None
    os.kill(session.pid, signal.SIGKILL)
    with pytest.raises(mcp.McpServerUnavailable, match="'tiny'"):
        await session.call("echo", {"text": "hello?"})
    assert await gone(session.pid)


async def test_server_dying_during_a_call_answers_a_readable_tool_error(started: Started) -> None:
    session = started.session(tiny())
    assert await session.start(), session.error
    with pytest.raises(mcp.McpServerUnavailable, match="during the call to die") as caught:
        await session.call("die", {"code": 4})
    assert "tiny: dying with 4" in str(caught.value)
    for _ in range(100):
        if session.state == "failed":
            break
        await asyncio.sleep(0.05)
    assert session.state == "failed"
    assert session.error is not None and session.error.startswith("exited mid-session")
    with pytest.raises(mcp.McpServerUnavailable, match="is not running: exited mid-session"):
        await session.call("echo", {"text": "x"})


async def test_a_call_that_overruns_the_request_timeout_is_a_timeout_error(started: Started) -> None:
    session = started.session(tiny(request=1))
    assert await session.start(), session.error
    with pytest.raises(mcp.McpCallTimedOut, match="did not answer sleep within 1 s"):
        await session.call("sleep", {"seconds": 30})
    assert first_text(await session.call("echo", {"text": "next"})) == "next"


async def test_a_call_in_flight_when_the_server_is_stopped_fails_readably(started: Started) -> None:
    session = started.session(tiny(request=60))
    assert await session.start(), session.error
    pending = asyncio.create_task(session.call("sleep", {"seconds": 60}))
    await asyncio.sleep(0.3)
    await session.stop()  # a restart by an apply, or a release (FL-116)
    with pytest.raises(mcp.McpServerUnavailable, match="was stopped"):
        await pending


async def test_a_tool_that_reports_an_error_is_a_tool_error_with_its_text(started: Started) -> None:
    session = started.session(tiny())
    assert await session.start(), session.error
    with pytest.raises(mcp.McpToolReturnedError, match="no such repository"):
        await session.call("fail", {"message": "no such repository"})


async def test_unknown_tool_on_the_server_is_a_readable_error(started: Started) -> None:
    session = started.session(tiny())
    assert await session.start(), session.error
    with pytest.raises(mcp.McpCallFailed, match="nope"):
        await session.call("nope", {})


# --- stderr becomes debug records --------------------------------------------------------------


@pytest.fixture
def debug_logs() -> Iterator[list[MutableMapping[str, Any]]]:
    old = structlog.get_config()["wrapper_class"]
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with structlog.testing.capture_logs() as entries:
            yield entries
    finally:
        structlog.configure(wrapper_class=old)


async def test_stderr_lines_are_debug_records_naming_server_and_seat(
    started: Started, debug_logs: list[MutableMapping[str, Any]]
) -> None:
    session = started.session(tiny("noisy", "--stderr-lines", "3"), seat="ada")
    assert await session.start(), session.error
    lines = [e for e in debug_logs if e["event"] == "mcp_server_stderr"]
    assert [(e["server"], e["seat"], e["line"], e["log_level"]) for e in lines[:3]] == [
        ("noisy", "ada", f"tiny stderr line {i}", "debug") for i in range(3)
    ]
    assert session.stderr_tail[:3] == [f"tiny stderr line {i}" for i in range(3)]


async def test_a_failed_start_logs_its_reason_and_last_lines(
    started: Started, debug_logs: list[MutableMapping[str, Any]]
) -> None:
    code = "import sys; sys.stderr.write('line one\\nline two\\n'); sys.exit(1)"
    session = started.session(server("broken", sys.executable, ["-c", code]), seat="bob")
    assert not await session.start()
    failed = [e for e in debug_logs if e["event"] == "mcp_server_failed"]
    assert len(failed) == 1
    assert failed[0]["server"] == "broken" and failed[0]["seat"] == "bob"
    assert failed[0]["stderr_tail"] == ["line one", "line two"]
    assert failed[0]["log_level"] == "warning"


# --- streamable HTTP --------------------------------------------------------------------------


def wait_port(port: int, proc: subprocess.Popen[bytes], within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the tiny HTTP server exited"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


@pytest.fixture
def http_server() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(TINY_MCP), "--http", "--port", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


async def test_streamable_http_server_gets_headers_and_calls(
    started: Started, http_server: tuple[str, subprocess.Popen[bytes]]
) -> None:
    url, proc = http_server
    session = started.session(
        server("web", None, transport="http", url=url, headers={"X-Seat-Token": "tok-1"})
    )
    assert await session.start(), session.error
    assert session.pid is None
    assert "echo" in {t.name for t in session.tools}
    assert first_text(await session.call("header_value", {"name": "x-seat-token"})) == "tok-1"
    assert first_text(await session.call("echo", {"text": "over http"})) == "over http"

    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    with pytest.raises(mcp.McpCallFailed, match="'web'"):
        await session.call("echo", {"text": "anyone?"})
    assert session.state == "failed"
    with pytest.raises(mcp.McpServerUnavailable, match="is not running: the connection closed"):
        await session.call("echo", {"text": "anyone?"})


async def test_http_server_that_is_not_there_fails_with_reason(started: Started) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    session = started.session(server("web", None, transport="http", url=url, startup=5))
    assert not await session.start()
    assert session.error is not None and "ConnectError" in session.error


async def test_stop_kills_the_whole_process_group(started: Started) -> None:
    script = f"sleep 600 & echo grandchild=$! >&2; exec {sys.executable} {TINY_MCP}"
    session = started.session(server("forking", "sh", ["-c", script]))
    assert await session.start(), session.error
    (line,) = [line for line in session.stderr_tail if line.startswith("grandchild=")]
    grandchild = int(line.removeprefix("grandchild="))
    assert exists(grandchild) and os.getpgid(grandchild) == session.pid
    await session.stop()
    assert await gone(grandchild)
