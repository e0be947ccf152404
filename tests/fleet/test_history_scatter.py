"""ES-79 with real processes: ``GET /turns`` and the event reads on one node gather every live node's history.

One fleet for the module (nodes ``a``, ``b``, ``c`` with every role on a 3-member cluster, the
scripted model), with a 20 s lease TTL instead of the harness's 3 s so that a node killed with
SIGKILL stays in the fleet view (its presence lease has not aged out) while the test reads: the
reads then name it in ``coverage.missing`` and raise ``history_partial``. The first test runs a turn
on each node and reads them all through ``a``; the second kills ``c`` and reads again.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.fleet.harness import Fleet
from tests.support.procs import write_yaml

pytestmark = pytest.mark.fleet

LEASE_TTL = 20.0
"""Lease TTL of this module's nodes: long enough that a killed node is still "live" while we read."""


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Three converged nodes ``a``, ``b``, ``c`` (all roles), booted together."""
    f = Fleet(tmp_path_factory.mktemp("history"))
    try:
        for path in f.files.values():
            doc = yaml.safe_load(path.read_text())
            doc["coordination"]["lease_ttl_seconds"] = LEASE_TTL
            write_yaml(path, doc)
        f.boot()  # all three at once, as an orchestrator starts them
        f.wait_converged(60)
        yield f
    finally:
        f.stop()


@pytest.fixture(scope="module")
def ran(fleet: Fleet) -> dict[str, dict[str, Any]]:
    """One finished turn per node, each triggered through ``a``: node → its turn row (read on the node)."""
    owners = fleet.owners()
    seat_of = {node: next(s for s, n in sorted(owners.items()) if n == node) for node in ("a", "b", "c")}
    ids = [fleet.post_message(seat, f"hello from {node}'s seat", via="a") for node, seat in seat_of.items()]
    fleet.wait_handled(*ids, timeout=60)
    out: dict[str, dict[str, Any]] = {}
    for node, seat in seat_of.items():

        def finished(node: str = node, seat: str = seat) -> dict[str, Any] | None:
            r = fleet.nodes["a"].get(f"/turns?seat={seat}&limit=10")
            rows = [t for t in r.json()["turns"] if t["node"] == node and t["outcome"] != "running"]
            return rows[0] if rows else None

        deadline = time.monotonic() + 30
        while (row := finished()) is None:
            assert time.monotonic() < deadline, f"no finished turn of {seat} on {node}"
            time.sleep(0.2)
        out[node] = row
    return out


def test_turns_on_one_node_list_the_turns_every_node_ran(
    fleet: Fleet, ran: dict[str, dict[str, Any]]
) -> None:
    a = fleet.nodes["a"]
    body = a.get("/turns?limit=500").json()
    assert body["node"] == "a"
    assert body["coverage"] == {
        "answered": ["a", "b", "c"],
        "missing": [],
        "other_version": [],
        "reasons": {},
        "partial": False,
    }
    rows = body["turns"]
    assert body["count"] == len(rows)
    by_id = {t["turn_id"]: t for t in rows}
    for node, turn in ran.items():  # the turns that ran on b and c, read on a
        assert by_id[turn["turn_id"]]["node"] == node
    keys = [(t["started_at"], t["turn_id"]) for t in rows]
    assert keys == sorted(keys, reverse=True)  # merged newest first
    # the filters and the limit hold across the fleet
    one = a.get(f"/turns?seat={ran['c']['seat']}&limit=1").json()["turns"]
    assert len(one) == 1 and one[0]["seat"] == ran["c"]["seat"]
    # one turn that ran on c, with its whole record, asked of a
    got = a.get(f"/turns/{ran['c']['turn_id']}")
    assert got.status_code == 200, got.text
    assert got.json()["node"] == "c" and got.json()["record"]["turn_id"] == ran["c"]["turn_id"]
    nowhere = a.get("/turns/no-such-turn")
    assert nowhere.status_code == 404 and nowhere.json()["error"] == "unknown_turn"
    # token rollups summed over the fleet
    tokens = a.get("/tokens/breakdown").json()
    seats = {r["seat"] for r in tokens["seat_day"]}
    assert {t["seat"] for t in ran.values()} <= seats
    assert tokens["coverage"]["answered"] == ["a", "b", "c"]
    # the event log of every data node (all three hold data here)
    events = a.get("/events?limit=50").json()
    assert events["coverage"]["answered"] == ["a", "b", "c"] and not events["coverage"]["missing"]


def test_a_stopped_node_is_named_missing_and_raises_history_partial(
    fleet: Fleet, ran: dict[str, dict[str, Any]]
) -> None:
    a = fleet.nodes["a"]
    fleet.nodes["c"].signal(signal.SIGKILL)  # its presence lease lives on for up to LEASE_TTL
    assert fleet.nodes["c"].wait(10) is not None
    killed = time.monotonic()

    body = a.get("/turns?limit=500", timeout=15).json()
    cov = body["coverage"]
    assert cov["missing"] == ["c"] and cov["answered"] == ["a", "b"] and cov["partial"], cov
    ids = {t["turn_id"] for t in body["turns"]}
    assert ran["b"]["turn_id"] in ids and ran["c"]["turn_id"] not in ids

    trace = a.get(f"/events/trace/{ran['c']['trace_id'] or 'no-trace'}", timeout=15).json()
    assert trace["coverage"]["missing"] == ["c"] and trace["coverage"]["partial"], trace

    # c's turn might be on c: not "unknown", but 503 with the coverage
    lost = a.get(f"/turns/{ran['c']['turn_id']}", timeout=15)
    assert lost.status_code == 503, lost.text
    assert lost.json()["error"] == "history_partial"
    assert lost.json()["detail"]["coverage"]["missing"] == ["c"]

    estate = a.get("/estate", timeout=15).json()
    assert "history_partial" in estate["alarms"], estate["alarms"]
    assert estate["alarm_detail"]["history_partial"]["measurement"]["missing"] == ["c"]
    assert time.monotonic() - killed < LEASE_TTL, "the reads must land while c's lease is live"
