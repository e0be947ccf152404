"""Inbox coalescing (CO-38) on a running node with a scripted model.

The seat is kept busy by a slow first turn; five API messages sharing one ``conversation_key``
arrive meanwhile. When the slow turn ends, the seat's next drain takes all five, and they make ONE
turn whose trigger lists the five event ids (in timestamp order, FL-85) and whose prompt shows all
five texts; each delivery is acked exactly once after that turn (the node's debug ``inbox_acked``
lines), and every message is ``answered`` by that turn. ``notification_coalesce_max_batch`` is
read from the company: at 3 the same five make two turns (3 + 2).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from shared.turns import work_key
from tests.support.llm_servers import Reply, openai_tools
from tests.support.procs import Node, free_port, node_file

from .llm import OpenAIRouted
from .support import Broker, company_with_provider, post_message, turns_of, wait_for
from .wire import OPENAI

KEY = "github:Codertocat/Hello-World#1"
SLOW = 4.0
"""Seconds the first turn's model answer is held back: the seat is busy while the five arrive."""


def _submit(summary: str, *, delay: float = 0.0) -> Reply:
    reply = openai_tools(("submit_work", {"outcome": "delivered", "summary": summary}))
    reply.delay = delay
    return reply


def _answer(seat: str, body: Any) -> Reply:
    return _submit(f"answered {OPENAI.user_text(body).count('--- message ')} messages")


def _start(
    start_node: Callable[..., Node], tmp_path: Path, llm: OpenAIRouted, **company: Any
) -> tuple[Node, Broker]:
    path = company_with_provider(tmp_path / "company.yaml", OPENAI.entry(llm), **company)
    port = free_port()
    node_path = node_file(tmp_path / "n", node_id="coalesce-1", port=port, logging={"level": "debug"})
    node = start_node("node", "--node", str(node_path), "--company", str(path), name="node", port=port)
    node.wait_ready()
    return node, Broker(tmp_path / "n" / "store")


def _post(node: Node, text: str, **fields: Any) -> dict[str, str]:
    r = post_message(node, "triage", text, **fields)
    assert r.status_code == 202, r.text
    return dict(r.json())


