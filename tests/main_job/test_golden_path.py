"""company.md §11's golden path on a running node with the offline provider: GitHub's real
``issues.opened`` delivery, signed, lands as a triage turn that files a work item for the lead,
whose turn moves it on; both turns are recorded, both span trees reach an OTLP/HTTP receiver
under the delivery's trace, and the replay is a duplicate that runs nothing."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.procs import Node

from .support import SECRET, Broker, issue_title, post_github, turns_of, wait_for


def _tree(spans: list[ReceivedSpan], root: ReceivedSpan) -> list[ReceivedSpan]:
    """``root`` and every span below it, stopping at another turn's root (a woken turn's tree)."""
    out, frontier = [root], [root.span_id]
    while frontier:
        kids = [s for s in spans if s.parent_span_id in frontier and s.name != "agent.turn"]
        out += kids
        frontier = [s.span_id for s in kids]
    return out


def test_github_issue_opened_golden_path(start_node: Callable[..., Node], tmp_path: Path) -> None:
    otlp = OtlpReceiver()
    try:
        node = start_node(
            "run",
            "--data-dir",
            str(tmp_path / "data"),
            env={"GITHUB_WEBHOOK_SECRET": SECRET, "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint},
        )
        node.wait_ready()
        broker = Broker(tmp_path / "data" / "node-0")
        delivery = "d6c5a1a0-0000-4000-8000-000000000001"

        r = post_github(node, delivery=delivery)
        assert r.status_code == 202, r.text
        accepted = r.json()
        assert accepted["status"] == "accepted" and accepted["seat"] == "triage"
        trace_id = accepted["trace_id"]
        assert len(trace_id) == 32

        def both_done() -> list[dict[str, Any]] | None:
            rows = turns_of(node)
            done = [t for t in rows if t["outcome"] != "running"]
            return rows if len(done) == 2 else None

        rows = wait_for("two finished turns", both_done, timeout=20, node=node)
        by_seat = {t["seat"]: t for t in rows}
        assert set(by_seat) == {"triage", "lead"}
        triage, lead = by_seat["triage"], by_seat["lead"]
        assert triage["outcome"] == "delivered" and lead["outcome"] == "delivered"
        assert triage["trigger_id"] == accepted["event_id"]
        assert triage["trigger_source"] == "webhook:github"
        assert lead["trigger_source"] == "work"
        assert triage["trace_id"] == lead["trace_id"] == trace_id
        assert triage["work_item"] == lead["work_item"] == "SUP-1"

        # the work item: the GitHub issue's title, filed by triage, assigned to the lead, moved on
        item = node.get("/work/SUP-1").json()
        assert item["title"] == f"[offline] {issue_title()}"
        assert item["reporter"] == "seat:triage" and item["created_by"] == "seat:triage"
        assert item["assignee"] == "lead"
        assert item["status"] == "in_progress"
        assert [(c["author"], c["author_kind"]) for c in item["comments"]] == [("seat:lead", "agent")]
        assert [h["kind"] for h in item["history"]] == ["created", "updated", "commented"]
        assert node.get("/work?project=SUP").json()["count"] == 1
        pages = node.get("/knowledge/pages?space=ENG").json()
        assert "Notes SUP-1" in [p["title"] for p in pages["pages"]]

        # the whole records: charge basis (CO-19), rounds and tools, tokens that add up (CO-22)
        records = {seat: node.get(f"/turns/{t['turn_id']}").json()["record"] for seat, t in by_seat.items()}
        assert records["triage"]["work_item"]["basis"] == "sole_write"
        assert records["lead"]["work_item"]["basis"] == "trigger"
        # each turn ends with submit_work and one review (CO-30, CO-32)
        assert [c["name"] for c in records["triage"]["tool_calls"]] == [
            "create_work_item",
            "submit_work",
            "submit_review",
        ]
        assert [c["name"] for c in records["lead"]["tool_calls"]] == [
            "update_work_item",
            "write_page",
            "comment_on_work_item",
            "submit_work",
            "submit_review",
        ]
        assert [(p["phase"], p["iteration"]) for p in records["lead"]["phases"]] == [
            ("execute", 1),
            ("review", 1),
        ]
        assert records["lead"]["decision"] == "done" and records["lead"]["reply_mode"] == "tool"
        for seat, rec in records.items():
            assert rec["input_tokens"] == sum(r["input_tokens"] for r in rec["rounds"]) > 0, seat
            assert rec["output_tokens"] == sum(r["output_tokens"] for r in rec["rounds"]) > 0, seat
            assert by_seat[seat]["tokens"]["input"] == rec["input_tokens"]
        breakdown = node.get("/tokens/breakdown").json()
        sup1 = next(w for w in breakdown["work_items"] if w["work_item"] == "SUP-1")
        assert sup1["turns"] == 2
        assert sup1["total"] == triage["tokens"]["total"] + lead["tokens"]["total"]

        # the replay: 200 duplicate, nothing published, no third turn
        published = broker.last_seq()
        r = post_github(node, delivery=delivery)
        assert r.status_code == 200 and r.json()["status"] == "duplicate", r.text
        assert broker.last_seq() == published
        metrics = node.get("/metrics").text
        assert 'crewlet_turns_total{outcome="delivered",seat="triage"} 1.0' in metrics
        assert 'crewlet_turns_total{outcome="delivered",seat="lead"} 1.0' in metrics

        # drain flushes the spans: two agent.turn trees under the delivery's trace
        node.signal(signal.SIGTERM)
        assert node.wait(30) == 0, node.output()[-3000:]
        assert len(turns_of_offline(tmp_path)) == 2
        spans = otlp.wait_for("agent.turn", count=2, timeout=10)
        mine = [s for s in spans if s.trace_id == trace_id]
        roots = [s for s in mine if s.name == "agent.turn"]
        assert sorted(s.attributes["crewlet.seat.handle"] for s in roots) == ["lead", "triage"]
        receive = [s for s in mine if s.name == "webhook.receive"]
        assert len(receive) == 1
        ids = {s.span_id for s in mine}
        for root in roots:
            seat = root.attributes["crewlet.seat.handle"]
            row, rec = by_seat[seat], records[seat]
            assert root.parent_span_id in ids  # a child of the delivery's trace, not a new root
            assert root.attributes["crewlet.turn_id"] == row["turn_id"]
            assert root.attributes["crewlet.outcome"] == "delivered"
            assert root.attributes["crewlet.work_item"] == "SUP-1"
            assert root.attributes["gen_ai.usage.input_tokens"] == row["tokens"]["input"]
            assert root.attributes["gen_ai.usage.output_tokens"] == row["tokens"]["output"]
            tree = _tree(mine, root)
            names = [s.name for s in tree]
            assert names.count("agent.turn.execute") == 1 and names.count("agent.turn.review") == 1
            assert names.count("chat crewlet-offline-1") == len(rec["rounds"])
            tools = sorted(n for n in names if n.startswith("execute_tool "))
            assert tools == sorted(f"execute_tool {c['name']}" for c in rec["tool_calls"])
            phases = {s.span_id: s for s in tree if s.name in ("agent.turn.execute", "agent.turn.review")}
            assert all(p.parent_span_id == root.span_id for p in phases.values())
            assert all(
                s.parent_span_id in phases for s in tree if s.name != "agent.turn" and s.span_id not in phases
            )
        triage_root = next(s for s in roots if s.attributes["crewlet.seat.handle"] == "triage")
        lead_root = next(s for s in roots if s.attributes["crewlet.seat.handle"] == "lead")
        assert triage_root.parent_span_id == receive[0].span_id
        create = next(s for s in _tree(mine, triage_root) if s.name == "execute_tool create_work_item")
        assert lead_root.parent_span_id == create.span_id  # the tracker wake carries the tool call's context
    finally:
        otlp.stop()


def turns_of_offline(tmp_path: Path) -> list[dict[str, Any]]:
    """The turn rows in the stopped node's ``node.db`` (history outlives the process)."""
    import sqlite3

    db = sqlite3.connect(str(tmp_path / "data" / "node-0" / "node.db"))
    try:
        return [{"seat": s, "outcome": o} for s, o in db.execute("SELECT seat, outcome FROM turns")]
    finally:
        db.close()
