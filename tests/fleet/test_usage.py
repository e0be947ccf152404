"""Usage days with real processes (ES-69, AG-47, AG-48): a node's spend outlives the node.

One fleet for the module: nodes ``a``, ``b``, ``c`` with every role on a 3-member cluster, the
scripted model, and a 1 s usage tick (``CREWLET_USAGE_TICK_SECONDS``) instead of 15 s. Each node
runs a turn; every data node's copy then answers every node's day from its own copy. Then ``c`` is
drained (SIGTERM) and never comes back: ``GET /usage`` on ``a`` still answers ``c``'s spend, and
the org total equals the tokens of every turn recorded before ``c`` left. Bad parameters are
refused with 400 naming them; ``crewlet usage`` prints the same answer.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from crewlet.cli import app
from tests.fleet.harness import Fleet, wait_for
from tests.support.procs import TOKEN

pytestmark = pytest.mark.fleet


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Three converged nodes ``a``, ``b``, ``c`` (all roles), publishing usage every second."""
    f = Fleet(tmp_path_factory.mktemp("usage"))
    try:
        for name in f.names:
            f.env[name] = {"CREWLET_USAGE_TICK_SECONDS": "1"}
        f.boot()
        f.wait_converged(60)
        yield f
    finally:
        f.stop()


@pytest.fixture(scope="module")
def spent(fleet: Fleet) -> dict[str, int]:
    """One finished turn per node: node → the tokens (input + output) of its finished turns."""
    owners = fleet.owners()
    seat_of = {node: next(s for s, n in sorted(owners.items()) if n == node) for node in ("a", "b", "c")}
    ids = [fleet.post_message(seat, f"usage from {node}'s seat", via="a") for node, seat in seat_of.items()]
    fleet.wait_handled(*ids, timeout=60)

    def finished() -> dict[str, int] | None:
        with fleet.api("a") as c:
            rows = c.get("/turns?limit=500").json()["turns"]
        if any(t["outcome"] == "running" for t in rows) or {t["node"] for t in rows} != {"a", "b", "c"}:
            return None
        out: dict[str, int] = {}
        for t in rows:
            out[t["node"]] = out.get(t["node"], 0) + t["tokens"]["total"]
        return out

    tokens = wait_for("a finished turn on every node", finished, timeout=30)
    assert all(v > 0 for v in tokens.values()), tokens
    return tokens


def by_node(fleet: Fleet, asked: str) -> dict[str, Any]:
    with fleet.api(asked) as c:
        r = c.get("/usage", params={"group_by": "node"})
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_every_data_node_answers_every_nodes_days(fleet: Fleet, spent: dict[str, int]) -> None:
    for asked in ("a", "b", "c"):  # each a data node: it answers from its own copy

        def caught_up(asked: str = asked) -> dict[str, Any] | None:
            body = by_node(fleet, asked)
            got = {g["key"]: g["total_tokens"] for g in body["groups"]}
            return body if got == spent else None

        body = wait_for(f"{asked}'s copy holds every node's day", caught_up, timeout=30)
        assert body["read"]["served_by"] == asked and body["node"] == asked
        assert body["nodes"] == ["a", "b", "c"]
        assert body["total"]["total_tokens"] == sum(spent.values())
        assert body["total"]["turns"] >= 3 and body["total"]["outcomes"]
        assert body["horizon"]["first_day"] == body["horizon"]["last_day"] == body["to"]
        assert {g["key"]: g["turns"] for g in body["groups"]}.keys() == {"a", "b", "c"}


def test_bad_parameters_answer_400_naming_them(fleet: Fleet) -> None:
    cases = [
        ({"from": "2026-12-02", "to": "2026-12-01"}, "from"),
        ({"from": "2026-01-01", "to": "2026-12-01"}, "to"),
        ({"group_by": "colour"}, "group_by"),
        ({"to": "not-a-day"}, "to"),
    ]
    with fleet.api("a") as c:
        for params, field in cases:
            r = c.get("/usage", params=params)
            assert r.status_code == 400, (params, r.text)
            assert r.json()["error"] == "invalid" and r.json()["detail"]["field"] == field, r.json()


def test_a_node_drained_for_good_still_has_its_spend_answered(fleet: Fleet, spent: dict[str, int]) -> None:
    c = fleet.nodes["c"]
    c.signal(signal.SIGTERM)  # drained, and never started again
    assert c.wait(60) == 0
    left = time.monotonic()

    def without_c() -> bool:
        return "c" not in {n["id"] for n in fleet.view("a")["nodes"]}

    wait_for("c gone from the fleet view", without_c, timeout=30)
    for asked in ("a", "b"):
        body = by_node(fleet, asked)
        got = {g["key"]: g["total_tokens"] for g in body["groups"]}
        assert got == spent, (asked, got, spent)
        assert "c" in body["nodes"]
        assert body["total"]["total_tokens"] == sum(spent.values())  # the org total: every turn's tokens
    # by seat and by model, the same total
    with fleet.api("a") as api:
        for group in ("seat", "model", "phase"):
            r = api.get("/usage", params={"group_by": group})
            assert r.status_code == 200, r.text
            assert sum(g["total_tokens"] for g in r.json()["groups"]) == sum(spent.values()), group
    assert time.monotonic() - left < 120

    out = CliRunner().invoke(
        app, ["usage", "--url", fleet.nodes["a"].url, "--token", TOKEN, "--group-by", "node"]
    )
    assert out.exit_code == 0, out.output
    assert "nodes: a, b, c" in out.output and f"total: {sum(spent.values())} tokens" in out.output
    refused = CliRunner().invoke(
        app, ["usage", "--url", fleet.nodes["a"].url, "--token", TOKEN, "--group-by", "colour"]
    )
    assert refused.exit_code == 2 and "group_by" in refused.output
