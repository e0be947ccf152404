"""The node's pool (CO-34, FL-46, FL-65, FL-66, FL-115) with real processes: rows, release,
restart only on a moved fingerprint, and no child outliving a kill -9 of its node."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time

from shared import mcp
from tests.support.procs import REPO

from .conftest import Started
from .helpers import exists, server, time_server, tiny


async def gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not exists(pid):
            return True
        await asyncio.sleep(0.05)
    return not exists(pid)


def pids(tools: mcp.SeatTools) -> dict[str, int | None]:
    return {s.name: s.pid for s in tools.sessions}


async def test_rows_count_started_and_failed_per_server_with_one_reason(started: Started) -> None:
    pool = started.pool()
    servers = [time_server(), server("ghost", "crewlet-no-such-command-xyz")]
    ada = await pool.acquire("ada", servers)
    bob = await pool.acquire("bob", servers)
    assert ada.session("time") is not None and ada.session("time").running  # type: ignore[union-attr]
    assert pool.rows() == [
        {
            "server": "ghost",
            "started": 0,
            "failed": 2,
            "reason": "seat ada: command not found: 'crewlet-no-such-command-xyz' (not on the child's PATH)",
        },
        {"server": "time", "started": 2, "failed": 0, "reason": None},
    ]
    ada_pid = pids(ada)["time"]
    bob_pid = pids(bob)["time"]
    assert ada_pid is not None and bob_pid is not None and ada_pid != bob_pid

    await pool.release("ada")
    assert await gone(ada_pid)
    assert exists(bob_pid)
    assert pool.held() == ["bob"]
    assert pool.surface("ada") is None
    assert [(r["server"], r["started"], r["failed"]) for r in pool.rows()] == [
        ("ghost", 0, 1),
        ("time", 1, 0),
    ]
    await pool.release("ada")  # idempotent

    await pool.close()
    assert await gone(bob_pid)
    assert pool.rows() == []


async def test_a_server_that_exits_mid_session_counts_as_failed(started: Started) -> None:
    pool = started.pool()
    tools = await pool.acquire("ada", [tiny()])
    session = tools.session("tiny")
    assert session is not None and session.pid is not None
    os.kill(session.pid, signal.SIGKILL)
    for _ in range(100):
        if session.state == "failed":
            break
        await asyncio.sleep(0.05)
    (row,) = pool.rows()
    assert (row["started"], row["failed"]) == (0, 1)
    assert row["reason"] is not None and row["reason"].startswith("seat ada: exited mid-session")

    # before the seat's next turn the dead server is started again, once per interval
    assert await pool.revive("ada") == ["tiny"]
    again = tools.session("tiny")
    assert again is not None and again.running and again.pid != session.pid
    (row,) = pool.rows()
    assert (row["started"], row["failed"]) == (1, 0)
    os.kill(again.pid, signal.SIGKILL)
    for _ in range(100):
        if again.state == "failed":
            break
        await asyncio.sleep(0.05)
    assert await pool.revive("ada") == []  # a crash loop is not restarted on every turn


async def test_a_server_that_failed_to_start_is_not_revived(started: Started) -> None:
    pool = started.pool()
    await pool.acquire("ada", [server("ghost", "crewlet-no-such-command-xyz")])
    assert await pool.revive("ada") == []
    (row,) = pool.rows()
    assert (row["started"], row["failed"]) == (0, 1)


async def test_seat_surface_includes_the_shared_servers(started: Started) -> None:
    pool = started.pool()
    shared = dataclasses.replace(tiny("common"), shared=True)
    await pool.apply_shared([shared])
    await pool.acquire("ada", [time_server()])
    surface = pool.surface("ada")
    assert surface is not None
    assert surface.servers() == ["time", "common"]
    rows = {r["server"]: r["started"] for r in pool.rows()}
    assert rows == {"common": 1, "time": 1}
    common = pool.shared.session("common")
    assert common is not None and common.seat is None


async def test_apply_restarts_only_moved_fingerprints(started: Started) -> None:
    pool = started.pool()
    first = [time_server(), tiny(env={"TOKEN": "one"})]
    tools = await pool.acquire("ada", first)
    before = pids(tools)
    assert all(before.values())

    # the seat's credential for tiny rotates: tiny restarts, time keeps its process (FL-115)
    rotated = [time_server(), tiny(env={"TOKEN": "two"})]
    assert rotated[1].fingerprint != first[1].fingerprint
    await pool.acquire("ada", rotated)
    after = pids(tools)
    assert after["time"] == before["time"]
    assert after["tiny"] != before["tiny"]
    assert await gone(before["tiny"])  # type: ignore[arg-type]
    session = tools.session("tiny")
    assert session is not None
    from .conftest import first_text

    assert first_text(await session.call("env_value", {"name": "TOKEN"})) == "two"

    # a presentation-only change is swapped in without a restart
    cosmetic = [time_server(prefix="t_"), rotated[1]]
    await pool.acquire("ada", cosmetic)
    assert pids(tools) == after
    time_session = tools.session("time")
    assert time_session is not None and time_session.server.tool_prefix == "t_"

    # a server dropped from the resolution stops
    await pool.acquire("ada", [time_server(prefix="t_")])
    assert [s.name for s in tools.sessions] == ["time"]
    assert await gone(after["tiny"])  # type: ignore[arg-type]


async def test_a_failed_server_restarts_only_when_its_fingerprint_moves(started: Started) -> None:
    pool = started.pool()
    quitter = server("flaky", sys.executable, ["-c", "import sys; sys.exit(3)"])
    tools = await pool.acquire("ada", [quitter])
    assert pool.rows()[0]["failed"] == 1
    failed = tools.session("flaky")
    await pool.acquire("ada", [quitter])  # same fingerprint: left alone (FL-115)
    assert tools.session("flaky") is failed
    await pool.acquire("ada", [tiny("flaky")])  # moved: started again
    session = tools.session("flaky")
    assert session is not None and session is not failed
    assert session.running, session.error
    assert pool.rows() == [{"server": "flaky", "started": 1, "failed": 0, "reason": None}]


async def test_release_during_a_slow_start_does_not_wait_for_it(started: Started) -> None:
    pool = started.pool()
    acquire = asyncio.create_task(pool.acquire("ada", [server("slow", "sleep", ["60"], startup=60)]))
    for _ in range(200):
        held = pool.seat("ada")
        if held is not None and held.sessions and held.sessions[0].pid is not None:
            break
        await asyncio.sleep(0.02)
    held = pool.seat("ada")
    assert held is not None
    pid = held.sessions[0].pid
    assert pid is not None
    async with asyncio.timeout(20):  # a liveness bound, not a timing assert: far below the 60 s start
        await pool.release("ada", force=True)
        tools = await acquire
    assert await gone(pid)
    assert tools.sessions[0].state == "stopped"
    assert not tools.sessions[0].running


async def test_servers_of_a_seat_start_concurrently(started: Started) -> None:
    tools = started.seat("ada")
    await tools.start([time_server("t1"), time_server("t2"), tiny("t3")])
    assert [s.running for s in tools.sessions] == [True, True, True]
    assert len({s.pid for s in tools.sessions}) == 3


PARENT = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, {repo!r})
    from shared import mcp
    from tests.mcp.helpers import time_server

    async def main():
        pool = mcp.McpPool()
        tools = await pool.acquire("ada", [time_server()])
        session = tools.sessions[0]
        print("child=" + (str(session.pid) if session.running else "failed: " + str(session.error)), flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


def test_kill_9_of_the_node_leaves_no_child() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT.format(repo=str(REPO))],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        text=True,
    )
    child: int | None = None
    try:
        assert parent.stdout is not None
        line = ""
        while not line.startswith("child="):
            line = parent.stdout.readline()
            assert line, "the parent exited before starting its child"
        assert line.strip().removeprefix("child=").isdigit(), line
        child = int(line.strip().removeprefix("child="))
        assert exists(child)
        assert os.getpgid(child) != os.getpgid(parent.pid)  # its own group: killing the node's spares it
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 5
        while exists(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not exists(child), f"mcp-server-time {child} outlived its node"
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
            parent.wait(timeout=10)
        if parent.stdout is not None:
            parent.stdout.close()
        if child is not None and exists(child):
            os.killpg(child, signal.SIGKILL)
