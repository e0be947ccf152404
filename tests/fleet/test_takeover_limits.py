"""FL-56's claim limiter counts what it was sized against (issue 13): forking MCP process trees.

Two fleets of three nodes on a real 3-member cluster, lease TTL 6 s, nodes booted as an
orchestrator would:

- 180 seats without MCP servers (60 per node): ``kill -9`` of one node, and its 60 seats are
  re-owned by the two survivors within the TTL plus two sweeps (the old four-per-sweep limiter
  needed eight sweeps for the 30 seats each survivor takes);
- 24 seats with a per-seat stdio MCP server each: every node starts at most four MCP children in
  any one sweep window (5 s), at boot (eight each: two windows) and during the takeover, and the
  takeover still completes.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fleet.harness import SWEEP, Fleet, company_doc, wait_for
from tests.support.procs import REPO, write_yaml

pytestmark = pytest.mark.timeout(300)  # three nodes boot, converge, lose one and converge again

TTL = 6.0
TINY = str(REPO / "tests" / "support" / "tiny_mcp.py")


def _fleet(root: Path, seats: int, *, mcp: bool) -> Fleet:
    """A fleet whose company has ``seats`` extra agent seats (and no others), TTL :data:`TTL`."""
    f = Fleet(root)
    try:
        for path in f.files.values():
            data = yaml.safe_load(path.read_text())
            data["coordination"]["lease_ttl_seconds"] = TTL
            data["logging"]["level"] = "info"  # 180 seats at debug is mostly fetch noise
            write_yaml(path, data)
        doc = company_doc(f.llm)
        handles = [f"w{i:03d}" for i in range(seats)]
        for unit in doc["units"]:
            unit["roles"] = [r for r in unit["roles"] if r.get("kind") == "human"]
            unit.pop("lead", None)
            unit["children"] = []
        doc["units"] = doc["units"][:1]
        doc["units"][0]["roles"] += [{"name": f"Worker {h}", "handle": h, "goal": "Wait"} for h in handles]
        doc.pop("roles", None)
        doc.pop("integrations", None)
        doc["providers"]["llm"].pop("offline")  # its script names seats this company has not
        if mcp:
            doc["mcp_servers"] = [
                {"name": "tiny", "command": sys.executable, "args": [TINY], "startup_timeout_seconds": 30}
            ]
        f.company = write_yaml(root / "company.yaml", doc)
        f.seats = tuple(handles)
        return f
    except BaseException:
        f.stop()
        raise


def _boot(f: Fleet) -> None:
    """Start the three nodes together, as an orchestrator does, restarting one that exits early.

    Booted one after another, the first node would claim every seat alone and hand the surplus
    back at two releases per sweep (FL-56) — minutes for 180 seats. On a fresh cluster a node
    booting beside its peers can exit meeting a bucket still electing its leader (see
    tests/fleet/conftest.py); an orchestrator restarts it, and so does this.
    """
    for name in f.names:
        f.start(name)
    for name in f.names:
        try:
            f.nodes[name].wait_ready(90)
        except AssertionError:
            if f.nodes[name].popen.poll() is None:
                raise
            f.start(name).wait_ready(90)


def _starts_per_window(f: Fleet, name: str) -> int:
    """The most MCP children node ``name`` started within any one sweep window."""
    times = sorted(
        datetime.fromisoformat(e["timestamp"]).timestamp() for e in f.events(name, "mcp_server_started")
    )
    return max((sum(1 for u in times if t <= u < t + SWEEP) for t in times), default=0)


def _end(f: Fleet) -> None:
    """Stop everything by PID; the nodes are killed, not drained (a drain of 90 seats is not what
    these tests are about, and their MCP children die with them either way)."""
    for node in f.procs.values():
        node.signal(signal.SIGKILL)
    f.stop()


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[Fleet]:
    f = _fleet(tmp_path, 180, mcp=False)
    try:
        _boot(f)
        yield f
    finally:
        _end(f)


@pytest.fixture
def spawning(tmp_path: Path) -> Iterator[Fleet]:
    f = _fleet(tmp_path, 24, mcp=True)
    try:
        _boot(f)
        yield f
    finally:
        _end(f)


def _kill_busiest(f: Fleet) -> tuple[str, list[str]]:
    held = f.held()
    victim = max(held, key=lambda n: len(held[n]))
    os.kill(f.nodes[victim].pid, signal.SIGKILL)
    f.nodes[victim].wait(10)
    return victim, held[victim]


def test_seats_without_mcp_servers_are_taken_over_within_the_ttl_and_two_sweeps(plain: Fleet) -> None:
    plain.wait_converged(120)
    assert sorted(len(s) for s in plain.held().values()) == [60, 60, 60]
    victim, lost = _kill_busiest(plain)
    killed_at = time.monotonic()
    survivors = tuple(n for n in plain.names if n != victim)
    plain.wait_converged(60, nodes=survivors)
    took = time.monotonic() - killed_at
    owners = plain.owners()
    assert all(owners[s] in survivors for s in lost)
    assert took <= TTL + 2 * SWEEP, f"{len(lost)} seats re-owned in {took:.1f} s"


def test_seats_with_stdio_servers_start_at_most_four_children_per_node_per_sweep(spawning: Fleet) -> None:
    spawning.wait_converged(120)
    victim, lost = _kill_busiest(spawning)
    survivors = tuple(n for n in spawning.names if n != victim)
    spawning.wait_converged(90, nodes=survivors)
    share = math.ceil(len(spawning.seats) / 2)

    def started_everywhere() -> dict[str, int] | None:
        counts = {n: len(spawning.events(n, "mcp_server_started")) for n in survivors}
        return counts if all(c >= share for c in counts.values()) else None

    counts = wait_for("every held seat's child started", started_everywhere, timeout=30)
    for name in spawning.names:
        assert _starts_per_window(spawning, name) <= 4, (name, counts)
    failed: list[dict[str, Any]] = [e for n in survivors for e in spawning.events(n, "mcp_server_failed")]
    assert failed == []
