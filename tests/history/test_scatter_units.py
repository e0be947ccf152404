"""Unit checks of the history scatter protocol (ES-79): the version rule, coverage, and the merge."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import nats.errors
import pytest

from shared import history
from shared.estate import EventLog
from shared.records import TurnStore


def _turn(tid: str, started: float, total: int = 0, node: str = "") -> dict[str, Any]:
    return {"turn_id": tid, "started_at": started, "node": node, "tokens": {"total": total}}


def _ev(t: int, eid: str) -> dict[str, Any]:
    return {"event_time": t, "event_id": eid}


async def test_a_request_of_another_version_is_answered_with_the_version_only(tmp_path: Path) -> None:
    turns = TurnStore(tmp_path / "node.db", node="a")
    try:
        other = await history.answer_request(
            {"v": 2, "what": "turns", "args": {}}, node_id="a", turns=turns, events=None
        )
        assert other == {"v": history.VERSION}
        same = await history.answer_request(
            history.request("turns", {}), node_id="a", turns=turns, events=None
        )
        assert same == {"v": 1, "node": "a", "rows": [], "more": False}
        unknown = await history.answer_request(
            history.request("nope", {}), node_id="a", turns=turns, events=None
        )
        assert unknown["error"]["code"] == "unknown_read"
        # a node without an event log answers event reads with no rows
        none = await history.answer_request(
            history.request("trace", {"trace_id": "t"}), node_id="a", turns=turns, events=None
        )
        assert none["rows"] == [] and "error" not in none
    finally:
        turns.close()


async def test_coverage_names_answered_missing_and_other_version_nodes() -> None:
    async def local(req: dict[str, Any]) -> dict[str, Any]:
        return {"v": 1, "node": "a", "rows": [_turn("ta", 3.0, node="a")], "more": False}

    async def ask(subject: str, body: bytes, timeout: float) -> bytes:
        node = subject.rsplit(".", 1)[1]
        assert subject == history.scatter_subject(node)
        assert history.decode(body)["v"] == 1
        if node == "b":
            return history.encode({"v": 1, "node": "b", "rows": [_turn("tb", 5.0, node="b")], "more": False})
        if node == "v2":  # a node on a build that reshaped the protocol: its version only
            return history.encode({"v": 2})
        if node == "v2rows":  # even if it sent rows, they are not merged
            return history.encode({"v": 2, "node": "v2rows", "rows": [_turn("tx", 9.0)]})
        if node == "dead":
            raise nats.errors.NoRespondersError
        if node == "err":
            return history.encode(
                {"v": 1, "node": "err", "error": {"code": "not_ready", "message": "booting"}}
            )
        await asyncio.sleep(10)  # "slow": past the budget
        raise AssertionError("not reached")

    t0 = time.monotonic()
    answers, cov = await history.gather(
        history.request("turns", {"limit": 10}),
        self_id="a",
        nodes=["a", "b", "v2", "v2rows", "dead", "err", "slow"],
        local=local,
        ask=ask,
        budget=0.3,
    )
    assert time.monotonic() - t0 < 2.0
    assert sorted(answers) == ["a", "b"]
    assert cov.to_dict() == {
        "answered": ["a", "b"],
        "missing": ["dead", "err", "slow"],
        "other_version": ["v2", "v2rows"],
        "reasons": {"dead": "no_responders", "err": "error: not_ready: booting", "slow": "timeout"},
    }
    assert cov.partial
    rows, more = history.merge_rows("turns", answers, limit=10)
    assert [r["turn_id"] for r in rows] == ["tb", "ta"] and not more


async def test_without_a_broker_only_this_node_answers() -> None:
    async def local(req: dict[str, Any]) -> dict[str, Any]:
        return {"v": 1, "node": "a", "rows": [], "more": False}

    answers, cov = await history.gather(
        history.request("turns", {}), self_id="a", nodes=["a", "b"], local=local, ask=None
    )
    assert list(answers) == ["a"] and cov.missing == ["b"] and cov.reasons == {"b": "no_broker"}


def test_merge_is_newest_first_by_time_and_id_within_the_limit() -> None:
    answers = {
        "x": {"rows": [_ev(10, "e"), _ev(6, "a")], "more": False},
        "y": {"rows": [_ev(9, "z"), _ev(6, "b"), _ev(4, "q")], "more": False},
    }
    rows, more = history.merge_rows("events", answers, limit=10)
    assert [(r["event_time"], r["event_id"]) for r in rows] == [
        (10, "e"),
        (9, "z"),
        (6, "b"),
        (6, "a"),
        (4, "q"),
    ]
    assert not more
    rows, more = history.merge_rows("events", answers, limit=3)
    assert [r["event_id"] for r in rows] == ["e", "z", "b"] and more
    # the same event from two nodes is one row
    dup = {"x": {"rows": [_ev(5, "s")]}, "y": {"rows": [_ev(5, "s")]}}
    assert len(history.merge_rows("events", dup, limit=10)[0]) == 1


def test_a_node_with_more_rows_bounds_the_merge_so_no_row_is_skipped() -> None:
    # x sent its newest two of many; y sent all it has. Rows older than x's last (6) may hide x's
    # unsent rows, so the page stops there and says there is more.
    answers = {
        "x": {"rows": [_ev(10, "x1"), _ev(6, "x2")], "more": True},
        "y": {"rows": [_ev(9, "y1"), _ev(8, "y2"), _ev(5, "y3"), _ev(4, "y4")], "more": False},
    }
    rows, more = history.merge_rows("events", answers, limit=5)
    assert [r["event_id"] for r in rows] == ["x1", "y1", "y2", "x2"] and more


def test_turns_merge_by_tokens_when_asked() -> None:
    answers = {
        "a": {"rows": [_turn("a1", 1.0, 50), _turn("a2", 2.0, 5)]},
        "b": {"rows": [_turn("b1", 3.0, 20)]},
    }
    rows, _ = history.merge_rows("turns", answers, limit=2, sort="-tokens")
    assert [r["turn_id"] for r in rows] == ["a1", "b1"]
    rows, _ = history.merge_rows("turns", answers, limit=3)
    assert [r["turn_id"] for r in rows] == ["b1", "a2", "a1"]


def test_token_rollups_are_summed_across_nodes() -> None:
    def tok(n: int) -> dict[str, int]:
        return {"input": n, "output": n, "total": 2 * n, "turns": 1}

    answers = {
        "a": {
            "breakdown": {
                "seat_day": [{"seat": "dev", "day": "2026-11-29", **tok(1)}],
                "org_day": [{"day": "2026-11-29", **tok(1)}],
                "work_items": [{"work_item": "SUP-1", **tok(1)}],
            }
        },
        "b": {
            "breakdown": {
                "seat_day": [
                    {"seat": "dev", "day": "2026-11-29", **tok(2)},
                    {"seat": "qa", "day": "2026-11-28", **tok(3)},
                ],
                "org_day": [{"day": "2026-11-28", **tok(3)}, {"day": "2026-11-29", **tok(2)}],
                "work_items": [{"work_item": "SUP-1", **tok(2)}],
            }
        },
    }
    out = history.merge_tokens(answers)
    assert out["seat_day"] == [
        {"seat": "qa", "day": "2026-11-28", "input": 3, "output": 3, "total": 6, "turns": 1},
        {"seat": "dev", "day": "2026-11-29", "input": 3, "output": 3, "total": 6, "turns": 2},
    ]
    assert [(r["day"], r["turns"]) for r in out["org_day"]] == [("2026-11-28", 1), ("2026-11-29", 2)]
    assert out["work_items"] == [{"work_item": "SUP-1", "input": 3, "output": 3, "total": 6, "turns": 2}]


async def test_a_data_node_answers_event_pages_and_traces(tmp_path: Path) -> None:
    log = EventLog.open(tmp_path / "node.db", node_id="d")
    try:
        for i in range(5):
            log.record({"event_time": 1000 + i, "event_id": f"e{i}", "event_type": "x", "trace_id": "t1"})
        await log.flush()
        page = await history.answer_request(
            history.request("events", {"limit": 2, "filters": {"event_type": "x"}}),
            node_id="d",
            turns=None,
            events=log,
        )
        assert [r["event_id"] for r in page["rows"]] == ["e4", "e3"] and page["more"]
        trace = await history.answer_request(
            history.request("trace", {"trace_id": "t1"}), node_id="d", turns=None, events=log
        )
        assert len(trace["rows"]) == 5 and not trace["more"]
        bad = await history.answer_request(
            history.request("events", {"limit": 2, "before": "nonsense"}), node_id="d", turns=None, events=log
        )
        assert bad["error"]["code"] == "invalid"
    finally:
        log.close()


@pytest.mark.parametrize("what", history.WHATS)
def test_every_read_has_a_subject_per_node(what: str) -> None:
    assert history.scatter_subject("n1") == "crewlet.history.scatter.n1"
    assert history.request(what, {})["v"] == history.VERSION
