"""Agent-to-agent asks through real turns on a running node (CO-36, CO-11, CO-19, FL-124).

One node on the embedded broker, the example company, a scripted OpenAI-compatible server on
loopback that answers by what each request contains (not by arrival order, so review calls and
concurrent seats cannot shift a script). Reviewer requests (the tool list is only ``submit_review``)
are answered ``done``.

- Two seats: an API message makes ``lead`` ask ``dev``; ``dev``'s turn runs on ``a2a_request`` at
  depth 1 owing an ``engine`` reply, charged ``asked_by`` to lead's work item; its final text comes
  back as ``lead``'s next trigger (``a2a_message``), whose prompt holds the brief and the answer.
- A chain ``dev`` → ``docs`` → ``triage`` → ``lead``: the third hop is refused with ``depth_cap`` (the
  tool result ``triage``'s model reads), ``lead`` is never woken; an ``a2a_request`` published at depth
  3 straight into an inbox is refused at intake with ``depth_cap``, without a model call.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from shared.bus import Envelope, inbox_subject
from tests.main_job.llm import OpenAIRouted
from tests.main_job.support import (
    Broker,
    company_with_provider,
    fault_node_file,
    post_message,
    turns_of,
    wait_for,
)
from tests.main_job.wire import OPENAI
from tests.support.llm_servers import Reply, openai_tools
from tests.support.procs import TOKEN, Node, free_port

BRIEF = "Which branch has the lantern fix?"
ANSWER = "The lantern fix is on branch lantern-fix-42."
Q1, Q2, Q3 = "Q1: who owns the release notes?", "Q2: who filed SUP-1?", "Q3: is SUP-1 urgent?"


def _respond(seat: str, body: Any) -> Reply:
    """Answer one request from what it carries (see the module docstring)."""
    names = OPENAI.tool_names(body)
    if names == ["submit_review"]:
        return openai_tools(("submit_review", {"decision": "done", "notes": "fine"}))
    user, done = OPENAI.user_text(body), OPENAI.results(body)
    if not done:
        asks = {
            ("lead", "Ask dev"): ("dev", BRIEF),
            ("dev", "Start the chain"): ("docs", Q1),
            ("docs", Q1): ("triage", Q2),
            ("triage", Q2): ("lead", Q3),
        }
        for (who, marker), (target, brief) in asks.items():
            if seat == who and marker in user and "answered your ask" not in user:
                return openai_tools(("a2a_ask", {"handle": target, "brief": brief}))
        if seat == "dev" and BRIEF in user:
            return openai_tools(
                ("submit_work", {"outcome": "delivered", "summary": "Told lead"}), text=ANSWER
            )
        return openai_tools(("submit_work", {"outcome": "no_action", "summary": f"{seat}: noted"}))
    return openai_tools(
        ("submit_work", {"outcome": "delivered", "summary": f"{seat} asked"}),
        text=f"{seat} answered what it could.",
    )


def _start(start_node: Callable[..., Node], tmp_path: Path, llm: OpenAIRouted, node_id: str) -> Node:
    company = company_with_provider(tmp_path / "company.yaml", OPENAI.entry(llm))
    port = free_port()
    node = start_node(
        "node", "--node", str(fault_node_file(tmp_path / "n", node_id=node_id, port=port)), "--company",
        str(company), port=port,
    )  # fmt: skip
    node.wait_ready()
    return node


def _records(node: Node, seat: str) -> list[dict[str, Any]]:
    """``seat``'s finished turn records, oldest first."""
    rows = [t for t in turns_of(node, seat=seat) if t["outcome"] != "running"]
    return [node.get(f"/turns/{t['turn_id']}").json()["record"] for t in reversed(rows)]


def _executor_requests(llm: OpenAIRouted, seat: str) -> list[Any]:
    return [s.body for s in llm.requests(seat) if OPENAI.tool_names(s.body) != ["submit_review"]]