def _message(node: Node, message_id: str) -> dict[str, Any]:
    r = node.get(f"/messages/{message_id}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def _busy_then_five(node: Node, llm: OpenAIRouted) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Start the slow turn, then post five messages of one conversation while it runs."""
    first = _post(node, "Please look at the flaky build")
    llm.wait_requests("triage", 1)  # the slow turn is in its first round
    five = [
        _post(node, f"comment {n} on the issue", conversation_key=KEY, sender=f"user{n}") for n in range(1, 6)
    ]
    running = turns_of(node, seat="triage")
    assert [t["outcome"] for t in running] == ["running"], running  # all five arrived while busy
    return first, five


def _at(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(str(event["timestamp"]))


def _all_answered(node: Node, ids: list[str]) -> list[dict[str, Any]] | None:
    got = [_message(node, i) for i in ids]
    return got if all(m["status"] in ("answered", "failed") for m in got) else None


def test_five_messages_of_one_conversation_make_one_follow_up_turn(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    with OpenAIRouted({"triage": [_submit("looked", delay=SLOW)]}, respond=_answer) as llm:
        node, broker = _start(start_node, tmp_path, llm)
        first, five = _busy_then_five(node, llm)
        ids = [first["message_id"]] + [m["message_id"] for m in five]
        messages = wait_for("every message answered", lambda: _all_answered(node, ids), timeout=30, node=node)

        # exactly two turns: the slow one, and ONE merged follow-up standing for all five
        rows = sorted(turns_of(node, seat="triage"), key=lambda t: t["started_at"])
        assert [t["outcome"] for t in rows] == ["delivered", "delivered"], rows
        slow, merged = rows
        assert slow["trigger_id"] == first["event_id"]
        events = [m["event_id"] for m in five]
        trigger = node.get(f"/turns/{merged['turn_id']}").json()["record"]["trigger"]
        assert trigger["constituent_ids"] == events  # in timestamp order (FL-85)
        assert merged["trigger_id"] == events[0] and merged["work_key"] == work_key(events)
        assert trigger["conversation_key"] == KEY
        assert [p["payload"]["message_id"] for p in trigger["parts"]] == [m["message_id"] for m in five]

        # the model saw every message, in order, each under its own heading
        assert len(llm.requests("triage")) == 2
        prompt = OPENAI.user_text(llm.requests("triage")[1].body)
        positions = [prompt.index(f"comment {n} on the issue") for n in range(1, 6)]
        assert positions == sorted(positions)
        assert prompt.count("--- message ") == 5 and "from user3" in prompt

        # each message answered by its turn: the slow one by the first, the five by the merged one
        assert [(m["status"], m["turn_id"]) for m in messages] == [("answered", slow["turn_id"])] + [
            ("answered", merged["turn_id"])
        ] * 5
        assert {m["reply"] for m in messages[1:]} == {"answered 5 messages"}

        # six deliveries, each acked exactly once (the five after the merged turn), nothing pending;
        # a message reads answered just before its delivery is acked, so wait for the sixth ack line
        def acked() -> list[dict[str, Any]] | None:
            found = [
                e for e in node.events() if e.get("event") == "inbox_acked" and e.get("seat") == "triage"
            ]
            return found if len(found) >= 6 else None

        wait_for("six acks", acked, timeout=10, node=node)
        time.sleep(0.5)  # and no seventh after it
        log = node.events()
        acks = [e for e in log if e.get("event") == "inbox_acked" and e.get("seat") == "triage"]
        assert Counter(e["outcome"] for e in acks) == {"ack": 6}, acks
        assert sorted(Counter(e["stream_seq"] for e in acks).values()) == [1] * 6
        (coalesced,) = [e for e in log if e.get("event") == "notifications_coalesced"]
        assert coalesced["event_ids"] == events and coalesced["conversation_key"] == KEY
        (committed,) = [
            e
            for e in log
            if e.get("event") == "seat_turn_committed" and e.get("turn_id") == merged["turn_id"]
        ]
        assert committed["event_ids"] == events
        assert sorted(committed["stream_seqs"]) == sorted(e["stream_seq"] for e in acks[1:])
        merged_acks = [a for a in acks if a["stream_seq"] in committed["stream_seqs"]]
        assert len(merged_acks) == 5
        assert all(_at(a) >= _at(committed) for a in merged_acks)  # acked after the ledger rows
        state = broker.inbox("triage")
        assert (state["pending"], state["ack_pending"], state["redelivered"]) == (0, 0, 0)
        ledger = broker.kv_keys("ledger")
        assert all(f"triage.{e}" in ledger for e in [first["event_id"], *events])


def test_the_batch_size_comes_from_the_company(start_node: Callable[..., Node], tmp_path: Path) -> None:
    with OpenAIRouted({"triage": [_submit("looked", delay=SLOW)]}, respond=_answer) as llm:
        node, _ = _start(start_node, tmp_path, llm, notification_coalesce_max_batch=3)
        first, five = _busy_then_five(node, llm)
        ids = [first["message_id"]] + [m["message_id"] for m in five]
        wait_for("every message answered", lambda: _all_answered(node, ids), timeout=30, node=node)
        rows = sorted(turns_of(node, seat="triage"), key=lambda t: t["started_at"])
        constituents = [
            node.get(f"/turns/{t['turn_id']}").json()["record"]["trigger"]["constituent_ids"] for t in rows
        ]
        events = [m["event_id"] for m in five]
        assert constituents == [[], events[:3], events[3:]]
        assert not [e for e in node.events() if e.get("event") == "feature_inert" and "coalesce" in str(e)]


def test_messages_without_a_conversation_key_are_never_merged(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    with OpenAIRouted({"triage": [_submit("looked", delay=SLOW)]}, respond=_answer) as llm:
        node, _ = _start(start_node, tmp_path, llm)
        first = _post(node, "Please look at the flaky build")
        llm.wait_requests("triage", 1)
        others = [_post(node, f"unrelated {n}") for n in range(2)]
        ids = [first["message_id"]] + [m["message_id"] for m in others]
        wait_for("every message answered", lambda: _all_answered(node, ids), timeout=30, node=node)
        rows = sorted(turns_of(node, seat="triage"), key=lambda t: t["started_at"])
        assert [t["trigger_id"] for t in rows] == [first["event_id"]] + [m["event_id"] for m in others]
        assert not [e for e in node.events() if e.get("event") == "notifications_coalesced"]
