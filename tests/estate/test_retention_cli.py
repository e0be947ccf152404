"""``GET /estate`` (FL-138) and ``crewlet retention status|snapshots`` (ES-49, ES-86) against a live node.

One data node on a real nats-server, with test timings (``CREWLET_RETENTION_TEST_TIMINGS=1``) and a
two-second trim tick, so the retention duty publishes its floors quickly. No backup is ever taken:
``backup_floor`` blocks the trim, so ``status`` prints ES-49's sentence before the tables and exits
1 naming the term. A second token without ``state:read`` shows the 403; a closed port the
unreachable node (exit 2).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import nats
import pytest

from crewlet.retention_cli import human_bytes, problems
from shared import coordination
from shared.estate.life import read_backup_floor
from tests.support.procs import REPO, TOKEN, NatsServer, Node, free_port, node_file

H = {"Authorization": f"Bearer {TOKEN}"}
WEAK = "weak-token-0123456789-abcdefghijklm"
FLOOR_WAIT = 90.0
"""Seconds to wait for the retention duty's first published floor."""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path_factory.mktemp("nats"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, broker: NatsServer) -> Iterator[Node]:
    d = tmp_path_factory.mktemp("r1")
    port = free_port()
    cfg = node_file(
        d,
        node_id="r1",
        port=port,
        stream={
            "type": "nats",
            "url": broker.url,
            "tracker_retention": {"snapshot_interval": "1s", "min_age": "3s", "rejoin_window": "20m"},
        },
        coordination={"type": "embedded-kv"},
        api={
            "auth": {
                "tokens": [
                    {"id": "test", "token": "${CREWLET_API_TOKEN}"},
                    {"id": "weak", "token": WEAK, "grants": ["config:read"]},
                ]
            }
        },
        retention={"trim_tick": "2s", "backup_owner": "ops-team"},
    )
    n = Node(
        ["node", "--node", str(cfg), "--company", str(REPO / "examples" / "company.yaml")],
        dir=d,
        port=port,
        env={"CREWLET_RETENTION_TEST_TIMINGS": "1"},
    )
    try:
        n.wait_ready(60)
        yield n
    finally:
        n.stop()


def _cli(*args: str, url: str, token: str = TOKEN) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CREWLET_API_TOKEN": token, "CREWLET_URL": url, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "crewlet.cli", "retention", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=REPO,
    )


def _estate(node: Node) -> dict[str, Any]:
    r = httpx.get(node.url + "/estate", headers=H, timeout=15.0)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _wait(node: Node, pred: Any, timeout: float, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    view = _estate(node)
    while not pred(view):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what} not seen in {timeout} s; last GET /estate:\n{json.dumps(view, indent=1)}"
            )
        time.sleep(0.5)
        view = _estate(node)
    return view


def test_get_estate_single_node_is_whole(node: Node) -> None:
    """FL-138: one data node answers ``whole`` (layout 0) with its own rows on both logs."""
    view = _wait(
        node,
        lambda v: (
            {(r["node"], r["domain"]) for r in v["nodes"]} >= {("r1", "tracker"), ("r1", "pages")}
            and all(r["store_bytes"] for r in v["nodes"])
        ),
        30,
        "r1's positions rows with store_bytes",
    )
    assert view["layout"] == 0
    assert view["placement"] == "whole"
    assert view["asked"] == "r1"
    rows = {r["domain"]: r for r in view["nodes"]}
    for domain in ("tracker", "pages"):
        row = rows[domain]
        assert row["node"] == "r1"
        assert row["stale"] is False
        assert row["live"] is True
        assert row["store_bytes"] > 0
        assert row["wal_bytes"] is not None and row["wal_bytes"] >= 0
        assert row["applied_through"] <= row["log_last"]
        lg = view["logs"][domain]
        assert lg["stream"] == row["stream"]
        assert lg["max_bytes"] == -1  # the test broker grants the logs no ceiling
        assert lg["reserve_bytes"] is None and lg["headroom_fraction"] is None
        assert lg["last_seq"] >= row["applied_through"]
        assert isinstance(lg["bytes"], int) and lg["bytes"] >= 0
    assert set(view["floors"]) == {"tracker", "pages"}
    assert isinstance(view["holds"], list) and isinstance(view["backups"], list)
    assert isinstance(view["alarms"], list)
    assert view["retention"]["rejoin_window"] == 1200.0
    assert view["unreadable"] == []


def test_get_estate_needs_state_read(node: Node) -> None:
    assert httpx.get(node.url + "/estate", timeout=10).status_code == 401
    r = httpx.get(node.url + "/estate", headers={"Authorization": f"Bearer {WEAK}"}, timeout=10)
    assert r.status_code == 403
    assert "state:read" in r.text