def test_a_asks_b_and_the_answer_is_a_next_trigger(start_node: Callable[..., Node], tmp_path: Path) -> None:
    with OpenAIRouted(respond=_respond) as llm:
        node = _start(start_node, tmp_path, llm, "asks-1")
        r = httpx.post(
            f"{node.url}/work",
            json={"project": "ENG", "title": "Lantern flicker"},
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=30,
        )
        assert r.status_code == 201, r.text
        item = r.json()["item"]
        r = post_message(node, "lead", "Ask dev which branch has the lantern fix.", work_item=item["key"])
        assert r.status_code in (200, 201, 202), r.text

        def answered() -> list[Any]:
            return [b for b in _executor_requests(llm, "lead") if "answered your ask" in OPENAI.user_text(b)]

        [first, *_] = wait_for("lead's turn on the answer", answered, node=node)
        text = OPENAI.user_text(first)
        assert BRIEF in text and ANSWER in text and "@dev answered your ask" in text

        dev = wait_for("dev's finished turn", lambda: _records(node, "dev"), node=node)
        assert len(dev) == 1
        trigger = dev[0]["trigger"]
        assert (trigger["type"], trigger["source"], trigger["sender"]) == ("a2a_request", "a2a", "lead")
        assert (trigger["delegation_depth"], trigger["reply_mode"]) == (1, "engine")
        assert trigger["payload"]["delegation_chain"] == ["lead"]
        assert dev[0]["outcome"] == "delivered"
        # CO-19: the answering turn is charged to the asker's work item, basis asked_by
        assert dev[0]["work_item"]["key"] == item["key"] and dev[0]["work_item"]["basis"] == "asked_by"

        def lead_turns() -> list[dict[str, Any]]:
            rows = _records(node, "lead")
            return rows if len(rows) >= 2 else []

        lead = wait_for("lead's two turns", lead_turns, node=node)
        assert [t["trigger"]["type"] for t in lead] == ["external_notification", "a2a_message"]
        assert lead[1]["trigger"]["payload"]["answer"] == ANSWER
        assert lead[1]["trigger"]["delegation_depth"] == 1 and lead[1]["trigger"]["reply_mode"] == "none"

        events = node.events()
        opened = [e for e in events if e.get("event") == "a2a_channel_opened"]
        sent = sorted(e["kind"] for e in events if e.get("event") == "a2a_message_sent")
        closed = [e for e in events if e.get("event") == "a2a_channel_closed"]
        assert len(opened) == 1 and sent == ["answer", "request"]
        assert [(e["channel_id"], e["reason"]) for e in closed] == [(opened[0]["channel_id"], "answered")]
        assert Broker(tmp_path / "n" / "store").kv_keys("channels") == [opened[0]["channel_id"]]


def test_a_depth_3_chain_is_refused_with_depth_cap(start_node: Callable[..., Node], tmp_path: Path) -> None:
    with OpenAIRouted(respond=_respond) as llm:
        node = _start(start_node, tmp_path, llm, "asks-2")
        r = post_message(node, "dev", "Start the chain.")
        assert r.status_code in (200, 201, 202), r.text

        def refused() -> list[Any]:
            return [
                res
                for body in _executor_requests(llm, "triage")
                for res in OPENAI.results(body)
                if res.is_error and res.content.get("code") == "depth_cap"
            ]

        [result] = wait_for("triage's refused ask", refused, node=node)[:1]
        assert "lead" in result.content["error"] and result.content["field"] == "handle"
        # the chain unwinds: triage answers docs, docs answers dev, each answer at its ask's depth
        # (a round trip never makes a seat shallower); lead is never asked
        wait_for(
            "dev's turn on docs' answer",
            lambda: any(t["trigger"]["type"] == "a2a_message" for t in _records(node, "dev")),
            node=node,
        )
        depths = {
            seat: [(t["trigger"]["type"], t["trigger"]["delegation_depth"]) for t in _records(node, seat)]
            for seat in ("dev", "docs", "triage")
        }
        assert depths["triage"] == [("a2a_request", 2)]
        assert depths["docs"] == [("a2a_request", 1), ("a2a_message", 2)]
        assert depths["dev"] == [("external_notification", 0), ("a2a_message", 1)]
        assert _records(node, "lead") == [] and _executor_requests(llm, "lead") == []

        # an a2a_request already at the limit, straight into lead's inbox: refused at intake (CO-11 step 4)
        env = Envelope.new(
            "a2a_request",
            source="a2a",
            payload={
                "source": "a2a",
                "text": Q3,
                "sender": "triage",
                "reply_mode": "engine",
                "channel_id": "ch_x",
            },
            delegation_depth=3,
            delegation_chain=["dev", "docs", "triage"],
        )
        Broker(tmp_path / "n" / "store").publish(
            inbox_subject("lead"), env.encode(), {"Nats-Msg-Id": str(uuid.uuid4())}
        )
        [capped] = wait_for("lead's refused turn", lambda: _records(node, "lead"), node=node)
        assert (capped["outcome"], capped["error_kind"]) == ("failed", "depth_cap")
        assert _executor_requests(llm, "lead") == []