def test_status_with_blocked_trim_exits_1_naming_backup_floor(node: Node) -> None:
    """ES-49/ES-86: no backup → the duty's floor says ``blocked_by: backup_floor``; the sentence comes
    before any table; exit 1 with the blocking term and its remedy on stderr."""
    view = _wait(
        node,
        lambda v: isinstance(v["floors"].get("tracker"), dict) and v["floors"]["tracker"].get("blocked_by"),
        FLOOR_WAIT,
        "the retention duty's tracker floor",
    )
    assert "backup_floor" in view["floors"]["tracker"]["blocked_by"]
    assert view["floors"]["tracker"]["trim_to"] == 0
    out = _cli("status", url=node.url)
    assert out.returncode == 1, out.stdout + out.stderr
    first_table = out.stdout.index("logs")
    sentence = out.stdout.index("No backup")
    assert sentence < first_table, out.stdout
    assert "backup_floor blocks the trim of" in out.stdout
    assert "ops-team" in out.stdout
    assert "trim_blocked on tracker: blocked_by" in out.stderr
    assert "backup_floor" in out.stderr and "crewlet backup" in out.stderr
    for col in ("SEQ", "applied_through", "GEN", "TRIM FLOOR", "FIRST", "LIVE", "LOG DIVERGED", "blocked_by"):
        assert col in out.stdout, col
    for col in ("bytes", "max_bytes", "reserve_bytes", "headroom_fraction"):
        assert col in out.stdout, col
    assert "unlimited" in out.stdout
    assert "tracker copies" in out.stdout and "pages copies" in out.stdout
    assert "storage" in out.stdout and "rejoin window: 20m" in out.stdout
    assert "r1" in out.stdout


def test_status_json_and_exit_code_follow_the_answer(node: Node) -> None:
    """``--json`` prints GET /estate's answer; the exit code is 1 exactly when alarms or a blocked trim."""
    out = _cli("status", "--json", url=node.url)
    view = json.loads(out.stdout)
    assert view["placement"] == "whole"
    expected = 1 if problems(view) else 0
    assert out.returncode == expected, out.stderr
    for kind in view["alarms"]:
        assert f"alarm {kind}:" in out.stderr and "remedy:" in out.stderr


def test_snapshots_lists_each_node(node: Node) -> None:
    out = _cli("snapshots", url=node.url)
    assert out.returncode == 0, out.stderr
    assert "snapshots" in out.stdout
    assert "r1" in out.stdout and "tracker" in out.stdout and "pages" in out.stdout
    js = json.loads(_cli("snapshots", "--json", url=node.url).stdout)
    assert {(r["node"], r["domain"]) for r in js} >= {("r1", "tracker"), ("r1", "pages")}


def test_refused_token_and_unreachable_node_exit_2(node: Node) -> None:
    weak = _cli("status", url=node.url, token=WEAK)
    assert weak.returncode == 2
    assert "403" in weak.stderr and "state:read" in weak.stderr
    bad = _cli("status", url=node.url, token="not-a-token")
    assert bad.returncode == 2 and "401" in bad.stderr
    gone = _cli("status", url=f"http://127.0.0.1:{free_port()}")
    assert gone.returncode == 2
    assert "cannot reach the node" in gone.stderr
    none = _cli("snapshots", url=node.url, token="")
    assert none.returncode == 2 and "no API token" in none.stderr


def test_ack_records_the_operator_backup_floor_and_refuses_bad_input(node: Node, broker: NatsServer) -> None:
    """``crewlet retention ack`` (ES-49): the operator's backup position, checked and never lowered;
    the trim's ``backup_floor`` term reads it in ``operator`` mode."""
    last = int(_estate(node)["logs"]["tracker"]["last_seq"])
    assert last > 0
    ok = _cli("ack", "--stream", "CREWLET_TRACKER_LOG", "--position", str(last), url=node.url)
    assert ok.returncode == 0, ok.stderr
    assert f"backed up through {last}" in ok.stdout
    for args, words in (
        (("--stream", "CREWLET_USAGE_LOG", "--position", "1"), "stream must be one of"),
        (("--stream", "CREWLET_TRACKER_LOG", "--position", str(last + 1000)), "past"),
        (("--stream", "CREWLET_TRACKER_LOG", "--position", "-1"), "at least 0"),
        (("--stream", "CREWLET_TRACKER_LOG", "--position", "0"), "never moves down"),
    ):
        refused = _cli("ack", *args, url=node.url)
        assert refused.returncode == 2, (args, refused.stdout)
        assert words in refused.stderr, (args, refused.stderr)
    weak = _cli("ack", "--stream", "CREWLET_TRACKER_LOG", "--position", str(last), url=node.url, token=WEAK)
    assert weak.returncode == 2 and "403" in weak.stderr

    async def term() -> Any:
        nc = await nats.connect(broker.url)
        try:
            coord = await coordination.provision(nc.jetstream())
            return await read_backup_floor(coord, "tracker", mode="operator", max_age=3600.0)
        finally:
            await nc.close()

    assert asyncio.run(term()) == last


def test_problem_lines_name_measurement_and_remedy() -> None:
    """The stderr lines of ``status`` from an answer (no server: the shape GET /estate answers)."""
    view = {
        "alarms": ["wal_large"],
        "alarm_detail": {
            "wal_large": {"since": 1, "measurement": {"wal_bytes": 2 << 30}, "remedy": "find the long reader"}
        },
        "floors": {
            "tracker": {"floor": 10, "blocked_by": ["backup_floor"], "terms": {"backup_floor": "unreadable"}},
            "pages": None,
        },
        "retention": {"backup_owner": "ops"},
    }
    lines = problems(view)
    assert lines[0] == f"alarm wal_large: wal_bytes={2 << 30}; remedy: find the long reader"
    assert lines[1].startswith("trim_blocked on tracker: blocked_by backup_floor (backup_floor=unreadable)")
    assert "(backups are kept by ops)" in lines[1]
    assert problems({"alarms": [], "floors": {"tracker": {"blocked_by": []}}}) == []
    assert human_bytes(-1) == "unlimited" and human_bytes(None) == "-" and human_bytes(3 << 20) == "3.0 MiB"
